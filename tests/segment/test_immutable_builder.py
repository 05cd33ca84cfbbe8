"""Builder and loader behaviour on hand-made rows: layout, stats, indexes, validation, CRC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cuvee.config.schema import DataType, FieldRole
from cuvee.config.table import IndexingConfig
from cuvee.errors import UserError
from cuvee.segment.builder import build_segment
from cuvee.segment.errors import CorruptSegmentError, SegmentError
from cuvee.segment.format import ColumnFile, column_file, data_files
from cuvee.segment.immutable import ImmutableSegment
from tests.segment.segment_helpers import row_multiset, schema_of, table_of

SCHEMA = schema_of(
    ("country", DataType.STRING, True),
    ("tags", DataType.STRING, False),
    ("n", DataType.INT, True),
    ("clicks", DataType.DOUBLE, True, FieldRole.METRIC),
    ("ts", DataType.LONG, True, FieldRole.DATE_TIME),
    name="events",
)
ROWS = {
    "country": ["us", "fr", None, "de", "fr", "us"],
    "tags": [["a", "b"], None, [], ["c"], ["b", "b"], ["a"]],
    "n": [3, 1, 2, None, 1, 7],
    "clicks": [1.0, -0.0, None, float("nan"), 2.5, -4.0],
    "ts": [10, 20, 30, 40, 50, 60],
}
FULL_INDEXING = IndexingConfig(
    inverted_index_columns=("country", "tags", "n"),
    sorted_column="country",
    range_index_columns=("ts", "clicks"),
    bloom_filter_columns=("country", "clicks"),
)


def build(tmp_path: Path, indexing: IndexingConfig = FULL_INDEXING, name: str = "events_0", **kwargs) -> ImmutableSegment:
    return build_segment(table_of(SCHEMA, ROWS), SCHEMA, indexing, tmp_path, name, time_column="ts", **kwargs)


def test_sorted_column_is_stored_sorted_with_nulls_last(tmp_path: Path) -> None:
    segment = build(tmp_path)
    assert segment.column("country").to_pylist() == ["de", "fr", "fr", "us", "us", None]
    # other columns move with their rows (stable: the two "fr" rows keep input order)
    assert segment.column("ts").to_pylist() == [40, 20, 50, 10, 60, 30]
    assert segment.metadata.sorted_column == "country"
    assert segment.metadata.columns["country"].is_sorted
    assert not segment.metadata.columns["n"].is_sorted
    unsorted = build(tmp_path, IndexingConfig(), name="plain")
    assert unsorted.column("ts").to_pylist() == ROWS["ts"]
    assert unsorted.metadata.columns["ts"].is_sorted and not unsorted.metadata.columns["country"].is_sorted


def test_stats(tmp_path: Path) -> None:
    meta = build(tmp_path, start_offset=100, end_offset=106, extra_metadata={"badRowCount": 2}).metadata
    country, tags, clicks = meta.columns["country"], meta.columns["tags"], meta.columns["clicks"]
    assert (country.cardinality, country.min, country.max, country.null_count) == (3, "de", "us", 1)
    assert country.has_dictionary and country.has_inverted_index and country.has_bloom_filter
    assert (tags.single_value, tags.cardinality, tags.min, tags.max) == (False, 3, "a", "c")
    assert (tags.null_count, tags.total_values, tags.max_values_per_entry) == (1, 6, 2)
    assert not clicks.has_dictionary  # metrics stay raw
    assert (clicks.cardinality, clicks.min, clicks.max, clicks.null_count) == (5, -4.0, "NaN", 1)
    assert (meta.start_offset, meta.end_offset, meta.total_docs) == (100, 106, 6)
    assert (meta.time_column, meta.start_time, meta.end_time, meta.time_unit) == ("ts", 10, 60, "MILLISECONDS")
    assert meta.custom == {"badRowCount": 2}
    assert all(c.bytes > 0 for c in meta.columns.values())
    assert meta.table_name == "events"


def test_inverted_index_equals_brute_force_scan(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    schema = schema_of(("d", DataType.STRING, True), ("m", DataType.LONG, False))
    dims = [None if x == 0 else f"v{x}" for x in rng.integers(0, 40, 5000)]
    multi = [None if x == 0 else list(rng.integers(0, 30, x % 4)) for x in rng.integers(0, 9, 5000)]
    segment = build_segment(
        table_of(schema, {"d": dims, "m": [None if m is None else [int(v) for v in m] for m in multi]}),
        schema, IndexingConfig(inverted_index_columns=("d", "m")), tmp_path, "s",
    )
    for value in {v for v in dims if v is not None}:
        assert set(segment.inverted_index("d", value)) == {i for i, v in enumerate(dims) if v == value}
    for value in range(30):
        expected = {i for i, m in enumerate(multi) if m is not None and value in m}
        assert set(segment.inverted_index("m", value)) == expected
    assert len(segment.inverted_index("d", "absent")) == 0
    assert set(segment.null_bitmap("d")) == {i for i, v in enumerate(dims) if v is None}


def test_range_index_and_bloom_filter(tmp_path: Path) -> None:
    segment = build(tmp_path)
    ts = segment.column("ts").to_pylist()
    assert set(segment.range_index("ts", 20, 50)) == {i for i, t in enumerate(ts) if 20 <= t <= 50}
    assert set(segment.range_index("ts", 20, 50, low_inclusive=False, high_inclusive=False)) == {
        i for i, t in enumerate(ts) if 20 < t < 50
    }
    assert set(segment.range_index("ts", high=30)) == {i for i, t in enumerate(ts) if t <= 30}
    clicks = segment.column("clicks").to_pylist()
    assert set(segment.range_index("clicks", -1.0, 1.0)) == {
        i for i, c in enumerate(clicks) if c is not None and -1.0 <= c <= 1.0
    }
    for value in ("us", "fr", "de"):
        assert segment.bloom_might_contain("country", value)
    assert segment.bloom_might_contain("clicks", 2.5)
    absent = [f"nope-{i}" for i in range(200)]
    assert sum(segment.bloom_might_contain("country", v) for v in absent) < 20  # a filter, not "always maybe"


def test_bloom_filter_false_positive_rate_on_many_values(tmp_path: Path) -> None:
    schema = schema_of(("id", DataType.STRING, True))
    ids = [f"user-{i}" for i in range(20_000)]
    segment = build_segment(table_of(schema, {"id": ids}), schema, IndexingConfig(bloom_filter_columns=("id",)), tmp_path, "s")
    assert all(segment.bloom_might_contain("id", v) for v in ids[::97])
    false_positives = sum(segment.bloom_might_contain("id", f"other-{i}") for i in range(2000))
    assert false_positives < 60  # configured for 1%


def test_dictionary_input_with_unsorted_unused_entries_matches_plain_input(tmp_path: Path) -> None:
    plain = table_of(SCHEMA, ROWS)
    dictionary = pa.array(["zz-unused", "us", "fr", "de", "aa-unused"])
    indices = pa.array([1, 2, None, 3, 2, 1], pa.int32())
    as_snapshot = plain.set_column(0, "country", pa.DictionaryArray.from_arrays(indices, dictionary))
    a = build_segment(plain, SCHEMA, FULL_INDEXING, tmp_path / "a", "s")
    b = build_segment(as_snapshot, SCHEMA, FULL_INDEXING, tmp_path / "b", "s")
    assert a.crc == b.crc
    assert b.dictionary("country").to_pylist() == ["de", "fr", "us"]
    assert b.metadata.columns["country"].cardinality == 3


def test_same_rows_same_bytes_and_crc_independent_of_creation_time(tmp_path: Path) -> None:
    a = build(tmp_path / "a", creation_time_ms=1)
    b = build(tmp_path / "b", creation_time_ms=2)
    assert a.crc == b.crc != 0
    assert [f.read_bytes() for f in data_files(a.path)] == [f.read_bytes() for f in data_files(b.path)]
    c = build_segment(table_of(SCHEMA, {**ROWS, "n": [3, 1, 2, None, 1, 8]}), SCHEMA, FULL_INDEXING, tmp_path / "c", "events_0")
    assert c.crc != a.crc


def test_load_maps_files_and_verify_detects_corruption(tmp_path: Path) -> None:
    segment = build(tmp_path)
    loaded = ImmutableSegment.load(segment.path, verify=True)
    assert loaded.to_arrow().drop_columns(["clicks"]).equals(segment.to_arrow().drop_columns(["clicks"]))  # NaN != NaN
    assert row_multiset(loaded.to_arrow()) == row_multiset(table_of(SCHEMA, ROWS))
    assert loaded.to_arrow(decode=False).column("country").type == pa.dictionary(pa.int32(), pa.string())
    target = column_file(segment.path, "country", ColumnFile.DICTIONARY)
    data = target.read_bytes()
    assert data.count(b"defrus") == 1  # the dictionary's value bytes: a flip there still parses
    target.write_bytes(data.replace(b"defrus", b"defrux"))
    assert ImmutableSegment.load(segment.path).dictionary("country").to_pylist() == ["de", "fr", "ux"]
    with pytest.raises(CorruptSegmentError, match="CRC"):
        ImmutableSegment.load(segment.path, verify=True)
    data = bytearray(target.read_bytes())
    data[-20] ^= 0xFF  # inside the IPC footer: unreadable
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptSegmentError, match="unreadable"):
        ImmutableSegment.load(segment.path)
    target.unlink()
    with pytest.raises(CorruptSegmentError, match="missing"):
        ImmutableSegment.load(segment.path)


def test_requests_a_segment_cannot_serve(tmp_path: Path) -> None:
    segment = build(tmp_path, IndexingConfig())
    with pytest.raises(SegmentError, match="no inverted index"):
        segment.inverted_index("country", "us")
    with pytest.raises(SegmentError, match="no range index"):
        segment.range_index("ts", 1, 2)
    with pytest.raises(SegmentError, match="no column"):
        segment.column("nope")
    with pytest.raises(SegmentError, match="not a valid value"):
        build(tmp_path, FULL_INDEXING, name="x").inverted_index("n", "abc")
    with pytest.raises(SegmentError, match="already exists"):
        build(tmp_path, IndexingConfig())
    assert build(tmp_path, IndexingConfig(), overwrite=True).total_docs == 6


@pytest.mark.parametrize(
    ("indexing", "message"),
    [
        (IndexingConfig(sorted_column="tags"), "multi-valued"),
        (IndexingConfig(inverted_index_columns=("n",), no_dictionary_columns=("n",)), "both noDictionaryColumns"),
        (IndexingConfig(range_index_columns=("country",)), "numeric"),
        (IndexingConfig(bloom_filter_columns=("ghost",)), "unknown column 'ghost'"),
    ],
)
def test_indexing_config_errors(tmp_path: Path, indexing: IndexingConfig, message: str) -> None:
    with pytest.raises(UserError, match=message):
        build(tmp_path, indexing)
    assert not any(tmp_path.iterdir())


def test_input_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no column 'ts'"):
        build_segment(table_of(SCHEMA, ROWS).drop_columns(["ts"]), SCHEMA, IndexingConfig(), tmp_path, "s")
    with pytest.raises(UserError, match="cannot convert"):
        bad = table_of(SCHEMA, ROWS).set_column(2, "n", pa.array(["x"] * 6))
        build_segment(bad, SCHEMA, IndexingConfig(), tmp_path, "s")
    with pytest.raises(UserError, match="invalid segment name"):
        build(tmp_path, IndexingConfig(), name="../evil")


def test_record_batches_and_castable_types_are_accepted(tmp_path: Path) -> None:
    table = table_of(SCHEMA, ROWS).set_column(2, "n", pa.array(ROWS["n"], pa.int64()))
    segment = build_segment(iter(table.to_batches(max_chunksize=4)), SCHEMA, IndexingConfig(), tmp_path, "s")
    assert segment.column("n").type == pa.int32()
    assert segment.column("n").to_pylist() == ROWS["n"]


def test_to_arrow_feeds_duckdb(tmp_path: Path) -> None:
    import duckdb

    segment = build(tmp_path)
    for decode in (True, False):
        rows = segment.to_arrow(decode=decode)  # noqa: F841 (read by DuckDB's replacement scan)
        result = duckdb.sql("SELECT country, sum(n) AS n FROM rows WHERE country IS NOT NULL GROUP BY 1 ORDER BY 1")
        assert result.fetchall() == [("de", None), ("fr", 2), ("us", 10)]


def test_offline_segment_names() -> None:
    from cuvee.segment.naming import offline_segment_name

    assert offline_segment_name("events_OFFLINE", 3, 100, 200) == "events_100_200_3"
    assert offline_segment_name("events", 0) == "events_0"
