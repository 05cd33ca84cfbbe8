"""Auto-tuned segment sizes through shifts of the rows' cardinality: segment size against the desired size.

An in-process cluster (1 server, one partition) with ``realtime.segment.flush.threshold.rows = 0`` and a desired
segment size ingests rows whose ``user`` column changes cardinality at each phase (50, then 5,000, then 500 values
by default); the script prints every committed segment's size against the target, how many segments each phase
took to come within ±15% of it, the largest segment relative to it, and writes a PNG plot (matplotlib: the
``bench`` extra, ``.venv/bin/pip install -e '.[bench]'``).

    .venv/bin/python bench/autotune.py [--segments-per-phase 12] [--desired-kib 64] [--out build/bench/autotune.png]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuvee.testing.cluster import InProcessCluster  # noqa: E402
from cuvee.testing.waiting import wait_until  # noqa: E402

TABLE = "autotune"
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "user", "dataType": "STRING"},
                                                       {"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
TOLERANCE = 0.15


def run(cardinalities: list[int], segments_per_phase: int, desired: int, batch_rows: int) -> list[dict]:
    """Committed segments' metadata in order, each with the phase whose rows it holds most of."""
    with tempfile.TemporaryDirectory() as root, InProcessCluster(Path(root), servers=1) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=0, **{
            "realtime.segment.flush.threshold.segment.size": str(desired),
            "realtime.segment.flush.autotune.initialRows": "1000"})
        rnd = random.Random(1)
        produced, phase_starts = 0, []

        def committed() -> list[dict]:
            records = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/metadata").json().values()
            return sorted((r for r in records if r["status"] == "DONE"), key=lambda r: r["sequence"])

        for cardinality in cardinalities:
            phase_starts.append(produced)
            goal = len(committed()) + segments_per_phase
            while len(committed()) < goal:
                rows = ({"user": f"user-{rnd.randrange(cardinality)}", "id": produced + i, "v": rnd.randrange(1000)}
                        for i in range(batch_rows))
                cluster.produce(configs, rows, key_field="id")
                produced += batch_rows
                wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == produced, 120)
        done = committed()
    for record in done:
        middle = (record["startOffset"] + record["endOffset"]) / 2
        record["phase"] = max(i for i, start in enumerate(phase_starts) if start <= middle)
    return done


def report(done: list[dict], desired: int, cardinalities: list[int]) -> None:
    print(f"{'segment':>7} {'phase':>5} {'rows':>8} {'bytes':>9} {'size/target':>11} {'B/row learned':>13}")
    for r in done:
        ratio = r["sizeBytes"] / desired
        print(f"{r['sequence']:>7} {r['phase']:>5} {r['totalDocs']:>8,} {r['sizeBytes']:>9,} {ratio:>11.2f} "
              f"{r.get('bytesPerRow') or 0:>13.1f}")
    print()
    for phase, cardinality in enumerate(cardinalities):
        ratios = [r["sizeBytes"] / desired for r in done if r["phase"] == phase]
        settled = next((i for i, x in enumerate(ratios) if all(abs(y - 1) <= TOLERANCE for y in ratios[i:])), None)
        after5 = ratios[5:]
        print(f"phase {phase} (cardinality {cardinality:,}): {len(ratios)} segments; within ±15% from its segment "
              f"{settled if settled is not None else 'never'} on; after 5 segments "
              f"{'all within ±15%' if after5 and all(abs(x - 1) <= TOLERANCE for x in after5) else 'NOT all within'}"
              f"; largest {max(ratios):.2f}× the target")
    print(f"largest segment overall: {max(r['sizeBytes'] for r in done) / desired:.2f}× the target (goal < 2×)")


def plot(done: list[dict], desired: int, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is missing (.venv/bin/pip install -e '.[bench]')")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    xs = [r["sequence"] for r in done]
    ax.plot(xs, [r["sizeBytes"] / 1024 for r in done], marker="o", markersize=3, label="segment size")
    ax.axhline(desired / 1024, color="black", linewidth=1, label="desired size")
    ax.axhspan(desired * (1 - TOLERANCE) / 1024, desired * (1 + TOLERANCE) / 1024, color="green", alpha=0.1,
               label="±15%")
    for previous, current in zip(done, done[1:]):
        if current["phase"] != previous["phase"]:
            ax.axvline(current["sequence"] - 0.5, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("segment (sequence)")
    ax.set_ylabel("KiB")
    ax.set_title("Auto-tuned segment size through cardinality shifts")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot: {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments-per-phase", type=int, default=12)
    parser.add_argument("--cardinalities", default="50,5000,500")
    parser.add_argument("--desired-kib", type=int, default=64)
    parser.add_argument("--batch-rows", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=Path("build/bench/autotune.png"))
    args = parser.parse_args()
    cardinalities = [int(c) for c in args.cardinalities.split(",")]
    desired = args.desired_kib * 1024
    started = time.perf_counter()
    done = run(cardinalities, args.segments_per_phase, desired, args.batch_rows)
    report(done, desired, cardinalities)
    plot(done, desired, args.out)
    print(f"{len(done)} segments in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
