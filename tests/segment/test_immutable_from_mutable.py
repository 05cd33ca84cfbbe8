"""Building from MutableSegment.snapshot() gives the same segment (same CRC, same bytes) as building from the rows."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings

from cuvee.config.table import IndexingConfig
from cuvee.segment.builder import build_segment
from cuvee.segment.format import data_files
from cuvee.segment.mutable import MutableSegment
from tests.segment.segment_helpers import row_multiset, table_of
from tests.segment.test_immutable_builder import FULL_INDEXING, ROWS, SCHEMA
from tests.segment.test_immutable_roundtrip import segments

_counter = itertools.count()


def _same_files(a: Path, b: Path) -> bool:
    return [(f.name, f.read_bytes()) for f in data_files(a)] == [(f.name, f.read_bytes()) for f in data_files(b)]


def test_snapshot_and_plain_rows_give_identical_segments(tmp_path: Path) -> None:
    rows = table_of(SCHEMA, ROWS)
    mutable = MutableSegment(SCHEMA, FULL_INDEXING, capacity_rows=100, time_column="ts")
    for batch in rows.to_batches(max_chunksize=4):
        mutable.append(batch, np.arange(batch.num_rows))
    snapshot = mutable.snapshot()
    assert any(str(t).startswith("dictionary") for t in snapshot.schema.types)  # really the dictionary path
    from_snapshot = build_segment(snapshot, SCHEMA, FULL_INDEXING, tmp_path / "m", "s", time_column="ts")
    from_rows = build_segment(rows, SCHEMA, FULL_INDEXING, tmp_path / "p", "s", time_column="ts")
    assert from_snapshot.crc == from_rows.crc
    assert _same_files(from_snapshot.path, from_rows.path)


def test_prefix_snapshot_ignores_dictionary_values_of_later_rows(tmp_path: Path) -> None:
    rows = table_of(SCHEMA, ROWS)
    mutable = MutableSegment(SCHEMA, FULL_INDEXING, capacity_rows=100, time_column="ts")
    mutable.append(rows.to_batches()[0], np.arange(rows.num_rows))
    prefix = build_segment(mutable.snapshot(3), SCHEMA, FULL_INDEXING, tmp_path / "m", "s")
    expected = build_segment(rows.slice(0, 3), SCHEMA, FULL_INDEXING, tmp_path / "p", "s")
    assert prefix.crc == expected.crc
    assert prefix.dictionary("country").to_pylist() == ["fr", "us"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=segments())
def test_random_rows_through_the_mutable_segment(tmp_path: Path, case: tuple) -> None:
    schema, table, indexing, _ = case
    indexing = IndexingConfig(
        inverted_index_columns=indexing.inverted_index_columns,
        no_dictionary_columns=indexing.no_dictionary_columns,
        sorted_column=indexing.sorted_column,
    )
    base = tmp_path / f"run{next(_counter)}"
    mutable = MutableSegment(schema, indexing, capacity_rows=max(table.num_rows, 1))
    for batch in table.to_batches(max_chunksize=7):
        mutable.append(batch, np.arange(batch.num_rows))
    from_snapshot = build_segment(mutable.snapshot(), schema, indexing, base / "m", "s")
    from_rows = build_segment(table, schema, indexing, base / "p", "s")
    assert row_multiset(from_snapshot.to_arrow()) == row_multiset(table)
    assert from_snapshot.crc == from_rows.crc
