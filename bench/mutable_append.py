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

from cuvee.config.schema import Schema
from cuvee.config.table import IndexingConfig
from cuvee.segment.mutable import MutableSegment

SCHEMA = Schema.from_json(
    {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "country", "dataType": "STRING"},
            {"name": "device", "dataType": "STRING"},
            {"name": "page", "dataType": "STRING"},
            {"name": "user", "dataType": "STRING"},
            {"name": "event_id", "dataType": "LONG"},
        ],
        "metricFieldSpecs": [
            {"name": "clicks", "dataType": "INT"},
            {"name": "views", "dataType": "LONG"},
            {"name": "revenue", "dataType": "DOUBLE"},
            {"name": "latency", "dataType": "FLOAT"},
        ],
        "dateTimeFieldSpecs": [
            {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
        ],
    }
)
CARDINALITIES = {"country": 10, "device": 100, "page": 1_000, "user": 10_000}
DIMENSIONS = tuple(CARDINALITIES)

# The layouts measured: Pinot's defaults; high-cardinality id and time raw (what a Pinot user would configure);
# the same plus inverted indexes on the four string dimensions.
CONFIGS = {
    "all dimensions dictionary-encoded": IndexingConfig(),
    "id+ts raw": IndexingConfig(no_dictionary_columns=("event_id", "ts")),
    "id+ts raw, 4 inverted indexes": IndexingConfig(
        no_dictionary_columns=("event_id", "ts"), inverted_index_columns=DIMENSIONS
    ),
}


def event_batches(rows: int, batch_rows: int, seed: int = 7) -> list[pa.RecordBatch]:
    """Decoded 10-column events as Arrow batches of the schema's types."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {}
    for name, cardinality in CARDINALITIES.items():
        words = np.array([f"{name}-{i:05d}" for i in rng.permutation(cardinality)], dtype=object)
        columns[name] = pa.array(words[rng.integers(0, cardinality, rows)], pa.string())
    columns["event_id"] = pa.array(np.arange(rows, dtype=np.int64) * 7 + 1_000_000_000)
    columns["clicks"] = pa.array(rng.integers(0, 10, rows, dtype=np.int32))
    columns["views"] = pa.array(rng.integers(0, 1_000, rows, dtype=np.int64))
    columns["revenue"] = pa.array(rng.random(rows) * 100)
    columns["latency"] = pa.array(rng.random(rows).astype(np.float32))
    millis = 1_790_000_000_000 + np.sort(rng.integers(0, 3_600_000, rows))
    columns["ts"] = pa.array(millis).cast(pa.timestamp("ms"))
    table = pa.table(columns).select(SCHEMA.column_names).cast(SCHEMA.arrow_schema())
    return table.combine_chunks().to_batches(max_chunksize=batch_rows)


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
