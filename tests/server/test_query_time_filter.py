"""A hybrid table's half on the server: the structured time filter restricts ``cuvee_segments`` so that every row
lands in exactly one half, on TIMESTAMP (epoch millis) and LONG (any epoch unit) time columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cuvee.config import IndexingConfig, Schema
from cuvee.protocol.query import ServerQueryRequest, ServerQueryStats, TimeFilter
from cuvee.query import QueryErrorCode, TableInfo, merge_partials, plan_sql
from cuvee.segment.builder import build_segment
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from tests.broker.helpers import BASE_MS, TABLE, MutableView, committed, event_rows, schema, segment_name

DAYS_TABLE = "days_OFFLINE"
DAYS_SCHEMA = Schema.from_json({
    "schemaName": "days", "dimensionFieldSpecs": [{"name": "k", "dataType": "STRING"}],
    "dateTimeFieldSpecs": [{"name": "day", "dataType": "LONG", "format": "1:DAYS:EPOCH", "granularity": "1:DAYS"}]})


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[SegmentRegistry, pa.Table, list[str]]:
    """``events`` (TIMESTAMP ts, one row per second from BASE_MS) in a committed and a consuming segment, and
    ``days`` (LONG day numbers) in one committed segment."""
    work = tmp_path_factory.mktemp("segments")
    registry = SegmentRegistry()
    parts = [event_rows(300, 0, 1), event_rows(200, 300, 2)]
    names = [segment_name(0, 0), segment_name(0, 1)]
    registry.put(TABLE, committed(work, names[0], parts[0]))
    registry.put(TABLE, MutableView(names[1], parts[1]))
    days = pa.table({"k": [f"k{i}" for i in range(10)], "day": pa.array(range(100, 110), pa.int64())})
    registry.put(DAYS_TABLE, CommittedSegment(build_segment(days, DAYS_SCHEMA, IndexingConfig(), work / "d", "days_0",
                                                            table_name=DAYS_TABLE, time_column="day",
                                                            overwrite=True)))
    return registry, pa.concat_tables(parts), names


def half(registry: SegmentRegistry, sql: str, segments: list[str], time_filter: TimeFilter | None,
         table: str = TABLE) -> tuple[pa.Table | None, ServerQueryStats]:
    return QueryExecutor(registry).execute(ServerQueryRequest("1", table, sql, tuple(segments), 10_000,
                                                              time_filter=time_filter))


def count(result: pa.Table | None) -> int:
    assert result is not None
    return result.column(0).to_pylist()[0]


@pytest.mark.parametrize("boundary_row", [0, 1, 299, 300, 420, 499])
def test_timestamp_rows_at_the_boundary_land_in_exactly_one_half(loaded, boundary_row: int) -> None:
    registry, rows, names = loaded
    boundary = BASE_MS + boundary_row * 1000  # exactly the time of row ``boundary_row``
    sql = "SELECT count(*) AS n, sum(id) AS s FROM cuvee_segments"
    low, low_stats = half(registry, sql, names, TimeFilter("ts", "<=", boundary))
    high, high_stats = half(registry, sql, names, TimeFilter("ts", ">", boundary))
    assert count(low) == boundary_row + 1 and count(high) == rows.num_rows - boundary_row - 1
    assert low.column("s")[0].as_py() + (high.column("s")[0].as_py() or 0) == sum(range(500))
    assert low_stats.totalDocs == high_stats.totalDocs == 500  # the segments' total, as Pinot reports it
    assert low_stats.numDocsScanned == boundary_row + 1  # only the half's rows
    assert high_stats.numDocsScanned == rows.num_rows - boundary_row - 1


def test_a_half_combines_with_where_and_planned_queries(loaded) -> None:
    registry, _, names = loaded
    info = TableInfo(TABLE, tuple(schema().column_names), frozenset({"ts"}))
    plan = plan_sql("SELECT city, COUNT(*), DISTINCTCOUNT(id) FROM events WHERE v > 0 GROUP BY city LIMIT 10",
                    lambda _: info)
    boundary = BASE_MS + 250 * 1000
    partials, scanned = [], 0
    for op in ("<=", ">"):
        result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
            "1", TABLE, plan.server_sql, tuple(names), 10_000, plan.docs_scanned_sql, plan.docs_column,
            TimeFilter("ts", op, boundary)))
        assert stats.exceptions == ()
        partials.append(result)
        scanned += stats.numDocsScanned
    merged = merge_partials(plan, partials, schema().arrow_schema())
    whole, whole_stats = QueryExecutor(registry).execute(ServerQueryRequest(
        "1", TABLE, plan.server_sql, tuple(names), 10_000, plan.docs_scanned_sql, plan.docs_column))
    assert sorted(merged.to_pylist(), key=str) == sorted(merge_partials(plan, [whole], schema().arrow_schema())
                                                         .to_pylist(), key=str)
    assert scanned == whole_stats.numDocsScanned


def test_long_epoch_days_column(loaded) -> None:
    registry = loaded[0]
    sql = "SELECT count(*) FROM cuvee_segments"
    assert count(half(registry, sql, ["days_0"], TimeFilter("day", "<=", 104), DAYS_TABLE)[0]) == 5
    assert count(half(registry, sql, ["days_0"], TimeFilter("day", ">", 104), DAYS_TABLE)[0]) == 5


@pytest.mark.parametrize(("column", "message"), [
    ("nope", "not in the table"),
    ('ts" > 0 OR "id', "not in the table"),  # an identifier, never SQL: no such column
    ("city", "not an epoch or TIMESTAMP column"),
])
def test_a_bad_time_filter_column_is_error_200(loaded, column: str, message: str) -> None:
    registry, _, names = loaded
    result, stats = half(registry, "SELECT count(*) FROM cuvee_segments", names, TimeFilter(column, "<=", 0))
    assert result is None
    assert [e.error_code for e in stats.exceptions] == [int(QueryErrorCode.QUERY_EXECUTION)]
    assert message in stats.exceptions[0].message


def test_an_odd_but_real_column_name_is_quoted(tmp_path) -> None:
    odd = 'my "time"'
    odd_schema = Schema.from_json({"schemaName": "odd", "dimensionFieldSpecs": [{"name": odd, "dataType": "LONG"}]})
    registry = SegmentRegistry()
    data = pa.table({odd: pa.array([1, 2, 3], pa.int64())})
    registry.put("odd_OFFLINE", CommittedSegment(build_segment(data, odd_schema, IndexingConfig(), tmp_path, "odd_0",
                                                               table_name="odd_OFFLINE", overwrite=True)))
    result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
        "1", "odd_OFFLINE", "SELECT count(*) FROM cuvee_segments", ("odd_0",), 10_000,
        time_filter=TimeFilter(odd, ">", 1)))
    assert stats.exceptions == () and count(result) == 2
