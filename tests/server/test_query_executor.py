"""The server's query executor over a registry of real committed and consuming segments."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.config.table import IndexingConfig
from cuvee.protocol.query import Colocation, DimLookup, GroupLimits, ServerQueryRequest, TimeFilter
from cuvee.query import QueryErrorCode, QueryPlan, TableInfo, merge_partials, plan_sql
from cuvee.query.rewrite import DOCS_COLUMN, DOCS_TOTAL_COLUMN
from cuvee.segment.builder import build_segment
from cuvee.server.query_executor import QueryExecutor, _union
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from tests.broker.helpers import BASE_MS, TABLE, MutableView, committed, event_rows, schema, segment_name

INFO = TableInfo(TABLE, tuple(schema().column_names), frozenset({"ts"}))


def resolve(name: str) -> TableInfo | None:
    return INFO if name.lower() in ("events", TABLE.lower()) else None


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[SegmentRegistry, pa.Table, list[str]]:
    work = tmp_path_factory.mktemp("segments")
    registry = SegmentRegistry()
    parts = [event_rows(300, 0, 1), event_rows(250, 300, 2), event_rows(120, 550, 3)]
    names = [segment_name(0, 0), segment_name(0, 1), segment_name(0, 2)]
    registry.put(TABLE, committed(work, names[0], parts[0]))
    registry.put(TABLE, committed(work, names[1], parts[1]))
    registry.put(TABLE, MutableView(names[2], parts[2], last_ingestion_ms=5_000))
    return registry, pa.concat_tables(parts), names


def request(sql: str, segments: list[str], timeout_ms: int = 10_000, docs_sql: str | None = None,
            docs_column: str | None = None) -> ServerQueryRequest:
    return ServerQueryRequest("1", TABLE, sql, tuple(segments), timeout_ms, docs_sql, docs_column)


def plan_request(sql: str, segments: list[str]) -> tuple[QueryPlan, ServerQueryRequest]:
    plan = plan_sql(sql, resolve)
    return plan, request(plan.server_sql, segments, docs_sql=plan.docs_scanned_sql, docs_column=plan.docs_column)


def run_pinot(registry: SegmentRegistry, sql: str, segments: list[str]) -> pa.Table:
    plan, server_request = plan_request(sql, segments)
    result, stats = QueryExecutor(registry).execute(server_request)
    assert stats.exceptions == (), stats.exceptions
    return merge_partials(plan, [result] if result is not None else [], schema().arrow_schema())


def reference(sql: str, rows: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    con.register("events", rows)
    return con.sql(sql).fetchall()


@pytest.mark.parametrize(("sql", "ref"), [
    ("SELECT COUNT(*), SUM(v), MIN(d), MAX(d), AVG(v) FROM events", None),
    ("SELECT city, COUNT(*), SUM(d) FROM events GROUP BY city ORDER BY city NULLS LAST LIMIT 100",
     "SELECT city, COUNT(*), SUM(d) FROM events GROUP BY city ORDER BY city NULLS LAST"),
    ("SELECT DISTINCTCOUNT(city), COUNT(*) FROM events WHERE v BETWEEN -5 AND 5 AND city LIKE 'b%'",
     "SELECT COUNT(DISTINCT city), COUNT(*) FROM events WHERE v BETWEEN -5 AND 5 AND city LIKE 'b%'"),
    ("SELECT id, city, v FROM events WHERE v IS NULL ORDER BY id DESC LIMIT 7", None),
])
def test_results_over_committed_and_consuming_segments_equal_duckdb(loaded, sql: str, ref: str | None) -> None:
    registry, rows, names = loaded
    got = run_pinot(registry, sql, names)
    assert [tuple(r.values()) for r in got.to_pylist()] == reference(ref or sql, rows)


def test_stats_count_docs_segments_and_freshness(loaded) -> None:
    registry, rows, names = loaded
    _, server_request = plan_request("SELECT COUNT(*) FROM events WHERE v > 0", names)
    _, stats = QueryExecutor(registry).execute(server_request)
    assert stats.totalDocs == rows.num_rows == 670
    assert stats.numDocsScanned == reference("SELECT COUNT(*) FROM events WHERE v > 0", rows)[0][0]
    assert stats.numSegmentsQueried == stats.numSegmentsProcessed == stats.numSegmentsMatched == 3
    assert stats.numConsumingSegmentsQueried == stats.numConsumingSegmentsProcessed == 1
    assert stats.minConsumingFreshnessTimeMs == 5_000


@pytest.mark.parametrize("sql", [
    "SELECT SUM(d) FROM events WHERE v > 0",                                    # one scan: the count rides along
    "SELECT city, MAX(d) FROM events WHERE v > 0 GROUP BY city LIMIT 3",        # summed over the groups
    "SELECT id FROM events WHERE v > 0 ORDER BY id LIMIT 2",                     # selection: a second count query
    "SELECT COUNT(*) FROM events WHERE v > 1000",                                # nothing passes
])
def test_docs_scanned_is_the_rows_passing_where_for_every_plan_kind(loaded, sql: str) -> None:
    registry, rows, names = loaded
    plan, server_request = plan_request(sql, names)
    result, stats = QueryExecutor(registry).execute(server_request)
    assert stats.exceptions == ()
    where = sql.split(" WHERE ")[1].split(" GROUP")[0].split(" ORDER")[0]
    expected = reference(f"SELECT COUNT(*) FROM events WHERE {where}", rows)[0][0]
    assert stats.numDocsScanned == expected
    assert stats.numSegmentsMatched == (3 if expected else 0)
    assert result is not None and DOCS_COLUMN not in result.column_names  # the count never reaches the broker
    _, no_where = QueryExecutor(registry).execute(request("SELECT count(*) FROM cuvee_segments", names[:2]))
    assert no_where.numDocsScanned == no_where.totalDocs == 550
    assert no_where.numConsumingSegmentsQueried == 0 and no_where.minConsumingFreshnessTimeMs == 0


@pytest.mark.parametrize(("sql", "counted_alone"), [
    ("SELECT id FROM events WHERE v > 7 AND id < 40 ORDER BY id LIMIT 100", False),  # short of its LIMIT
    ("SELECT id, city FROM events WHERE v > 7 AND id < 40 LIMIT 100", False),          # no ORDER BY either
    ("SELECT id FROM events WHERE v > 0 ORDER BY id LIMIT 5 OFFSET 2", True),          # full: the rest counted
    ("SELECT id FROM events WHERE v > 0 ORDER BY id LIMIT 0", True),                   # LIMIT 0 answers nothing
])
def test_a_selection_short_of_its_limit_counts_its_answer_rows(loaded, monkeypatch: pytest.MonkeyPatch, sql: str,
                                                               counted_alone: bool) -> None:
    """A selection whose answer has fewer rows than its LIMIT (plus OFFSET) answered every row passing WHERE: its
    numDocsScanned is their count, without the second statement; a full answer still counts them all."""
    from cuvee.broker.handler import _selection_limit
    from cuvee.server import query_executor

    registry, rows, names = loaded
    plan = plan_sql(sql, resolve)
    statements: list[str] = []
    count = query_executor._count
    monkeypatch.setattr(query_executor, "_count", lambda con, text: statements.append(text) or count(con, text))
    server_request = ServerQueryRequest("1", TABLE, plan.server_sql, tuple(names), 10_000, plan.docs_scanned_sql,
                                        plan.docs_column, selection_limit=_selection_limit(plan))
    assert ServerQueryRequest.decode(server_request.encode()) == server_request
    result, stats = QueryExecutor(registry).execute(server_request)
    assert stats.exceptions == () and result is not None
    where = sql.split(" WHERE ")[1].split(" ORDER")[0].split(" LIMIT")[0]
    passing = reference(f"SELECT COUNT(*) FROM events WHERE {where}", rows)[0][0]
    assert stats.numDocsScanned == passing and (passing > result.num_rows) is counted_alone
    assert bool(statements) is counted_alone


@pytest.mark.parametrize("sql", ["SELECT id FROM events WHERE v > 0 LIMIT 5 OFFSET 2",
                                 "SELECT id, city FROM events WHERE v > 0 LIMIT 0",
                                 "SELECT id FROM events LIMIT 5"])
def test_a_full_selection_without_order_by_reports_the_rows_it_stopped_at(loaded, monkeypatch: pytest.MonkeyPatch,
                                                                          sql: str) -> None:
    """Pinot stops an unordered selection at its LIMIT and reports the docs it read: a point lookup that finds
    many rows is not counted again in a second scan (which doubled its cost)."""
    from cuvee.broker.handler import _selection_limit
    from cuvee.server import query_executor

    registry, rows, names = loaded
    plan = plan_sql(sql, resolve)
    assert plan.unordered_selection
    monkeypatch.setattr(query_executor, "_count", lambda con, text: pytest.fail(f"counted again: {text}"))
    server_request = ServerQueryRequest("1", TABLE, plan.server_sql, tuple(names), 10_000, plan.docs_scanned_sql,
                                        plan.docs_column, selection_limit=_selection_limit(plan), stops_at_limit=True)
    assert ServerQueryRequest.decode(server_request.encode()) == server_request
    result, stats = QueryExecutor(registry).execute(server_request)
    assert stats.exceptions == () and result is not None
    assert result.num_rows == (plan.limit or 0) + plan.offset and stats.numDocsScanned == result.num_rows
    assert not plan_sql(sql.replace(" LIMIT", " ORDER BY id LIMIT"), resolve).unordered_selection


def test_missing_segments_are_reported_and_the_rest_still_runs(loaded) -> None:
    registry, _, names = loaded
    result, stats = QueryExecutor(registry).execute(request("SELECT count(*) AS n FROM cuvee_segments",
                                                            [names[0], "events__0__9__20260101T0000Z"]))
    assert stats.missingSegments == ("events__0__9__20260101T0000Z",)
    assert result is not None and result.column("n").to_pylist() == [300]
    none, only_missing = QueryExecutor(registry).execute(request("SELECT 1 FROM cuvee_segments", ["nope"]))
    assert none is None and only_missing.missingSegments == ("nope",) and only_missing.exceptions == ()


@pytest.mark.parametrize(("sql", "message"), [
    ("SELEC nothing", "cannot parse"),
    ("SELECT no_such_column FROM cuvee_segments", "no_such_column"),
    ("CREATE TABLE x AS SELECT 1", "exactly one SELECT"),
    ("SELECT 1; SELECT 2", "exactly one SELECT"),
    ("SELECT * FROM read_csv('/etc/passwd')", "disabled"),
])
def test_bad_sql_is_error_200_not_a_crash(loaded, sql: str, message: str) -> None:
    registry, _, names = loaded
    result, stats = QueryExecutor(registry).execute(request(sql, names))
    assert result is None
    assert [e.error_code for e in stats.exceptions] == [int(QueryErrorCode.QUERY_EXECUTION)]
    assert message in stats.exceptions[0].message
    assert registry.ref_count(TABLE, names[0]) == 0, "the segments are released after a failed query"


def test_a_long_query_is_interrupted_at_the_deadline(loaded) -> None:
    registry, _, names = loaded
    result, stats = QueryExecutor(registry).execute(
        request("SELECT count(*) FROM cuvee_segments, range(1000000000000)", names, timeout_ms=300))
    assert result is None
    assert [e.error_code for e in stats.exceptions] == [250]
    assert stats.timeUsedMs < 10_000


def test_deadline_passed_before_running_is_a_timeout(loaded, tmp_path: Path) -> None:
    registry, _, names = loaded
    now = [100.0]

    class SlowView:
        """Reading it takes 2 s of (fake) time."""
        name = "slow"
        is_consuming = False
        last_ingestion_ms = None
        num_docs = 1

        def to_arrow(self) -> pa.Table:
            now[0] += 2.0
            return event_rows(1, 0, 9)

    slow_registry = SegmentRegistry()
    slow_registry.put(TABLE, SlowView())
    result, stats = QueryExecutor(slow_registry, clock=lambda: now[0]).execute(
        request("SELECT count(*) FROM cuvee_segments", ["slow"], timeout_ms=1000))
    assert result is None
    assert [e.error_code for e in stats.exceptions] == [250]
    assert "1000 ms passed" in stats.exceptions[0].message


def test_a_segment_that_cannot_be_read_is_reported_and_others_answer(loaded) -> None:
    registry, _, names = loaded

    class Broken:
        name = "broken"
        is_consuming = False
        last_ingestion_ms = None
        num_docs = 0

        def to_arrow(self) -> pa.Table:
            raise OSError("disk gone")

    reg = SegmentRegistry()
    reg.put(TABLE, Broken())
    reg.put(TABLE, registry.get(TABLE, names[1]))
    result, stats = QueryExecutor(reg).execute(request("SELECT count(*) AS n FROM cuvee_segments",
                                                       ["broken", names[1]]))
    assert result is not None and result.column("n").to_pylist() == [250]
    message = stats.exceptions[0].message  # names the segment; the error text stays in the server log
    assert len(stats.exceptions) == 1 and "broken" in message and "disk gone" not in message


def test_union_decodes_dictionaries_when_segments_disagree_on_types() -> None:
    plain = pa.table({"c": ["a", "b"]})
    encoded = pa.table({"c": pa.array(["b", "c"]).dictionary_encode()})
    union = _union([plain, encoded])
    assert union.column("c").to_pylist() == ["a", "b", "b", "c"]


def test_count_star_without_a_filter_is_answered_from_the_rows_held_without_a_scan(loaded, monkeypatch) -> None:
    from cuvee.query.rewrite import COUNT_ROWS_SERVER_SQL

    registry, rows, names = loaded
    plan, server_request = plan_request("SELECT COUNT(*) FROM events", names)
    assert plan.server_sql == COUNT_ROWS_SERVER_SQL  # the planner still writes what servers recognise
    monkeypatch.setattr(QueryExecutor, "_run", lambda *a, **k: pytest.fail("scanned for a plain COUNT(*)"))
    result, stats = QueryExecutor(registry).execute(server_request)
    assert result is not None and result.to_pylist() == [{"__p0": rows.num_rows}]
    assert stats.numDocsScanned == rows.num_rows and stats.numSegmentsProcessed == len(names)
    assert merge_partials(plan, [result], schema().arrow_schema()).to_pylist() == [{"count(*)": rows.num_rows}]


def test_count_now_answers_count_star_of_committed_and_consuming_segments_as_execute_does(loaded) -> None:
    """The route answers these on its event loop: the answer and statistics must be execute's (a consuming
    segment's published rows, its freshness), and anything that could block or needs rows (a missing segment, a
    filter, a REALTIME table this server has not yet decided is not an upsert table) must go to execute."""
    from cuvee.upsert.table import UpsertTables

    realtime, _, names = loaded
    executor = QueryExecutor(realtime)
    counted = plan_request("SELECT COUNT(*) FROM events", names[:2])[1]  # committed (consuming: test_consuming_blocks)
    now = executor.count_now(counted)
    assert now is not None
    result, stats = executor.execute(counted)
    assert now[0].equals(result) and replace(now[1], timeUsedMs=0) == replace(stats, timeUsedMs=0)
    # a segment not held; none; a kind whose row count is not known never to block (this module's MutableView)
    for segments in ([*names[:2], "gone"], [], names):
        assert executor.count_now(plan_request("SELECT COUNT(*) FROM events", segments)[1]) is None
    filtered = plan_request("SELECT COUNT(*) FROM events WHERE v > 1", names[:2])[1]
    assert executor.count_now(filtered) is None
    asked = plan_request("SELECT COUNT(*) FROM events", names[:2])[1]
    upserts = UpsertTables(lambda table: pytest.fail(f"the event loop looked {table} up"))
    aware = QueryExecutor(realtime, upserts=upserts)
    assert aware.count_now(asked) is None  # not known yet: execute finds out
    upserts._tables[TABLE] = object()  # type: ignore[assignment]  # known to be an upsert table
    assert aware.count_now(asked) is None
    upserts._tables[TABLE] = None  # known not to be one
    assert aware.count_now(asked) is not None


def test_only_the_columns_a_query_names_are_given_to_duckdb(loaded, monkeypatch) -> None:
    from cuvee.server import query_executor

    registry, rows, names = loaded
    seen: list[list[str]] = []
    real = query_executor._bind
    monkeypatch.setattr(query_executor, "_bind", lambda con, union, *a, **k: (seen.append(union.column_names),
                                                                              real(con, union, *a, **k))[1])
    got = run_pinot(registry, "SELECT city, MAX(v) FROM events WHERE d > 0 GROUP BY city ORDER BY city LIMIT 3",
                    names)
    assert seen == [["city", "v", "d"]] or sorted(seen[0]) == ["city", "d", "v"]
    assert got.num_rows == 3
    seen.clear()
    assert run_pinot(registry, "SELECT COUNT(*) FROM events WHERE v > 0", names).num_rows == 1
    assert len(seen[0]) == 1  # v alone


def test_columns_named_without_quotes_in_any_case_are_kept(loaded) -> None:
    registry, rows, names = loaded
    result, stats = QueryExecutor(registry).execute(
        request("SELECT count(*) AS n, SUM(V) AS s, max(\"d\") AS m FROM cuvee_segments WHERE City IS NOT NULL",
                names))
    assert stats.exceptions == () and result is not None
    assert result.column("n").to_pylist() == [rows.filter(rows.column("city").is_valid()).num_rows]


def test_a_query_failing_on_the_rows_names_the_segment_that_holds_them(loaded) -> None:
    """Issue 10: an execution failure says which segment and why (ids 300..549 are in the second segment); a
    query wrong whatever the rows (an unknown column) is not blamed on a segment."""
    registry, _, names = loaded
    bad = "SELECT CAST(CASE WHEN id = 400 THEN 'abc' ELSE '1' END AS INT) AS x FROM cuvee_segments"
    result, stats = QueryExecutor(registry).execute(request(bad, names))
    assert result is None
    [error] = stats.exceptions
    assert error.error_code == int(QueryErrorCode.QUERY_EXECUTION)
    assert error.message == (f"the query failed on segment {names[1]}: Could not convert string 'abc' to INT32")
    result, stats = QueryExecutor(registry).execute(request("SELECT nope FROM cuvee_segments", names))
    assert "on segment" not in stats.exceptions[0].message and "'nope' is not served" in stats.exceptions[0].message
    assert registry.ref_count(TABLE, names[1]) == 0


class _Rows:
    """A committed segment of fixed rows (a dimension table's, of another schema than the events')."""

    is_consuming = False
    last_ingestion_ms = None

    def __init__(self, name: str, rows: pa.Table):
        self.name, self.rows, self.num_docs = name, rows, rows.num_rows

    def to_arrow(self) -> pa.Table:
        return self.rows


def test_a_lookups_dimension_table_is_the_union_of_the_listed_segments_and_a_missing_one_is_an_error() -> None:
    registry = SegmentRegistry()
    registry.put(TABLE, MutableView(segment_name(0, 0), event_rows(50, 0, 4)))
    dim = pa.table({"name": ["amsterdam", "berlin", "bern"], "country": ["NL", "DE", "CH"]})
    registry.put("cities_OFFLINE", _Rows("cities_0", dim.slice(0, 2)))
    registry.put("cities_OFFLINE", _Rows("cities_1", dim.slice(2)))
    sql = ('SELECT "city", (SELECT l."country" FROM cuvee_lookup_1 AS l WHERE l."name" = cuvee_segments."city" '
           'LIMIT 1) AS country FROM cuvee_segments')

    def ask(segments: tuple[str, ...], schema: pa.Schema | None = None) -> tuple[pa.Table | None, list]:
        lookups = (DimLookup("cuvee_lookup_1", "cities_OFFLINE", segments, schema),)
        result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
            "1", TABLE, sql, (segment_name(0, 0),), 10_000, lookups=lookups))
        return result, [(e.error_code, e.message) for e in stats.exceptions]

    result, errors = ask(("cities_0", "cities_1"))
    assert errors == [] and result is not None
    expected = {"amsterdam": "NL", "berlin": "DE", "bern": "CH", "cairo": None, None: None}
    assert all(expected[row["city"]] == row["country"] for row in result.to_pylist())
    assert {row["country"] for row in result.to_pylist()} == {"NL", "DE", "CH", None}
    result, errors = ask(("cities_0", "cities_1", "cities_7"))
    assert result is None and errors == [(int(QueryErrorCode.SERVER_SEGMENT_MISSING), errors[0][1])]
    assert "table cities_OFFLINE lacks segment(s) cities_7" in errors[0][1]
    result, errors = ask((), dim.schema)  # no segment routed: the schema types an empty table, every key unmatched
    assert errors == [] and result is not None and set(result.column("country").to_pylist()) == {None}


def grouped(sql: str, segments: list[str], **limits: Any) -> tuple[QueryPlan, ServerQueryRequest]:
    """The plan and the server request the broker sends for a GROUP BY (``limits``: its query options)."""
    plan = plan_sql(sql, resolve)
    assert plan.group_trim is not None
    trim = plan.group_trim
    return plan, ServerQueryRequest("1", TABLE, plan.server_sql, tuple(segments), 10_000, plan.docs_scanned_sql,
                                    plan.docs_column, groups=GroupLimits(trim.order_sql, trim.rows, trim.exact,
                                                                         **limits))


@pytest.mark.parametrize(("sql", "exact"), [
    ("SELECT id, COUNT(*), SUM(d) FROM events WHERE v > 0 GROUP BY id ORDER BY SUM(d) DESC, id LIMIT 2 OFFSET 1",
     False),
    ("SELECT id, COUNT(*), SUM(d) FROM events WHERE v > 0 GROUP BY id ORDER BY id DESC LIMIT 2 OFFSET 1", True),
])
def test_a_trimmed_group_by_counts_every_scanned_row_and_says_whether_it_may_be_wrong(loaded, sql: str,
                                                                                       exact: bool) -> None:
    registry, rows, names = loaded
    plan, server_request = grouped(sql, names, min_trim_size=1)
    result, stats = QueryExecutor(registry).execute(server_request)
    assert stats.exceptions == ()
    assert result is not None and result.num_rows == 15  # 5 × (LIMIT + OFFSET) of the ids passing v > 0
    assert DOCS_COLUMN not in result.column_names
    assert stats.numDocsScanned == reference("SELECT COUNT(*) FROM events WHERE v > 0", rows)[0][0]
    assert (stats.groupsTrimmed, stats.numGroupsLimitReached) == (not exact, False)
    merged = merge_partials(plan, [result], schema().arrow_schema())  # one server: its partials are the groups
    assert [tuple(r.values()) for r in merged.to_pylist()] == reference(sql, rows)


def test_the_groups_limit_comes_from_the_query_else_the_server(loaded) -> None:
    registry, rows, names = loaded
    sql = "SELECT id, COUNT(*) FROM events GROUP BY id LIMIT 1000"
    _, by_config = grouped(sql, names)
    result, stats = QueryExecutor(registry, num_groups_limit=40).execute(by_config)
    assert result is not None and result.num_rows == 40 and stats.numGroupsLimitReached and not stats.groupsTrimmed
    assert set(result.column("__g0").to_pylist()) <= set(rows.column("id").to_pylist())
    _, by_option = grouped(sql, names, num_groups_limit=rows.num_rows)
    result, stats = QueryExecutor(registry, num_groups_limit=40).execute(by_option)
    assert result is not None and result.num_rows == rows.num_rows and not stats.numGroupsLimitReached


def test_the_trim_size_comes_from_the_query_else_the_server(loaded) -> None:
    registry, rows, names = loaded
    sql = "SELECT id, MAX(d) FROM events GROUP BY id ORDER BY MAX(d) DESC LIMIT 10"
    _, by_default = grouped(sql, names)
    result, stats = QueryExecutor(registry, min_server_group_trim_size=100).execute(by_default)
    assert result is not None and result.num_rows == 100 and stats.groupsTrimmed  # max(5 × 10, 100)
    _, off = grouped(sql, names, min_trim_size=0)  # <= 0: no trim
    result, stats = QueryExecutor(registry, min_server_group_trim_size=100).execute(off)
    assert result is not None and result.num_rows == rows.num_rows and not stats.groupsTrimmed


def test_a_ranking_that_is_not_one_select_is_refused(loaded) -> None:
    registry, _, names = loaded
    plan, server_request = grouped("SELECT id, COUNT(*) FROM events GROUP BY id LIMIT 5", names)
    bad = replace(server_request, groups=GroupLimits("SELECT 1; DROP TABLE x"))
    result, stats = QueryExecutor(registry).execute(bad)
    assert result is None and [e.error_code for e in stats.exceptions] == [int(QueryErrorCode.QUERY_EXECUTION)]


def test_a_colocated_joins_share_refuses_copies_of_other_partitions_than_the_broker_placed(tmp_path: Path) -> None:
    """A segment refreshed with rows of another partition after the broker placed the join (its held copy's
    metadata says so) makes the server refuse the share: joined against the wrong partitions' rows it would drop
    matches without a word."""
    indexing = IndexingConfig(extra={"segmentPartitionConfig": {"columnPartitionMap": {
        "id": {"functionName": "Modulo", "numPartitions": 4}}}})
    registry = SegmentRegistry()
    for name, ids in (("left_1", [1, 5, 9]), ("left_2", [2, 6]), ("right_1", [1, 5])):
        built = build_segment(event_rows(len(ids), 0, 3).set_column(0, "id", pa.array(ids, pa.int64())), schema(),
                              indexing, tmp_path, name, table_name=TABLE, time_column="ts", overwrite=True)
        registry.put(TABLE, CommittedSegment(built))
    sql = ('SELECT "l"."id" AS "__c1" FROM cuvee_segments AS "l" JOIN cuvee_lookup_1 AS "r" '
           'ON "l"."id" = "r"."id" LIMIT 100')

    def ask(left: tuple[str, ...], partitions: tuple[int, ...]) -> tuple[pa.Table | None, list]:
        result, stats = QueryExecutor(registry).execute(ServerQueryRequest(
            "1", TABLE, sql, left, 10_000, lookups=(DimLookup("cuvee_lookup_1", TABLE, ("right_1",)),),
            colocation=Colocation("Modulo", 4, partitions, {TABLE: "id"})))
        return result, [(e.error_code, e.message) for e in stats.exceptions]

    result, errors = ask(("left_1",), (1,))
    assert errors == [] and result is not None and sorted(result.column(0).to_pylist()) == [1, 5]
    result, errors = ask(("left_1", "left_2"), (1,))  # left_2's copy holds partition 2
    assert result is None and errors[0][0] == int(QueryErrorCode.SERVER_SEGMENT_MISSING)
    assert "left_2" in errors[0][1] and "other partitions" in errors[0][1]
    result, errors = ask(("left_1",), (2,))  # both copies hold partition 1, not the share's 2
    assert result is None and "left_1" in errors[0][1] and "right_1" not in errors[0][1]


def test_a_committed_segment_gives_plain_copies_of_dictionary_columns_worth_keeping(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    from cuvee.server import queryable

    monkeypatch.setattr(queryable, "PLAIN_BYTES_FACTOR", 2)
    rows = event_rows(400, 0, 7)
    segment = committed(tmp_path, segment_name(0, 0), rows)
    encoded = segment.query_table()
    assert pa.types.is_dictionary(encoded.schema.field("id").type)
    assert pa.types.is_dictionary(encoded.schema.field("city").type)
    shown = segment.with_plain(encoded.select(["id", "city", "v"]))
    assert shown.schema.field("id").type == pa.int64()  # one id a row: the copy costs ~the ids
    assert pa.types.is_dictionary(shown.schema.field("city").type)  # 5 values: the copy would cost 2.5 times
    assert shown.column("id").to_pylist() == rows.column("id").to_pylist()
    again = segment.with_plain(encoded.select(["id"])).column("id").chunk(0)
    assert again.buffers()[1].address == shown.column("id").chunk(0).buffers()[1].address  # kept, not decoded again
    registry = SegmentRegistry()
    registry.put(TABLE, segment)
    got = run_pinot(registry, "SELECT city, COUNT(*), MAX(id) FROM events WHERE id > 10 GROUP BY city "
                              "ORDER BY city LIMIT 10", [segment.name])
    assert [tuple(r.values()) for r in got.to_pylist()] == reference(
        "SELECT city, COUNT(*), MAX(id) FROM events WHERE id > 10 GROUP BY city ORDER BY city NULLS LAST LIMIT 10",
        rows)


LATE_SELECTIONS = [
    "SELECT * FROM events WHERE city LIKE '%e%' ORDER BY ts DESC LIMIT 5",
    "SELECT city, d FROM events WHERE v > 0 ORDER BY v, id LIMIT 7 OFFSET 3",
    "SELECT id, city, v * 2 AS w FROM events ORDER BY w DESC NULLS LAST, 1 LIMIT 9",
    "SELECT * FROM events WHERE v IS NULL ORDER BY id LIMIT 500",  # more rows than pass WHERE
    "SELECT city FROM events WHERE v > 1000 ORDER BY ts LIMIT 3",  # none pass
]


@pytest.mark.parametrize("half", [None, TimeFilter("ts", "<=", BASE_MS + 400_000)])  # a hybrid table's half
@pytest.mark.parametrize("sql", LATE_SELECTIONS)
def test_a_selection_read_late_answers_as_one_read_whole(loaded, sql: str, half: TimeFilter | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``top_sql`` picks the rows by WHERE and ORDER BY; the SELECT list is read for those rows only. Same rows,
    same docs count, whether the server reads late (every input here, with the threshold at 0) or not."""
    import cuvee.server.query_executor as executor_module

    registry, rows, names = loaded
    plan, whole = plan_request(sql, names)
    assert plan.top_sql is not None and whole.top_sql is None
    whole = replace(whole, time_filter=half)
    late = replace(whole, top_sql=plan.top_sql)
    expected, expected_stats = QueryExecutor(registry).execute(whole)
    monkeypatch.setattr(executor_module, "LATE_ROWS", 0)
    picked: list[str] = []
    real = executor_module._late_rows
    monkeypatch.setattr(executor_module, "_late_rows", lambda *a: picked.append("late") or real(*a))
    got, stats = QueryExecutor(registry).execute(late)
    assert picked == ["late"] and stats.exceptions == ()
    assert got is not None and expected is not None
    assert got.to_pylist() == expected.to_pylist()  # every ORDER BY here is total on the rows it keeps
    assert stats.numDocsScanned == expected_stats.numDocsScanned
    schema_ = schema().arrow_schema()
    assert merge_partials(plan, [got], schema_).to_pylist() == merge_partials(plan, [expected], schema_).to_pylist()


