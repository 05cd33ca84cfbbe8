"""Rows/s appended into a MutableSegment on one core (issue 2 target: >= 300k rows/s).

The 10-column event: 4 string dimensions with 10, 100, 1,000 and 10,000 distinct values, 4 numeric metrics,
a TIMESTAMP and a LONG id, appended from pre-decoded Arrow batches of 10k rows.

    .venv/bin/python bench/mutable_append.py [--rows 1000000] [--batch 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from cuvee.config.table import IndexingConfig
from cuvee.segment.mutable import MutableSegment
from _events import DIMENSIONS, SCHEMA, event_batches


# The layouts measured: Pinot's defaults; high-cardinality id and time raw (what a Pinot user would configure);
# the same plus inverted indexes on the four string dimensions.
CONFIGS = {
    "all dimensions dictionary-encoded": IndexingConfig(),
    "id+ts raw": IndexingConfig(no_dictionary_columns=("event_id", "ts")),
    "id+ts raw, 4 inverted indexes": IndexingConfig(
        no_dictionary_columns=("event_id", "ts"), inverted_index_columns=DIMENSIONS
    ),
}


def time_appends(batches: list[pa.RecordBatch], indexing: IndexingConfig, repeat: int) -> tuple[float, int]:
    rows = sum(b.num_rows for b in batches)
    best = float("inf")
    used = 0
    for _ in range(repeat):
        segment = MutableSegment(SCHEMA, indexing, rows, name="events__0__0__bench", time_column="ts")
        offsets = [np.arange(i * b.num_rows, (i + 1) * b.num_rows, dtype=np.int64) for i, b in enumerate(batches)]
        start = time.perf_counter()
        for batch, batch_offsets in zip(batches, offsets):
            segment.append(batch, batch_offsets)
        best = min(best, time.perf_counter() - start)
        assert segment.num_docs == rows
        used = sum(segment.bytes_used().values())
    return best, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    batches = event_batches(args.rows, args.batch)
    print(f"mutable append: {args.rows:,} rows in batches of {args.batch:,}, best of {args.repeat}")
    for label, indexing in CONFIGS.items():
        seconds, used = time_appends(batches, indexing, args.repeat)
        print(f"  {label:<36} {args.rows / seconds:>12,.0f} rows/s   {used / args.rows:6.1f} bytes/row")


if __name__ == "__main__":
    main()
