"""MutableSegment: appends, capacity, dictionaries, multi-value, nulls, inverted indexes, bytes, offsets."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from cuvee.config.schema import Schema
from cuvee.config.table import IndexingConfig
from cuvee.errors import UserError
from cuvee.segment.mutable import MutableSegment

SCHEMA = Schema.from_json(
    {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "country", "dataType": "STRING"},
            {"name": "tags", "dataType": "STRING", "singleValueField": False},
            {"name": "codes", "dataType": "INT", "singleValueField": False},
            {"name": "flag", "dataType": "BOOLEAN"},
            {"name": "blob", "dataType": "BYTES"},
            {"name": "doc", "dataType": "JSON"},
            {"name": "score", "dataType": "DOUBLE"},
            {"name": "user", "dataType": "STRING"},
        ],
        "metricFieldSpecs": [
            {"name": "clicks", "dataType": "INT"},
            {"name": "revenue", "dataType": "FLOAT"},
            {"name": "views", "dataType": "LONG"},
        ],
        "dateTimeFieldSpecs": [
            {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
        ],
    }
)
INDEXING = IndexingConfig(
    inverted_index_columns=("country", "tags", "codes", "flag", "score"),
    no_dictionary_columns=("user", "doc", "ts"),
)


def random_rows(rng: np.random.Generator, count: int, null_rate: float = 0.1) -> list[dict[str, Any]]:
    def maybe(value: Any) -> Any:
        return None if rng.random() < null_rate else value

    rows = []
    for _ in range(count):
        rows.append({
            "country": maybe(f"country-{rng.integers(0, 6)}"),
            "tags": maybe([maybe(f"tag-{t}") for t in rng.integers(0, 5, rng.integers(0, 4))]),
            "codes": maybe([int(c) for c in rng.integers(-3, 3, rng.integers(0, 5))]),
            "flag": maybe(bool(rng.integers(0, 2))),
            "blob": maybe(bytes(rng.integers(0, 256, rng.integers(0, 4), dtype=np.uint8))),
            "doc": maybe(f'{{"k": {rng.integers(0, 1000)}}}'),
            "score": maybe(float(rng.choice([0.5, -0.0, 0.0, 1.25, math.inf]))),
            "user": maybe(f"user-{rng.integers(0, 10_000)}-" + "x" * int(rng.integers(0, 30))),
            "clicks": maybe(int(rng.integers(-100, 100))),
            "revenue": maybe(float(np.float32(rng.random()))),
            "views": maybe(int(rng.integers(0, 2**40))),
            "ts": maybe(int(1_700_000_000_000 + rng.integers(-10**6, 10**6))),
        })
    return rows


def as_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=SCHEMA.arrow_schema())


def plain(table: pa.Table) -> pa.Table:
    """A snapshot with dictionary columns decoded, comparable to the input rows."""
    return table.cast(SCHEMA.arrow_schema())


def expected(rows: list[dict[str, Any]]) -> pa.Table:
    """What the segment must return: the rows, with null multi-value elements dropped."""
    cleaned = []
    for row in rows:
        row = dict(row)
        for name in ("tags", "codes"):
            if row[name] is not None:
                row[name] = [v for v in row[name] if v is not None]
        cleaned.append(row)
    return pa.Table.from_pylist(cleaned, schema=SCHEMA.arrow_schema())


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(42)


def test_appends_across_many_batches_equal_the_input(rng: np.random.Generator) -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 2_000, name="events__0__0__20260101T0000Z")
    all_rows: list[dict[str, Any]] = []
    for size in [1, 7, 50, 0, 300, 129, 13]:
        rows = random_rows(rng, size)
        assert segment.append(as_batch(rows), np.arange(len(all_rows), len(all_rows) + size)) == size
        all_rows += rows
        assert segment.num_docs == len(all_rows)
        assert plain(segment.snapshot()).equals(expected(all_rows))
    assert segment.snapshot().column_names == SCHEMA.column_names
    assert plain(segment.snapshot(num_docs=10)).equals(expected(all_rows[:10]))


def test_a_snapshot_of_a_block_of_rows_equals_that_slice_of_the_whole(rng: np.random.Generator) -> None:
    """``first_doc`` and ``columns``: every kind of column (nulls, booleans, multi-value dictionary and raw, raw and
    dictionary strings), from every start, aligned to a byte of null bits or not."""
    segment = MutableSegment(SCHEMA, INDEXING, 500)
    rows = random_rows(rng, 300, null_rate=0.2)
    for start in range(0, 300, 37):
        segment.append(as_batch(rows[start:start + 37]), np.arange(start, min(start + 37, 300)))
    whole = expected(rows)
    for first, count in [(0, 300), (1, 300), (8, 9), (9, 9), (37, 111), (150, 300), (299, 300), (300, 300)]:
        got = plain(segment.snapshot(count, first_doc=first))
        assert got.equals(whole.slice(first, count - first)), (first, count)
    picked = segment.snapshot(200, first_doc=64, columns=["tags", "flag", "user"])
    assert picked.column_names == ["tags", "flag", "user"]
    assert picked.cast(whole.select(["tags", "flag", "user"]).schema).equals(
        whole.select(["tags", "flag", "user"]).slice(64, 136))
    with pytest.raises(ValueError, match="first_doc"):
        segment.snapshot(10, first_doc=11)


def test_append_stops_at_capacity(rng: np.random.Generator) -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 25)
    rows = random_rows(rng, 30)
    assert segment.append(as_batch(rows[:10]), range(100, 110)) == 10
    assert not segment.is_full
    assert segment.append(as_batch(rows[10:30]), range(110, 130)) == 15
    assert segment.is_full
    assert segment.append(as_batch(rows[25:]), range(125, 130)) == 0
    assert segment.num_docs == 25
    assert (segment.start_offset, segment.end_offset) == (100, 125)
    assert plain(segment.snapshot()).equals(expected(rows[:25]))


def test_offsets_and_time_range_are_tracked() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    assert segment.time_column == "ts"
    assert (segment.start_offset, segment.end_offset, segment.min_time, segment.max_time) == (None, None, None, None)
    segment.append(as_batch([{"ts": 500}, {"ts": None}, {"ts": 300}]), [7, 9, 12])
    assert (segment.start_offset, segment.end_offset) == (7, 13)
    assert (segment.min_time, segment.max_time) == (300, 500)
    segment.append(as_batch([{"ts": 900}, {"ts": 100}]), [20, 21])
    assert (segment.min_time, segment.max_time, segment.end_offset) == (100, 900, 22)


def test_which_columns_are_dictionary_encoded() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    encoded = {name for name in SCHEMA.column_names if segment.is_dictionary_encoded(name)}
    assert encoded == {"country", "tags", "codes", "flag", "blob", "score"}
    forced = MutableSegment(SCHEMA, IndexingConfig(inverted_index_columns=("clicks",)), 10)
    assert forced.is_dictionary_encoded("clicks")


def test_snapshot_types_dictionary_and_raw() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    segment.append(as_batch([{"country": "fr", "tags": ["a"], "clicks": 1, "user": "u"}]), [0])
    types = segment.snapshot().schema
    assert types.field("country").type == pa.dictionary(pa.int32(), pa.string())
    assert types.field("tags").type == pa.list_(pa.dictionary(pa.int32(), pa.string()))
    assert types.field("codes").type == pa.list_(pa.dictionary(pa.int32(), pa.int32()))
    assert types.field("clicks").type == pa.int32()
    assert types.field("user").type == pa.string()
    assert types.field("ts").type == pa.timestamp("ms")


def test_dictionary_grows_in_insertion_order_and_reuses_ids() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 100)
    segment.append(as_batch([{"country": c} for c in ["fr", "de", "fr"]]), [0, 1, 2])
    segment.append(as_batch([{"country": c} for c in ["it", "de", None]]), [3, 4, 5])
    column = segment.snapshot().column("country").chunk(0)
    assert column.dictionary.to_pylist() == ["fr", "de", "it", "null"]
    assert column.indices.to_pylist() == [0, 1, 0, 2, 1, None]
    assert segment.dictionary("country").to_pylist() == ["fr", "de", "it", "null"]


@pytest.mark.parametrize("column", ["country", "codes", "score"])
def test_dictionary_order_does_not_depend_on_batch_boundaries(column: str, rng: np.random.Generator) -> None:
    rows = random_rows(rng, 200)
    whole = MutableSegment(SCHEMA, INDEXING, 200)
    whole.append(as_batch(rows), range(200))
    pieces = MutableSegment(SCHEMA, INDEXING, 200)
    for start in range(0, 200, 7):
        pieces.append(as_batch(rows[start : start + 7]), range(start, min(start + 7, 200)))
    assert whole.dictionary(column).equals(pieces.dictionary(column))
    assert whole.snapshot().column(column).equals(pieces.snapshot().column(column))


def test_numeric_dictionary_gives_nan_and_signed_zero_one_id_each() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 100)
    values = [math.nan, 0.0, -0.0, math.nan, 1.5, 0.0, -math.inf]
    segment.append(as_batch([{"score": v} for v in values]), range(7))
    segment.append(as_batch([{"score": v} for v in values]), range(7, 14))
    dictionary = segment.dictionary("score").to_numpy()
    assert len(dictionary) == 5
    decoded = segment.snapshot().column("score").chunk(0).cast(pa.float64()).to_numpy(zero_copy_only=False)
    assert np.array_equal(decoded.view(np.int64), np.array(values * 2).view(np.int64))


def test_nulls_store_the_null_value_and_a_null_bit() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    segment.append(as_batch([{"country": None, "clicks": None, "tags": None, "user": None}, {"clicks": 4}]), [0, 1])
    snapshot = segment.snapshot()
    assert snapshot.column("clicks").to_pylist() == [None, 4]
    assert snapshot.column("tags").to_pylist() == [None, None]
    assert snapshot.column("user").to_pylist() == [None, None]
    country = snapshot.column("country").chunk(0)
    assert country.dictionary.to_pylist() == ["null"]  # the dimension's null value, stored under the null bit
    assert segment.null_count("clicks") == 1 and segment.null_count("country") == 2
    raw_clicks = np.frombuffer(snapshot.column("clicks").chunk(0).buffers()[1], dtype=np.int32, count=2)
    assert raw_clicks.tolist() == [0, 4]  # a metric's null value is 0


def test_configured_default_null_value_is_stored() -> None:
    schema = Schema.from_json({"schemaName": "d", "dimensionFieldSpecs": [
        {"name": "c", "dataType": "STRING", "defaultNullValue": "unknown"}]})
    segment = MutableSegment(schema, IndexingConfig(), 5)
    segment.append(pa.RecordBatch.from_pylist([{"c": None}, {"c": "x"}], schema=schema.arrow_schema()), [0, 1])
    assert segment.dictionary("c").to_pylist() == ["unknown", "x"]
    assert segment.snapshot().column("c").to_pylist() == [None, "x"]


def test_multi_value_columns_keep_empty_lists_and_drop_null_elements() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    rows = [{"tags": ["a", None, "b"], "codes": [1, 1]}, {"tags": [], "codes": None}, {"tags": ["b"], "codes": [2]}]
    segment.append(as_batch(rows), [0, 1, 2])
    snapshot = segment.snapshot()
    assert snapshot.column("tags").to_pylist() == [["a", "b"], [], ["b"]]
    assert snapshot.column("codes").to_pylist() == [[1, 1], None, [2]]


def test_multi_value_input_slices_with_hidden_values_are_read_correctly() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    tags = pa.ListArray.from_arrays(pa.array([0, 2, 4, 5], pa.int32()), pa.array(["a", "b", "x", "y", "c"]),
                                    mask=pa.array([False, True, False]))
    batch = as_batch([{}, {}, {}]).set_column(1, "tags", tags)
    segment.append(batch.slice(1, 2), [0, 1])
    assert segment.snapshot().column("tags").to_pylist() == [None, ["c"]]


def brute_force(table: pa.Table, column: str, value: Any) -> BitMap:
    out = BitMap()
    for doc, cell in enumerate(table.column(column).to_pylist()):
        if cell is None:
            continue
        cells = cell if isinstance(cell, list) else [cell]
        if any(c == value and (not isinstance(c, float) or math.copysign(1, c) == math.copysign(1, value))
               for c in cells):
            out.add(doc)
    return out


def test_inverted_indexes_equal_a_brute_force_scan(rng: np.random.Generator) -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 5_000)
    for size in [100, 1, 999, 400]:
        segment.append(as_batch(random_rows(rng, size, null_rate=0.2)), np.arange(size))
    table = plain(segment.snapshot())
    checked = 0
    for column in INDEXING.inverted_index_columns:
        for value in set(segment.dictionary(column).to_pylist()):
            assert segment.inverted_index(column, value) == brute_force(table, column, value), (column, value)
            checked += 1
    assert checked > 20
    assert segment.inverted_index("country", "no-such-country") == BitMap()
    assert segment.inverted_index("country", None) == BitMap()
    limited = segment.inverted_index("country", "country-1", num_docs=101)
    assert limited == brute_force(table.slice(0, 101), "country", "country-1")


def test_inverted_index_errors_are_clear() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 5)
    with pytest.raises(ValueError, match="has no inverted index"):
        segment.inverted_index("user", "u")
    with pytest.raises(ValueError, match="is not a INT value"):
        segment.inverted_index("codes", "not a number")
    with pytest.raises(KeyError, match="no column 'nope'"):
        segment.inverted_index("nope", 1)


def test_bytes_used_grows_with_rows(rng: np.random.Generator) -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 3_000)
    assert set(segment.bytes_used()) == set(SCHEMA.column_names)
    segment.append(as_batch(random_rows(rng, 100)), np.arange(100))
    first = segment.bytes_used()
    assert all(used > 0 for used in first.values())
    segment.append(as_batch(random_rows(rng, 2_000)), np.arange(2_000))
    second = segment.bytes_used()
    for name in ("user", "clicks", "views", "ts", "tags", "country", "doc"):
        assert second[name] > first[name], name
    assert second["clicks"] == 4 * 2_100 + (2_100 + 7) // 8


def test_snapshots_share_the_segment_buffers() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 100)
    segment.append(as_batch([{"clicks": i, "country": "a"} for i in range(10)]), range(10))
    first = segment.snapshot()
    segment.append(as_batch([{"clicks": 99, "country": "b"}]), [10])
    second = segment.snapshot()
    assert first.num_rows == 10 and second.num_rows == 11
    assert first.column("clicks").to_pylist() == list(range(10))
    assert first.column("clicks").chunk(0).buffers()[1].address == second.column("clicks").chunk(0).buffers()[1].address


def test_batches_are_matched_to_the_schema_by_name_and_cast() -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    reordered = pa.RecordBatch.from_pydict({"clicks": pa.array([1, 2], pa.int64()), **{
        name: pa.nulls(2, SCHEMA.column(name).arrow_type()) for name in reversed(SCHEMA.column_names)
        if name != "clicks"}})
    assert segment.append(reordered, [0, 1]) == 2
    assert segment.snapshot().column("clicks").to_pylist() == [1, 2]
    with pytest.raises(ValueError, match=r"lacks columns \['views'\]"):
        segment.append(reordered.drop_columns(["views"]), [2, 3])
    with pytest.raises(ValueError, match="2 rows but 1 offsets"):
        segment.append(reordered, [4])
    with pytest.raises(ValueError, match="outside 0..2"):
        segment.snapshot(num_docs=3)


def test_bad_indexing_config_is_a_user_error() -> None:
    with pytest.raises(UserError, match="both invertedIndexColumns and noDictionaryColumns"):
        MutableSegment(SCHEMA, IndexingConfig(inverted_index_columns=("user",), no_dictionary_columns=("user",)), 5)
    with pytest.raises(UserError, match="invertedIndexColumns names 'nope'"):
        MutableSegment(SCHEMA, IndexingConfig(inverted_index_columns=("nope",)), 5)
    with pytest.raises(UserError, match="time column 'nope'"):
        MutableSegment(SCHEMA, IndexingConfig(), 5, time_column="nope")


def test_a_failed_append_leaves_the_published_rows_and_refuses_more(monkeypatch: pytest.MonkeyPatch) -> None:
    segment = MutableSegment(SCHEMA, INDEXING, 10)
    segment.append(as_batch([{"clicks": 1}]), [0])
    column = segment._columns["views"]

    def explode(values: pa.Array, first_doc: int) -> None:
        raise MemoryError("simulated")

    monkeypatch.setattr(column, "append", explode)
    with pytest.raises(MemoryError):
        segment.append(as_batch([{"clicks": 2}]), [1])
    assert segment.num_docs == 1
    assert segment.snapshot().column("clicks").to_pylist() == [1]
    with pytest.raises(RuntimeError, match="failed during an earlier append"):
        segment.append(as_batch([{"clicks": 3}]), [2])