def test_only_selections_with_columns_to_read_late_carry_top_sql() -> None:
    assert plan_sql("SELECT * FROM events ORDER BY ts LIMIT 3", resolve).top_sql == \
        'SELECT __cuvee_row FROM cuvee_segments ORDER BY "ts" LIMIT 3'
    assert plan_sql("SELECT id FROM events WHERE city = 'x' ORDER BY 1 DESC LIMIT 3 OFFSET 1", resolve).top_sql is None
    assert plan_sql("SELECT id, city FROM events LIMIT 3", resolve).top_sql is None  # no ORDER BY
    assert plan_sql("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY 2 LIMIT 3", resolve).top_sql is None
    request_ = ServerQueryRequest("1", TABLE, "SELECT 1", ("s",), 1000, top_sql="SELECT __cuvee_row FROM x")
    assert ServerQueryRequest.decode(request_.encode()) == request_
    assert "topSql" not in ServerQueryRequest("1", TABLE, "SELECT 1", ("s",), 1000).to_dict()  # older servers


@pytest.mark.parametrize("sql", [
    "SELECT city, COUNT(*), DISTINCTCOUNT(v), PERCENTILE(d, 50) FROM events WHERE v > 0 GROUP BY city "
    "ORDER BY 2 DESC, city LIMIT 3",
    "SELECT DISTINCTCOUNT(city), AVG(d) FROM events WHERE id % 3 = 0",
    "SELECT city, MAX(d) FROM events WHERE v IS NOT NULL GROUP BY city HAVING COUNT(*) > 1000 LIMIT 5",  # none
    "SELECT city, MIN(ts), DISTINCTSUM(v) FROM events GROUP BY city ORDER BY city LIMIT 4",  # no WHERE: every row
])
def test_a_whole_request_answers_as_the_merged_partials_do(loaded, sql: str) -> None:
    """A single server's one-step answer (``whole_sql``, the docs count on every row) is the broker's merge of that
    server's partial answer, with the same numDocsScanned (counted alone when HAVING leaves no row)."""
    registry, rows, names = loaded
    plan, parts = plan_request(sql, names)
    assert plan.whole_sql is not None
    counted = plan.docs_column is not None
    whole = ServerQueryRequest("1", TABLE, plan.whole_sql, tuple(names), 10_000,
                               plan.count_sql if counted else plan.docs_scanned_sql,
                               docs_total_column=DOCS_TOTAL_COLUMN if counted else None)
    assert ServerQueryRequest.decode(whole.encode()) == whole
    answer, stats = QueryExecutor(registry).execute(whole)
    partial, partial_stats = QueryExecutor(registry).execute(parts)
    assert stats.exceptions == () and answer is not None and partial is not None
    merged = merge_partials(plan, [partial], schema().arrow_schema())
    assert answer.schema == merged.schema and answer.to_pylist() == merged.to_pylist()
    assert stats.numDocsScanned == partial_stats.numDocsScanned > 0  # counted alone when no row is answered
    assert stats.numSegmentsMatched == partial_stats.numSegmentsMatched


