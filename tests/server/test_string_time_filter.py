"""A hybrid half over a time column of formatted date strings (SIMPLE_DATE_FORMAT): the wire form of its filter is
strict, a segment records the column's instants in millis (not its string min/max), the boundary follows Pinot's
rule in the format's unit, and a server's filter puts each row in exactly one half — compared as strings where the
pattern sorts as time, parsed where it does not."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.cluster.time_boundary import DAY_MS, HOUR_MS, boundary_units, compute_time_boundary, hybrid_halves
from cuvee.config import IndexingConfig, Schema, TableType
import cuvee.config.string_times as string_times_module
from cuvee.config.string_times import (MAX_MILLIS, MAX_PATTERN_CHARS, MIN_MILLIS, millis_range, render, sorts_as_time,
                                      string_times)
from cuvee.protocol.query import QueryWireError, ServerQueryRequest, TimeFilter
from cuvee.segment.builder import build_segment
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry

TABLE = "eu_OFFLINE"


def schema(fmt: str, data_type: str = "STRING") -> Schema:
    return Schema.from_json({"schemaName": "eu", "dimensionFieldSpecs": [{"name": "k", "dataType": "LONG"}],
                             "dateTimeFieldSpecs": [{"name": "t", "dataType": data_type, "format": fmt,
                                                     "granularity": "1:DAYS"}]})


def millis(text: str, python_format: str) -> int:
    return int(dt.datetime.strptime(text, python_format).replace(tzinfo=dt.UTC).timestamp() * 1000)


# 29/07 .. 02/08: "31/07/2013" is the largest string, "02/08/2013" the latest day
EU_DAYS = [f"{d:02d}/07/2013" for d in (29, 30, 31)] + [f"{d:02d}/08/2013" for d in (1, 2)]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> SegmentRegistry:
    work = tmp_path_factory.mktemp("eu")
    registry = SegmentRegistry()
    data = pa.table({"k": pa.array(range(len(EU_DAYS) * 2), pa.int64()), "t": EU_DAYS * 2})
    segment = build_segment(data, schema("1:DAYS:SIMPLE_DATE_FORMAT:dd/MM/yyyy"), IndexingConfig(), work, "eu_0",
                            table_name=TABLE, time_column="t", overwrite=True)
    registry.put(TABLE, CommittedSegment(segment))
    return registry


def test_a_segment_records_its_instants_not_its_string_range(registry: SegmentRegistry) -> None:
    meta = registry.get(TABLE, "eu_0").segment.metadata  # type: ignore[union-attr]
    assert (meta.start_time, meta.end_time, meta.time_unit) == (
        millis("29/07/2013", "%d/%m/%Y"), millis("02/08/2013", "%d/%m/%Y"), "MILLISECONDS")


@pytest.mark.parametrize("boundary", EU_DAYS)
def test_a_pattern_that_does_not_sort_is_parsed_and_every_row_lands_once(registry: SegmentRegistry,
                                                                          boundary: str) -> None:
    at = millis(boundary, "%d/%m/%Y")
    kept = {}
    for op in ("<=", ">"):
        result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
            "1", TABLE, "SELECT t FROM cuvee_segments", ("eu_0",), 10_000,
            time_filter=TimeFilter("t", op, at, "dd/MM/yyyy")))
        assert stats.exceptions == () and result is not None
        kept[op] = result.column(0).to_pylist()
    assert sorted(kept["<="]) == sorted(d for d in EU_DAYS * 2 if millis(d, "%d/%m/%Y") <= at)
    assert sorted(kept[">"]) == sorted(d for d in EU_DAYS * 2 if millis(d, "%d/%m/%Y") > at)


def test_a_string_filter_on_a_column_of_numbers_is_error_200(tmp_path: Path) -> None:
    registry = SegmentRegistry()
    data = pa.table({"k": pa.array([1], pa.int64()), "t": pa.array([1], pa.int64())})
    registry.put(TABLE, CommittedSegment(build_segment(data, schema("1:DAYS:EPOCH", "LONG"), IndexingConfig(),
                                                       tmp_path, "n_0", table_name=TABLE, overwrite=True)))
    result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
        "1", TABLE, "SELECT count(*) FROM cuvee_segments", ("n_0",), 10_000,
        time_filter=TimeFilter("t", "<=", 0, "yyyy-MM-dd")))
    assert result is None and "not a string of dates" in stats.exceptions[0].message


@pytest.mark.parametrize(("pattern", "sorts"), [
    ("yyyy-MM-dd HH:mm:ss", True), ("yyyy-MM-dd", True), ("yyyyMMdd", True), ("yyyy-MM-dd'T'HH:mm:ss.SSS", True),
    ("dd/MM/yyyy", False), ("M/d/yyyy", False), ("yyyy-M-d", False), ("MMM dd yyyy", False),
    ("yyyy-MM-dd hh:mm:ss a", False), ("yyyy-dd-MM", False),
])
def test_only_fixed_width_most_significant_first_patterns_compare_as_strings(pattern: str, sorts: bool) -> None:
    assert sorts_as_time(pattern) is sorts


def test_the_boundary_is_rendered_in_the_column_format() -> None:
    at = millis("2013-07-14 23:59:58", "%Y-%m-%d %H:%M:%S")
    assert render(at, "yyyy-MM-dd HH:mm:ss") == "2013-07-14 23:59:58"
    assert render(at, "dd/MM/yyyy") == "14/07/2013"
    assert TimeFilter("EventTime", "<=", at, "yyyy-MM-dd HH:mm:ss").text() == "EventTime<='2013-07-14 23:59:58'"
    assert TimeFilter("EventTime", "<=", at, "yyyy-MM-dd HH:mm:ss").stored_bound == "2013-07-14 23:59:58"
    assert TimeFilter("d", ">", at, "dd/MM/yyyy").stored_bound is None  # its text bounds no min/max
    assert TimeFilter("t", "<=", at, "yyyy''MM''dd").text() == "t<='2013''07''14'"  # EXPLAIN: a quote in the text
    assert TimeFilter("ts", ">", at).stored_bound == at


def test_the_boundary_follows_pinots_rule_in_the_formats_unit() -> None:
    seconds = schema("1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss")
    days = schema("1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd")
    assert boundary_units(seconds, "t") == (1.0, 1000.0)  # end times in millis, the column's unit a second
    assert boundary_units(days, "t") == (1.0, DAY_MS)
    assert boundary_units(schema("1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd Z"), "t") is None  # a zone: not read
    assert boundary_units(schema("1:DAYS:SIMPLE_DATE_FORMAT:yy-MM-dd"), "t") is None  # nor a two-digit year
    assert boundary_units(schema("1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd 'yy'"), "t") == (1.0, DAY_MS)  # quoted text
    end = millis("2013-07-15", "%Y-%m-%d")
    assert compute_time_boundary([end], 1.0, "DAILY", DAY_MS) == end - DAY_MS
    assert compute_time_boundary([end], 1.0, "HOURLY", 1000.0) == end - HOUR_MS  # finer than a day: an hour
    assert compute_time_boundary([end], 1.0, "HOURLY", DAY_MS) == end - DAY_MS  # a DAYS column: still a day
    halves = hybrid_halves(end, "t", True, "yyyy-MM-dd")
    assert halves[TableType.OFFLINE] == TimeFilter("t", "<=", end, "yyyy-MM-dd")
    assert halves[TableType.REALTIME] == TimeFilter("t", ">", end, "yyyy-MM-dd")


REQUEST = ServerQueryRequest("1", TABLE, "SELECT count(*) FROM cuvee_segments", ("eu_0",), 10_000)


@pytest.mark.parametrize(("fmt", "error"), [
    (3, "'format' must be a string"),
    ("", "1 to 64 printable ASCII"),
    ("y" * (MAX_PATTERN_CHARS + 1), "1 to 64 printable ASCII"),
    ("yyyy-MM-dd\n", "1 to 64 printable ASCII"),
    ("yyyy-MM-dd Z", "fields that cannot be read"),
    ("yyyy-ww", "fields that cannot be read"),
    ("yy-MM-dd", "a year of other than four digits"),  # DuckDB reads 68 as 2068, 69 as 1969; Java pivots otherwise
    ("yyyyyy-MM-dd", "a year of other than four digits"),
])
def test_a_bad_format_on_the_wire_is_refused(fmt: object, error: str) -> None:
    doc = {"column": "t", "op": "<=", "value": 5, "format": fmt}
    with pytest.raises(QueryWireError, match=error):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), "timeFilter": doc})


def test_the_format_travels_and_an_epoch_filter_reads_as_before() -> None:
    sent = TimeFilter("t", "<=", 5, "yyyy-MM-dd 'at' HH:mm")
    request = ServerQueryRequest("1", TABLE, "SELECT 1", ("eu_0",), 10_000, time_filter=sent)
    assert ServerQueryRequest.from_dict(request.to_dict()).time_filter == sent
    assert TimeFilter("ts", ">", 5).to_dict() == {"column": "ts", "op": ">", "value": 5}  # no new key: old servers


@pytest.mark.parametrize("value", [MAX_MILLIS + 1, MIN_MILLIS - 1, 2**63 - 1, -(2**63)])
def test_a_date_string_boundary_outside_years_1_to_9999_is_refused_on_the_wire(value: int) -> None:
    doc = {"column": "t", "op": "<=", "value": value, "format": "yyyy-MM-dd HH:mm:ss"}
    with pytest.raises(QueryWireError, match="years 0001 to 9999"):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), "timeFilter": doc})
    assert TimeFilter("t", "<=", value).value == value  # an epoch column: any 64-bit value, as before


@pytest.mark.parametrize(("boundary", "kept"), [(10**17, MAX_MILLIS), (2**63 - 1, MAX_MILLIS),
                                                (-(2**63), MIN_MILLIS), (MAX_MILLIS, MAX_MILLIS)])
def test_a_boundary_beyond_the_years_a_date_string_holds_splits_at_their_end(boundary: int, kept: int) -> None:
    halves = hybrid_halves(boundary, "t", True, "yyyy-MM-dd HH:mm:ss")
    assert halves[TableType.OFFLINE] == TimeFilter("t", "<=", kept, "yyyy-MM-dd HH:mm:ss")
    assert halves[TableType.OFFLINE].text() == f"t<='{render(kept, 'yyyy-MM-dd HH:mm:ss')}'"  # type: ignore[union-attr]
    assert render(MAX_MILLIS, "yyyy-MM-dd HH:mm:ss") == "9999-12-31 23:59:59"
    assert hybrid_halves(boundary, "t", True)[TableType.OFFLINE] == TimeFilter("t", "<=", boundary)  # epoch: as is


def test_a_segments_instant_range_is_one_aggregate_over_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    times = string_times("yyyy-MM-dd HH:mm:ss")
    rows = pa.chunked_array([["2013-07-02 00:00:00", "", None], ["null", "garbage", "2013-07-01 12:00:00"]])
    # no per-row instant array to reduce (a build over 500,000 distinct values paid seconds for it)
    monkeypatch.setattr(string_times_module, "to_millis", lambda *_: pytest.fail("to_millis was called"))
    low, high = millis("2013-07-01 12:00:00", "%Y-%m-%d %H:%M:%S"), millis("2013-07-02", "%Y-%m-%d")
    assert millis_range(rows, times) == (low, high)  # what does not parse is skipped, like a NULL
    unused = pa.array(["2013-07-02 00:00:00", "2099-01-01 00:00:00"]).dictionary_encode().slice(0, 1)
    assert millis_range(unused, times) == (high, high)  # a dictionary value no row holds does not count
    assert millis_range(pa.array(["", "x", None]), times) == (None, None)
    assert millis_range(pa.chunked_array([], pa.string()), times) == (None, None)


def test_a_value_that_does_not_parse_lands_in_the_realtime_half_where_each_value_is_parsed(tmp_path: Path) -> None:
    registry = SegmentRegistry()
    values = ["10/07/2013", "20/07/2013", "", "null", "garbage", None]  # 'null': a missing STRING's default
    data = pa.table({"k": pa.array(range(len(values)), pa.int64()), "t": values})
    registry.put(TABLE, CommittedSegment(build_segment(data, schema("1:DAYS:SIMPLE_DATE_FORMAT:dd/MM/yyyy"),
                                                       IndexingConfig(), tmp_path, "u_0", table_name=TABLE,
                                                       time_column="t", overwrite=True)))
    kept = {}
    for op in ("<=", ">"):
        result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
            "1", TABLE, "SELECT t FROM cuvee_segments", ("u_0",), 10_000,
            time_filter=TimeFilter("t", op, millis("14/07/2013", "%d/%m/%Y"), "dd/MM/yyyy")))
        assert stats.exceptions == () and result is not None
        kept[op] = sorted(result.column(0).to_pylist())
    assert kept == {"<=": ["10/07/2013"], ">": ["", "20/07/2013", "garbage", "null"]}  # a NULL: in neither
