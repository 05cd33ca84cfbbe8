"""Who teaches the size learner: each partition itself, all into one R, or one partition (the seed) — side by side.

The learner (cuvee/cluster/threshold.py) is pure, so both policies run on the same simulated stream: P partitions
commit in turn; a segment of ``rows`` rows with a dictionary-encoded user column of cardinality C weighs
``rows * FIXED + distinct(rows, C) * VALUE`` bytes (distinct = C·(1 − (1 − 1/C)^rows): why bytes per row depend on
the row count, and why the seed learns instead of dividing once). Scenarios: all partitions alike with a
cardinality shift mid-stream (the seed's case), and skewed streams where some partitions' rows are wider than the
others' (a heavy key hashed to one partition), committing in turn or in random order. Printed per policy: the
share of segments within ±15% of the target, the largest and smallest segment, and how many rounds after the shift
until every partition is back within ±15%.

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


def simulate(policy: str | int, partitions: int, rounds: int, shift_round: int,
             cardinality: tuple[float, float], widths: list[float], shuffled: bool = False,
             seed: int = 1) -> dict[str, float]:
    rnd = random.Random(seed)
    learner = SizeLearner(SizePolicy(DESIRED, initial_rows=1_000, learning=policy))
    thresholds = [learner.first_threshold()] * partitions
    ratios: list[tuple[int, int, float]] = []  # (round, partition, size / desired)
    for rnd_no in range(rounds):
        card = cardinality[0] if rnd_no < shift_round else cardinality[1]
        order = list(range(partitions))
        if shuffled:
            rnd.shuffle(order)
        for p in order:
            rows = thresholds[p]
            size = segment_size(rows, card, widths[p], rnd)
            ratios.append((rnd_no, p, size / DESIRED))
            committed = CommittedSegment(partition=p, rows=rows, size_bytes=size, row_threshold=rows)
            # Each partition's next threshold is set at its own commit, as the controller does.
            learner, thresholds[p] = learner.on_commit(committed)
    settled_from = next((r for r in range(shift_round, rounds)
                         if all(abs(x - 1) <= TOLERANCE for rr, _, x in ratios if rr >= r)), None)
    steady = [x for r, _, x in ratios if r >= 5]
    return {"within": sum(abs(x - 1) <= TOLERANCE for x in steady) / len(steady),
            "max": max(x for _, _, x in ratios),
            "min": min(x for r, _, x in ratios if r >= 5),
            "settle": (settled_from - shift_round) if settled_from is not None else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    p, rounds, shift = args.partitions, args.rounds, args.rounds // 2
    scenarios = {
        "alike, cardinality 50 → 5,000": ((50, 5_000), [1.0] * p, False),
        "alike, cardinality 5,000 → 50": ((5_000, 50), [1.0] * p, False),
        "partition 0 rows 1.5× wider": ((500, 500), [1.5] + [1.0] * (p - 1), False),
        "partition 3 rows 1.5× wider": ((500, 500), [1.0] * 3 + [1.5] + [1.0] * (p - 4), False),
        "partition 3 rows 10× wider, random order": ((500, 500), [1.0] * 3 + [10.0] + [1.0] * (p - 4), True),
        "half the partitions 3× wider, random order": ((500, 500), [3.0, 1.0] * (p // 2), True),
    }
    table = Table(title=f"size learner: who learns ({p} partitions, {rounds} rounds, "
                        f"{DESIRED // 1024} KiB desired)")
    for column in ("scenario", "policy", "segments within ±15% (from round 5)", "largest / target",
                   "smallest / target (from round 5)", "rounds after the shift until all within ±15%"):
        table.add_column(column)
    for name, (cardinality, widths, shuffled) in scenarios.items():
        for policy, label in (("each", "each"), ("all", "all"), (0, "partition 0")):
            r = simulate(policy, p, rounds, shift, cardinality, widths, shuffled)
            table.add_row(name, label, f"{r['within']:.0%}", f"{r['max']:.2f}", f"{r['min']:.2f}",
                          "never" if r["settle"] != r["settle"] else str(int(r["settle"])))
    Console(width=170).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