def test_the_docs_column_is_the_last_integer_one(loaded) -> None:
    """A user's column named like the docs column comes before it and stays; a request naming a column that is not
    the planner's integer count is error 200, not a crash."""
    registry, rows, names = loaded
    plan = plan_sql('SELECT city, COUNT(*) AS "__docs_total" FROM events WHERE v > 0 GROUP BY city '
                    "ORDER BY 2 DESC, city LIMIT 2", resolve)
    assert plan.whole_sql is not None
    whole = ServerQueryRequest("1", TABLE, plan.whole_sql, tuple(names), 10_000, plan.count_sql,
                               docs_total_column=DOCS_TOTAL_COLUMN)
    answer, stats = QueryExecutor(registry).execute(whole)
    assert stats.exceptions == () and answer is not None and answer.column_names == ["city", "__docs_total"]
    assert stats.numDocsScanned == reference("SELECT COUNT(*) FROM events WHERE v > 0", rows)[0][0]
    for column in ("city", "d", "ts"):
        crafted = ServerQueryRequest("1", TABLE, f"SELECT {column} FROM cuvee_segments LIMIT 3", tuple(names),
                                     10_000, docs_total_column=column)
        result, stats = QueryExecutor(registry).execute(crafted)
        assert result is None and [e.error_code for e in stats.exceptions] == [200]
