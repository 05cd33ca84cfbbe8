"""Immutable segment build time for the 10-column event (issue 2 target: <= 2 s per 1M rows).

Input shapes: a real MutableSegment.snapshot(), a dictionary-encoded Arrow table shaped like it (dimensions as
DictionaryArrays with insertion-ordered dictionaries), and the same rows as plain Arrow arrays.

    .venv/bin/python bench/immutable_build.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import numpy as np
import pyarrow as pa

from cuvee.config.table import IndexingConfig
from cuvee.segment.builder import build_segment
from _events import SCHEMA, event_table

def as_mutable_snapshot(table: pa.Table) -> pa.Table:
    """Dimensions dictionary-encoded in insertion order, as MutableSegment.snapshot() hands them over."""
    dims = {f.name for f in SCHEMA.fields if f.role.value == "dimensionFieldSpecs" or f.name == "ts"}
    return pa.table(
        {name: (table[name].combine_chunks().dictionary_encode() if name in dims else table[name]) for name in table.column_names}
    )


def real_mutable_snapshot(table: pa.Table, indexing: IndexingConfig) -> pa.Table:
    """The rows appended to an actual MutableSegment, snapshotted."""
    from cuvee.segment.mutable import MutableSegment

    segment = MutableSegment(SCHEMA, indexing, capacity_rows=table.num_rows, time_column="ts")
    for batch in table.to_batches(max_chunksize=10_000):
        segment.append(batch, np.arange(batch.num_rows))
    return segment.snapshot()


def time_build(table: pa.Table, indexing: IndexingConfig, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        out = tempfile.mkdtemp(prefix="cuvee-bench-")
        try:
            start = time.perf_counter()
            build_segment(table, SCHEMA, indexing, out, "events_0", time_column="ts")
            best = min(best, time.perf_counter() - start)
        finally:
            shutil.rmtree(out)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plain = event_table(args.rows)
    snapshot = as_mutable_snapshot(plain)
    per_million = 1_000_000 / args.rows
    configs = {
        "no indexes": IndexingConfig(),
        "inverted(country,device,page,user)+sorted(country)": IndexingConfig(
            inverted_index_columns=("country", "device", "page", "user"), sorted_column="country"
        ),
    }
    for label, indexing in configs.items():
        shapes = {
            "MutableSegment.snapshot()": real_mutable_snapshot(plain, indexing),
            "dictionary-encoded arrow": snapshot,
            "plain arrow": plain,
        }
        for shape, table in shapes.items():
            seconds = time_build(table, indexing, args.repeat)
            print(
                f"immutable build [{shape}, {label}]: {args.rows:,} rows in {seconds:.3f} s "
                f"= {seconds * per_million:.3f} s per 1M rows ({args.rows / seconds:,.0f} rows/s)"
            )


if __name__ == "__main__":
    main()
