"""A reader thread running while the writer appends always sees a prefix of the input, without locks."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cuvee.config.schema import Schema
from cuvee.config.table import IndexingConfig
from cuvee.segment.mutable import MutableSegment

SCHEMA = Schema.from_json(
    {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "country", "dataType": "STRING"},
            {"name": "user", "dataType": "STRING"},
            {"name": "tags", "dataType": "STRING", "singleValueField": False},
            {"name": "codes", "dataType": "LONG", "singleValueField": False},
            {"name": "flag", "dataType": "BOOLEAN"},
        ],
        "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"}],
    }
)
# "user" raw with long values and multi-value lists of up to 6: the growing stores must reallocate while read.
INDEXING = IndexingConfig(inverted_index_columns=("country", "tags"), no_dictionary_columns=("user", "flag"))


@pytest.fixture(autouse=True)
def frequent_thread_switches() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(previous)


def make_rows(count: int, seed: int = 3) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(count):
        rows.append({
            "country": None if i % 11 == 0 else f"c{rng.integers(0, 40)}-{i // 500}",
            "user": f"user-{i}-" + "u" * int(rng.integers(0, 40)),
            "tags": None if i % 13 == 0 else [f"t{t}" for t in rng.integers(0, 50, rng.integers(0, 7))],
            "codes": [int(c) for c in rng.integers(0, 10**12, rng.integers(0, 7))],
            "clicks": None if i % 7 == 0 else i,
            "flag": bool(i % 3),
        })
    return rows


def test_concurrent_reader_always_sees_a_consistent_prefix() -> None:
    rows = make_rows(6_000)
    expected = pa.Table.from_pylist(rows, schema=SCHEMA.arrow_schema())
    t7_docs = {doc for doc, row in enumerate(rows) if row["tags"] and "t7" in row["tags"]}
    segment = MutableSegment(SCHEMA, INDEXING, len(rows))
    done = threading.Event()
    failures: list[str] = []
    seen_sizes: list[int] = []

    def read() -> None:
        while not done.is_set() or not seen_sizes or seen_sizes[-1] < len(rows):
            count = segment.num_docs
            snapshot = segment.snapshot(count).cast(SCHEMA.arrow_schema())
            if not snapshot.equals(expected.slice(0, count)):
                failures.append(f"snapshot of {count} rows differs from the input prefix")
                return
            docs = set(segment.inverted_index("tags", "t7", num_docs=count))
            if docs != {d for d in t7_docs if d < count}:
                failures.append(f"inverted index of {count} rows differs from a scan")
                return
            seen_sizes.append(count)

    reader = threading.Thread(target=read)
    reader.start()
    position = 0
    rng = np.random.default_rng(5)
    while position < len(rows):
        size = int(rng.integers(1, 61))
        batch = expected.slice(position, size).to_batches()[0]
        position += segment.append(batch, np.arange(position, position + batch.num_rows))
    done.set()
    reader.join(timeout=60)
    assert not reader.is_alive()
    assert failures == []
    assert segment.num_docs == len(rows)
    distinct_sizes = set(seen_sizes)
    assert len(distinct_sizes) > 5, "the reader never ran while the writer was appending"
    assert max(distinct_sizes) == len(rows)
