"""Property tests: random rows of every data type (single- and multi-value, with nulls) survive build -> load."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.config.schema import DataType, FieldRole
from cuvee.config.table import IndexingConfig
from cuvee.segment.builder import build_segment
from cuvee.segment.format import data_files
from tests.segment.segment_helpers import normalise, row_multiset, schema_of, table_of

_counter = itertools.count()

VALUES: dict[DataType, st.SearchStrategy] = {
    DataType.INT: st.integers(-(2**31), 2**31 - 1),
    DataType.LONG: st.integers(-(2**63), 2**63 - 1),
    DataType.FLOAT: st.floats(width=32, allow_nan=True),
    DataType.DOUBLE: st.floats(allow_nan=True) | st.sampled_from([0.0, -0.0, float("nan")]),
    DataType.BOOLEAN: st.booleans(),
    DataType.TIMESTAMP: st.integers(-(2**40), 2**42),
    DataType.STRING: st.text(max_size=6),
    DataType.BYTES: st.binary(max_size=6),
    DataType.JSON: st.sampled_from(['{"a":1}', "[]", "null", '"x"']),
}


@st.composite
def segments(draw: st.DrawFn) -> tuple:
    """A schema with 1-4 columns, rows for it, and an indexing config that exercises every layout."""
    n_cols = draw(st.integers(1, 4))
    fields, columns = [], {}
    n_rows = draw(st.integers(0, 30))
    for i in range(n_cols):
        data_type = draw(st.sampled_from(list(DataType)))
        single = draw(st.booleans())
        name = f"c{i}"
        fields.append((name, data_type, single, FieldRole.DIMENSION))
        element = VALUES[data_type]
        # few distinct values so dictionaries repeat, sometimes many
        pool = draw(st.lists(element, min_size=1, max_size=8))
        pick = st.sampled_from(pool) if draw(st.booleans()) else element
        if single:
            columns[name] = draw(st.lists(st.none() | pick, min_size=n_rows, max_size=n_rows))
        else:
            columns[name] = draw(st.lists(st.none() | st.lists(pick, max_size=4), min_size=n_rows, max_size=n_rows))
    schema = schema_of(*fields)
    names = [f[0] for f in fields]
    single_names = [f[0] for f in fields if f[2]]
    indexing = IndexingConfig(
        no_dictionary_columns=tuple(draw(st.lists(st.sampled_from(names), unique=True))),
        sorted_column=draw(st.none() | st.sampled_from(single_names)) if single_names else None,
    )
    inverted = [c for c in draw(st.lists(st.sampled_from(names), unique=True)) if c not in indexing.no_dictionary_columns]
    indexing = IndexingConfig(
        inverted_index_columns=tuple(inverted),
        no_dictionary_columns=indexing.no_dictionary_columns,
        sorted_column=indexing.sorted_column,
        bloom_filter_columns=tuple(draw(st.lists(st.sampled_from(names), unique=True))),
    )
    return schema, table_of(schema, columns), indexing, draw(st.randoms(use_true_random=False))


def _batches(table: pa.Table, rnd) -> list[pa.RecordBatch]:
    """The same rows cut at random places."""
    cuts = sorted(rnd.sample(range(table.num_rows + 1), k=min(3, table.num_rows + 1)))
    bounds = [0, *cuts, table.num_rows]
    return [b for start, end in zip(bounds, bounds[1:]) for b in table.slice(start, end - start).to_batches()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=segments())
def test_round_trip_and_determinism(tmp_path: Path, case: tuple) -> None:
    schema, table, indexing, rnd = case
    base = tmp_path / f"run{next(_counter)}"
    first = build_segment(table, schema, indexing, base / "a", "seg")
    out = first.to_arrow()

    assert out.schema == schema.arrow_schema()
    assert first.total_docs == table.num_rows
    assert row_multiset(out) == row_multiset(table)
    if indexing.sorted_column:
        keys = out.column(indexing.sorted_column)
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
        assert not np.any(valid[1:] & ~valid[:-1]), "nulls must come last"
        assert first.metadata.columns[indexing.sorted_column].is_sorted

    # undecoded view holds the same values
    assert row_multiset(first.to_arrow(decode=False).cast(schema.arrow_schema())) == row_multiset(table)

    second = build_segment(_batches(table, rnd), schema, indexing, base / "b", "seg")
    assert second.crc == first.crc
    a_files, b_files = data_files(first.path), data_files(second.path)
    assert [p.name for p in a_files] == [p.name for p in b_files]
    for fa, fb in zip(a_files, b_files):
        assert fa.read_bytes() == fb.read_bytes(), fa.name

    for spec in schema.fields:
        meta = first.metadata.columns[spec.name]
        assert meta.null_count == table.column(spec.name).null_count
        if spec.name in indexing.inverted_index_columns:
            _check_inverted(first, spec.name, spec.single_value)


def _check_inverted(segment, column: str, single: bool) -> None:
    """Every dictionary value's bitmap equals a scan of the stored rows (values compared bit-exactly)."""
    stored = [normalise(v) if single else (None if v is None else {normalise(x) for x in v})
              for v in segment.column(column).to_pylist()]
    for value in segment.dictionary(column).to_pylist():
        key = normalise(value)
        expected = {i for i, v in enumerate(stored) if (v == key if single else (v is not None and key in v))}
        assert set(segment.inverted_index(column, value)) == expected, value


@pytest.mark.parametrize("data_type", list(DataType))
def test_every_type_all_nulls_and_empty(tmp_path: Path, data_type: DataType) -> None:
    schema = schema_of(("sv", data_type, True), ("mv", data_type, False))
    table = table_of(schema, {"sv": [None, None], "mv": [None, []]})
    segment = build_segment(table, schema, IndexingConfig(inverted_index_columns=("sv", "mv")), tmp_path, "s")
    assert segment.to_arrow().to_pylist() == [{"sv": None, "mv": None}, {"sv": None, "mv": []}]
    meta = segment.metadata.columns["sv"]
    assert (meta.cardinality, meta.min, meta.max, meta.null_count) == (0, None, None, 2)
    empty = build_segment(table.slice(0, 0), schema, IndexingConfig(), tmp_path, "empty")
    assert empty.total_docs == 0 and empty.to_arrow().num_rows == 0
