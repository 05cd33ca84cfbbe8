"""One partition learns, or all do: the size learner's two policies side by side, on a model of segment size.

The learner (cuvee/cluster/threshold.py) is pure, so both policies run on the same simulated stream: P partitions
commit in turn; a segment of ``rows`` rows with a dictionary-encoded user column of cardinality C weighs
``rows * FIXED + distinct(rows, C) * VALUE`` bytes (distinct = C·(1 − (1 − 1/C)^rows): why bytes per row depend on
the row count, and why the seed learns instead of dividing once). Scenarios: all partitions alike with a
cardinality shift mid-stream (the seed's case), and a skewed stream where one partition's rows are wider than the
others' (a heavy key hashed to one partition). Printed per policy: the share of segments within ±15% of the
target, the largest segment, and how many rounds after the shift until every partition is back within ±15%.

    .venv/bin/python bench/autotune_policies.py [--partitions 8] [--rounds 40]
"""

from __future__ import annotations

import argparse
import random

from rich.console import Console
from rich.table import Table

from cuvee.cluster.threshold import CommittedSegment, SizeLearner, SizePolicy

FIXED = 20  # bytes per row outside the dictionary: the id, the metric, the user column's dictionary id
VALUE = 60  # bytes per distinct user value in the dictionary
DESIRED = 256 * 1024
TOLERANCE = 0.15


def segment_size(rows: int, cardinality: float, width: float, rnd: random.Random) -> int:
    distinct = cardinality * (1 - (1 - 1 / cardinality) ** rows)
    return int((rows * FIXED + distinct * VALUE) * width * rnd.uniform(0.98, 1.02))


def simulate(policy_name: str, partitions: int, rounds: int, shift_round: int,
             cardinality: tuple[float, float], widths: list[float], seed: int = 1) -> dict[str, float]:
    rnd = random.Random(seed)
    learner = SizeLearner(SizePolicy(DESIRED, initial_rows=1_000))
    thresholds = [learner.first_threshold()] * partitions
    ratios: list[tuple[int, int, float]] = []  # (round, partition, size / desired)
    for rnd_no in range(rounds):
        card = cardinality[0] if rnd_no < shift_round else cardinality[1]
        for p in range(partitions):
            rows = thresholds[p]
            size = segment_size(rows, card, widths[p], rnd)
            ratios.append((rnd_no, p, size / DESIRED))
            committed = CommittedSegment(partition=p if policy_name == "one" else 0, rows=rows, size_bytes=size,
                                         row_threshold=rows)
            # Each partition's next threshold is set at its own commit, as the controller does; with "one" only
            # partition 0's segments move R (SizePolicy.learning_partition), "all" teaches it every segment.
            learner, thresholds[p] = learner.on_commit(committed)
    settled_from = next((r for r in range(shift_round, rounds)
                         if all(abs(x - 1) <= TOLERANCE for rr, _, x in ratios if rr >= r)), None)
    steady = [x for r, _, x in ratios if r >= 5]
    return {"within": sum(abs(x - 1) <= TOLERANCE for x in steady) / len(steady),
            "max": max(x for _, _, x in ratios),
            "settle": (settled_from - shift_round) if settled_from is not None else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    p, rounds, shift = args.partitions, args.rounds, args.rounds // 2
    scenarios = {
        "alike, cardinality 50 → 5,000": ((50, 5_000), [1.0] * p),
        "alike, cardinality 5,000 → 50": ((5_000, 50), [1.0] * p),
        "partition 0 rows 1.5× wider": ((500, 500), [1.5] + [1.0] * (p - 1)),
        "partition 3 rows 1.5× wider": ((500, 500), [1.0] * 3 + [1.5] + [1.0] * (p - 4)),
    }
    table = Table(title=f"size learner: one partition learns vs all ({p} partitions, {rounds} rounds, "
                        f"{DESIRED // 1024} KiB desired)")
    for column in ("scenario", "policy", "segments within ±15% (from round 5)", "largest / target",
                   "rounds after the shift until all within ±15%"):
        table.add_column(column)
    for name, (cardinality, widths) in scenarios.items():
        for policy in ("one", "all"):
            r = simulate(policy, p, rounds, shift, cardinality, widths)
            table.add_row(name, policy, f"{r['within']:.0%}", f"{r['max']:.2f}",
                          "never" if r["settle"] != r["settle"] else str(int(r["settle"])))
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
