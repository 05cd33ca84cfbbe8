"""Committed segments' DuckDB copies: the same answers as the Arrow views (alone and mixed with segments not copied
yet), under a byte budget that only idle copies make room in, dropped with their segment but never under a
running query, and one database per table."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.metrics.server import ServerMetrics
from cuvee.protocol.query import ServerQueryRequest, TimeFilter
from cuvee.query import merge_partials, plan_sql
from cuvee.server.native_copies import SEGMENT_COLUMN, NativeCopies, NativeRead, copy_bytes
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from tests.broker.helpers import BASE_MS, TABLE, committed, event_rows, schema, segment_name
from tests.server.test_query_executor import resolve


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[CommittedSegment]:
    work = tmp_path_factory.mktemp("native")
    parts = [event_rows(300, 0, 1), event_rows(250, 300, 2), event_rows(200, 550, 3)]
    return [committed(work, segment_name(0, i), part) for i, part in enumerate(parts)]


def _natives(max_bytes: int = 1 << 30, clock: _Clock | None = None) -> NativeCopies:
    return NativeCopies(max_bytes, min_idle_seconds=60, min_rows=1, clock=clock or _Clock(), background=False)


def _registry(segments: list[CommittedSegment]) -> SegmentRegistry:
    registry = SegmentRegistry()
    for segment in segments:
        registry.put(TABLE, segment)
    return registry


def _two_of_three_copied(segments: list[CommittedSegment],
                         clock: _Clock) -> tuple[NativeCopies, list[int], list[int]]:
    """Copies with room for the first two segments only, those two made: the copies, the tokens, each size."""
    sizes = [copy_bytes(s.segment.to_arrow(decode=True)) for s in segments]
    natives = _natives(max_bytes=sizes[0] + sizes[1], clock=clock)
    tokens = [natives.token(s) for s in segments]
    natives.want(tokens[0], TABLE, segments[0].segment)
    natives.want(tokens[1], TABLE, segments[1].segment)
    return natives, tokens, sizes


QUERIES = [
    "SELECT COUNT(*), SUM(d), MIN(v), MAX(ts) FROM events WHERE v > 3 AND city <> 'bern'",
    "SELECT city, COUNT(*), AVG(d), DISTINCTCOUNT(v) FROM events GROUP BY city ORDER BY COUNT(*) DESC, city LIMIT 5",
    "SELECT id, city, ts FROM events WHERE city = 'zurich' ORDER BY id LIMIT 7",
    "SELECT city, v FROM events WHERE id BETWEEN 100 AND 110 ORDER BY id",
    "SELECT COUNT(*) FROM events WHERE ts IS NOT NULL",
]


def _answer(executor: QueryExecutor, sql: str, names: list[str],
            time_filter: TimeFilter | None = None) -> list[tuple]:
    plan = plan_sql(sql, resolve)
    request = ServerQueryRequest("1", TABLE, plan.server_sql, tuple(names), 10_000, plan.docs_scanned_sql,
                                 plan.docs_column, time_filter=time_filter)
    result, stats = executor.execute(request)
    assert stats.exceptions == (), stats.exceptions
    merged = merge_partials(plan, [result] if result is not None else [], schema().arrow_schema())
    return [tuple(row.values()) for row in merged.to_pylist()], stats.numDocsScanned


@pytest.mark.parametrize("copied", [[0, 1, 2], [1], []])
@pytest.mark.parametrize("sql", QUERIES)
def test_queries_answer_alike_over_copies_views_and_both(segments: list[CommittedSegment], sql: str,
                                                         copied: list[int]) -> None:
    registry = _registry(segments)
    natives = _natives()
    for i in copied:
        natives.want(natives.token(segments[i]), TABLE, segments[i].segment)
    assert all(natives.ready(natives.token(s)) == (i in copied) for i, s in enumerate(segments))
    names = [s.name for s in segments]
    # the copies are read only once ready: a query made none it did not ask for, in the background here
    plain = QueryExecutor(registry)
    assert _answer(QueryExecutor(registry, natives=natives), sql, names) == _answer(plain, sql, names)
    natives.close()


def test_virtual_columns_answer_beside_copies(segments: list[CommittedSegment],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every segment copied: a query naming a virtual column reads the segments' views (the copies hold no doc ids
    nor names) and answers as without copies; the others still read the copies."""
    registry = _registry(segments)
    natives = _natives()
    for segment in segments:
        natives.want(natives.token(segment), TABLE, segment.segment)
    names = [s.name for s in segments]
    read: list[set[int]] = []  # the copies each query read
    reading = natives.reading

    @contextmanager
    def counted(table: str, tokens: Sequence[int], *args: Any) -> Iterator[NativeRead | None]:
        with reading(table, tokens, *args) as held:
            read.append(set() if held is None else set(held.tokens))
            yield held

    monkeypatch.setattr(natives, "reading", counted)
    copied, plain = QueryExecutor(registry, natives=natives, host_name="h1"), QueryExecutor(registry, host_name="h1")
    per_segment = ("SELECT $segmentName, $hostName, COUNT(*), MIN($docId), MAX($docId) FROM events "
                   "GROUP BY 1, 2 ORDER BY 1")
    answer, _ = _answer(copied, per_segment, names)
    assert answer == [(name, "h1", n, 0, n - 1) for name, n in zip(names, (300, 250, 200))]
    picked = "SELECT id, $docId FROM events WHERE $docId BETWEEN 5 AND 6 AND $segmentName <> '{}' ORDER BY id"
    assert _answer(copied, picked.format(names[0]), names) == _answer(plain, picked.format(names[0]), names)
    assert [row[1] for row in _answer(copied, picked.format(names[0]), names)[0]] == [5, 6, 5, 6]
    assert not any(read)  # no query naming a virtual column read a copy
    assert _answer(copied, QUERIES[0], names) == _answer(plain, QUERIES[0], names)
    assert read[-1] == {natives.token(segment) for segment in segments}  # the others read every copy
    natives.close()


def test_a_hybrid_half_filters_the_copies_too(segments: list[CommittedSegment]) -> None:
    registry = _registry(segments)
    natives = _natives()
    for segment in segments[:2]:
        natives.want(natives.token(segment), TABLE, segment.segment)
    names = [s.name for s in segments]
    half = TimeFilter("ts", "<=", BASE_MS + 400_000)  # ids below 400 (1 s apart)
    sql = "SELECT COUNT(*), SUM(v) FROM events"
    got = _answer(QueryExecutor(registry, natives=natives), sql, names, half)
    assert got == _answer(QueryExecutor(registry), sql, names, half)
    assert got[1] < sum(s.num_docs for s in segments)  # the filter held back rows
    # the half's rows keep their segments' names and doc ids (rows in time order: a prefix of each segment)
    per_segment = "SELECT $segmentName, COUNT(*), MIN($docId), MAX($docId) FROM events GROUP BY 1 ORDER BY 1"
    halves = _answer(QueryExecutor(registry, natives=natives), per_segment, names, half)
    assert halves == _answer(QueryExecutor(registry), per_segment, names, half)
    assert [row[0] for row in halves[0]] == names[:2] and all(n == high + 1 and low == 0 for _, n, low, high
                                                              in halves[0])
    assert sum(n for _, n, *_ in halves[0]) == got[0][0][0]
    natives.close()


def test_a_query_asks_for_copies_and_reads_them_once_made(segments: list[CommittedSegment]) -> None:
    registry = _registry(segments)
    natives = _natives()
    executor = QueryExecutor(registry, natives=natives)
    names = [s.name for s in segments]
    metrics = ServerMetrics()
    metrics.watch_native_copies(natives.summary)
    assert _gauges(metrics) == {"cuvee_server_native_copy_budget_used_bytes": 0,
                                "cuvee_server_native_copies_building": 0}
    before = _answer(executor, QUERIES[0], names)  # built in the caller here (background=False)
    assert all(natives.ready(natives.token(s)) for s in segments)
    size = sum(copy_bytes(s.segment.to_arrow(decode=True)) for s in segments)
    assert natives.bytes == size
    assert _gauges(metrics) == {f"cuvee_server_native_copies{{table={TABLE}}}": 3,
                                f"cuvee_server_native_copy_bytes{{table={TABLE}}}": size,
                                "cuvee_server_native_copy_budget_used_bytes": size,
                                "cuvee_server_native_copies_building": 0}
    assert _answer(executor, QUERIES[0], names) == before
    natives.close()
    assert natives.bytes == 0
    assert _gauges(metrics)["cuvee_server_native_copy_budget_used_bytes"] == 0


def _gauges(metrics: ServerMetrics) -> dict[str, float]:
    """The native copies' series a scrape shows: name{table=…} -> value."""
    return {sample.name + ("{table=%s}" % sample.labels["table"] if sample.labels else ""): sample.value
            for family in metrics.registry.collect() if family.name.startswith("cuvee_server_native_cop")
            for sample in family.samples}


def test_only_idle_copies_make_room_and_a_declined_segment_waits(segments: list[CommittedSegment]) -> None:
    clock = _Clock()
    natives, tokens, sizes = _two_of_three_copied(segments, clock)
    clock.now += 30
    natives.want(tokens[2], TABLE, segments[2].segment)  # both copies read lately (made 30 s ago): no room
    assert not natives.ready(tokens[2]) and natives.ready(tokens[0]) and natives.ready(tokens[1])
    clock.now += 20
    with natives.reading(TABLE, [tokens[1]]) as read:  # segment 1 read now; segment 0 stays idle
        assert read is not None and read.tokens == {tokens[1]}
        old_version = read.relation
    natives.want(tokens[2], TABLE, segments[2].segment)  # declined 20 s ago: not tried again yet
    assert not natives.ready(tokens[2])
    clock.now += 41  # segment 0 idle for 91 s, segment 1 for 41 s; the decline 61 s old
    natives.want(tokens[2], TABLE, segments[2].segment)
    assert natives.ready(tokens[2]) and natives.ready(tokens[1]) and not natives.ready(tokens[0])
    assert natives.bytes == sizes[1] + sizes[2]  # segment 0's deleted rows compacted away
    with natives.reading(TABLE, tokens) as read:
        assert read is not None and read.tokens == {tokens[1], tokens[2]} and read.relation != old_version
        counted = read.cursor.sql(f'SELECT {SEGMENT_COLUMN}, count(*) FROM "{read.relation}" GROUP BY 1 '
                                  "ORDER BY 1").fetchall()
    assert counted == [(tokens[1], 250), (tokens[2], 200)]
    natives.close()


def test_a_segment_gone_mid_query_keeps_its_copy_until_the_query_ends(tmp_path: Path) -> None:
    natives = _natives()
    segment = committed(tmp_path, segment_name(0, 9), event_rows(100, 0, 4))
    token = natives.token(segment)
    natives.want(token, TABLE, segment.segment)
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        del segment
        gc.collect()  # the segment left the server: its copy is forgotten, but this query still reads it
        natives.drain()
        assert not natives.ready(token)
        assert read.cursor.sql(f'SELECT count(*) FROM "{read.relation}" WHERE {SEGMENT_COLUMN} = {token}'
                               ).fetchall() == [(100,)]
    assert TABLE not in natives._tables and natives.bytes == 0  # the table's last copy went, and its database
    natives.close()


def test_a_compaction_leaves_the_old_rows_to_the_query_reading_them(segments: list[CommittedSegment]) -> None:
    clock = _Clock()
    natives, tokens, sizes = _two_of_three_copied(segments, clock)
    clock.now += 120
    with natives.reading(TABLE, [tokens[1]]) as read:  # reads the first version; segment 0 is idle
        assert read is not None
        natives.want(tokens[2], TABLE, segments[2].segment)  # segment 0 deleted, the table rewritten without it
        assert natives.ready(tokens[2])
        # the version this query reads is still there (a query reads its held segments' rows only)
        assert read.cursor.sql(f'SELECT count(*) FROM "{read.relation}" WHERE {SEGMENT_COLUMN} = {tokens[1]}'
                               ).fetchall() == [(250,)]
    with natives.reading(TABLE, tokens) as read:
        assert read is not None
        assert read.cursor.sql(f'SELECT count(*) FROM "{read.relation}"').fetchall() == [(450,)]
        versions = {row[0] for row in read.cursor.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert versions == {read.relation}  # the old version was dropped once its reader ended
    natives.close()


def test_each_table_has_its_own_database(tmp_path: Path, segments: list[CommittedSegment]) -> None:
    """A query runs on its table's database: another table's copies are not there to be named."""
    natives = _natives()
    other = committed(tmp_path, segment_name(0, 8), event_rows(50, 0, 5))
    mine, theirs = natives.token(segments[0]), natives.token(other)
    natives.want(mine, TABLE, segments[0].segment)
    natives.want(theirs, "other_OFFLINE", other.segment)
    with natives.reading(TABLE, [mine, theirs]) as read:
        assert read is not None and read.tokens == {mine}  # another table's copy is not lent to this query
        assert read.cursor.sql("SELECT count(*) FROM duckdb_tables()").fetchall() == [(1,)]
        assert read.cursor.sql(f'SELECT count(*) FROM "{read.relation}"').fetchall() == [(300,)]
    natives.close()


def test_copies_live_in_database_files_that_leave_with_them(tmp_path: Path,
                                                          segments: list[CommittedSegment]) -> None:
    """The copies are files in the given directory: what an earlier process left is removed at start, a table's
    file goes with its last copy, and a temporary directory of their own goes with the copies."""
    directory = tmp_path / "natives"
    directory.mkdir()
    (directory / "copies-1.duckdb").write_bytes(b"stale: left by a server that stopped")
    natives = NativeCopies(1 << 30, min_idle_seconds=60, min_rows=1, clock=_Clock(), background=False,
                           directory=directory)
    assert not directory.exists()
    held = committed(tmp_path, segment_name(0, 5), event_rows(120, 0, 7))
    token = natives.token(held)
    natives.want(token, TABLE, held.segment)
    assert natives.ready(token)
    files = [p.name for p in directory.iterdir()]
    assert any(name.endswith(".duckdb") for name in files), files
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        assert read.cursor.sql("SELECT count(*) FROM duckdb_databases() WHERE path IS NOT NULL AND NOT "
                               "internal").fetchall() == [(1,)]  # a database file, not memory
    del held
    gc.collect()
    natives.drain()
    assert list(directory.iterdir()) == []  # the table's last copy went: its file too
    natives.close()

    private = _natives()
    natives_dir = None
    for segment in segments:
        private.want(private.token(segment), TABLE, segment.segment)
        natives_dir = private._directory
    assert natives_dir is not None and any(natives_dir.iterdir())
    private.close()
    assert not natives_dir.exists()


def test_none_kept_at_zero_bytes(segments: list[CommittedSegment]) -> None:
    off = NativeCopies(0, background=False)
    assert not off.enabled
    off.want(off.token(segments[0]), TABLE, segments[0].segment)
    assert not off.ready(off.token(segments[0])) and off.bytes == 0


def test_a_large_query_copies_its_segments_however_small_and_a_small_query_none(
        segments: list[CommittedSegment]) -> None:
    """``min_rows`` is the query's bound, not a segment's: a realtime table's segments end at any size (1M streamed
    rows in 3 partitions commit ~90k-row segments), and a floor per segment left all of those scanned as Arrow."""
    natives = NativeCopies(1 << 30, min_idle_seconds=60, min_rows=500, clock=_Clock(), background=False)
    executor = QueryExecutor(_registry(segments), natives=natives)
    _answer(executor, QUERIES[0], [segments[0].name])  # 300 rows: under the bound, nothing asked for
    assert natives.bytes == 0 and not any(natives.ready(natives.token(s)) for s in segments)
    _answer(executor, QUERIES[0], [s.name for s in segments])  # 750 rows, in segments of 300, 250 and 200
    assert all(natives.ready(natives.token(s)) for s in segments)
    natives.close()


def test_a_copy_is_made_in_the_background(segments: list[CommittedSegment]) -> None:
    from cuvee.testing.waiting import wait_until

    natives = NativeCopies(1 << 30, min_rows=1)
    token = natives.token(segments[0])
    natives.want(token, TABLE, segments[0].segment)
    wait_until(lambda: natives.ready(token), 10, message="the copy was never made")
    natives.close()
    assert not natives.ready(token)


def test_the_copy_reads_back_as_the_segment(segments: list[CommittedSegment]) -> None:
    natives = _natives()
    token = natives.token(segments[0])
    natives.want(token, TABLE, segments[0].segment)
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        copied = read.cursor.sql(f'SELECT * EXCLUDE ({SEGMENT_COLUMN}) FROM "{read.relation}"').to_arrow_table()
    assert copied.to_pylist() == segments[0].to_arrow().to_pylist()
    assert isinstance(copied, pa.Table)
    natives.close()


def test_an_upsert_table_never_reads_copies(tmp_path: Path) -> None:
    """A copy holds every version of every key: an upsert table's valid docs come from its views (a segment
    whose docs are all valid, or a cached one, has no mask that would tell them apart)."""
    from cuvee.config import Schema, TableConfig
    from cuvee.config.table import IndexingConfig
    from cuvee.segment.builder import build_segment
    from cuvee.upsert.table import UpsertTables

    upsert_schema = Schema.from_json({
        "schemaName": "t", "primaryKeyColumns": ["id"], "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
        "metricFieldSpecs": [{"name": "v", "dataType": "INT"}],
        "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                                "granularity": "1:MILLISECONDS"}]})
    config = TableConfig.from_json({
        "tableName": "t", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts"},
        "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "t",
                                               "stream.log.dir": str(tmp_path / "log")}},
        "upsertConfig": {"mode": "FULL"}})
    table = "t_REALTIME"
    registry = SegmentRegistry()
    upserts = UpsertTables(lambda _: (config, upsert_schema))
    state = upserts.get(table)
    held = []
    for sequence in range(2):  # the second segment updates every key of the first
        rows = pa.table({"id": pa.array(range(500), pa.int64()), "v": pa.array([sequence] * 500, pa.int32()),
                         "ts": pa.array([sequence * 10 + 1] * 500, pa.int64())}, schema=upsert_schema.arrow_schema())
        name = f"t__0__{sequence}__20260101T0000Z"
        segment = CommittedSegment(build_segment(rows, upsert_schema, IndexingConfig(), tmp_path, name,
                                                 table_name=table, time_column="ts", creation_time_ms=1,
                                                 overwrite=True))
        state.serve(name, segment.segment, segment.segment.to_arrow(state.columns),
                    lambda segment=segment: registry.put(table, segment))
        held.append(segment)
    natives = _natives()
    executor = QueryExecutor(registry, upserts=upserts, natives=natives)
    request = ServerQueryRequest("1", table, "SELECT COUNT(*) AS n, SUM(v) AS s FROM cuvee_segments",
                                 tuple(s.name for s in held), 10_000)
    for _ in range(3):  # the second read of a committed segment comes from the valid-rows cache, unmasked
        result, stats = executor.execute(request)
        assert stats.exceptions == () and result is not None
        assert result.to_pylist() == [{"n": 500, "s": 500}]
    assert not any(natives.ready(natives.token(s)) for s in held)
    natives.close()


def test_a_failed_compaction_declines_the_copy_instead_of_retrying_forever(segments: list[CommittedSegment],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    natives, tokens, sizes = _two_of_three_copied(segments, clock)
    clock.now += 120
    monkeypatch.setattr(natives, "_compact", lambda table: False)  # e.g. DuckDB out of memory
    natives.want(tokens[2], TABLE, segments[2].segment)  # returns: the copy is declined
    assert not natives.ready(tokens[2]) and natives.building == 0
    assert natives.bytes == sizes[0] + sizes[1]  # segment 0's rows deleted but held until a compaction
    natives.close()


def test_version_names_are_never_reused(tmp_path: Path) -> None:
    """A reader's late drop of an old table version must never hit a newer table, even one made in a database
    made again for the same table (its first version is not "copies_1" again)."""
    natives = _natives()
    first = committed(tmp_path, segment_name(0, 7), event_rows(60, 0, 6))
    token = natives.token(first)
    natives.want(token, TABLE, first.segment)
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        before = read.relation
    del first
    gc.collect()
    natives.drain()
    assert TABLE not in natives._tables
    again = committed(tmp_path, segment_name(0, 6), event_rows(60, 0, 6))
    token = natives.token(again)
    natives.want(token, TABLE, again.segment)
    with natives.reading(TABLE, [token]) as read:
        assert read is not None and read.relation != before
    natives.close()


@pytest.mark.parametrize("sql", [
    "/**/" * 40 + "SELECT count(*) AS n FROM cuvee_segments",  # a regex over leading comments once backtracked
    "(WITH t AS (SELECT * FROM cuvee_segments) SELECT count(*) AS n FROM t)",
    "WITH t AS (SELECT v FROM cuvee_segments) SELECT count(*) AS n FROM t",
    "-- a comment first\nSELECT count(*) AS n FROM cuvee_segments",
])
def test_any_select_text_answers_over_copies_as_over_views(segments: list[CommittedSegment], sql: str) -> None:
    """Over copies, ``cuvee_segments`` goes before a statement that starts with SELECT as a WITH clause, and is a
    view for any other text: every form the wire allows answers as over the Arrow views, at once."""
    registry = _registry(segments)
    natives = _natives()
    for segment in segments:
        natives.want(natives.token(segment), TABLE, segment.segment)
    request = ServerQueryRequest("1", TABLE, sql, tuple(s.name for s in segments), 2_000)
    views, _ = QueryExecutor(registry).execute(request)
    copies, stats = QueryExecutor(registry, natives=natives).execute(request)
    natives.close()
    assert stats.exceptions == () and stats.timeUsedMs < 1_000
    assert views is not None and copies is not None and copies.to_pylist() == views.to_pylist() == [{"n": 750}]


class _Failing:
    """A DuckDB connection (or cursor) whose statements containing ``fails`` raise DuckDB's FatalException, as a
    write on a full disk does (DuckDB then invalidates the whole database)."""

    def __init__(self, inner: Any, fails: str, error: type[duckdb.Error] = duckdb.FatalException) -> None:
        self._inner, self._fails, self._error = inner, fails, error

    def cursor(self) -> _Failing:
        return _Failing(self._inner.cursor(), self._fails, self._error)

    def _check(self, sql: str) -> None:
        if self._fails in sql:
            raise self._error("FATAL Error: could not write file: No space left on device")

    def execute(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._inner.execute(sql, *args)

    def sql(self, sql: str, *args: Any) -> Any:
        self._check(sql)
        return self._inner.sql(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_database_that_fails_for_good_is_given_up_and_queries_scan_the_segments(
        segments: list[CommittedSegment]) -> None:
    """A write that invalidates a table's database (a full disk) takes its copies out of use at once: their bytes
    leave the budget, queries answer from the Arrow views, and the segments are not copied again until
    min_idle_seconds passed; a query that meets a failed database does the same."""
    clock = _Clock()
    natives, tokens, sizes = _two_of_three_copied(segments, clock)
    executor = QueryExecutor(_registry(segments), natives=natives)
    names = [s.name for s in segments]
    expected = _answer(executor, QUERIES[0], names)
    copies = natives._tables[TABLE]
    copies.con = _Failing(copies.con, "CHECKPOINT")  # type: ignore[assignment]
    natives._submit(("forget", tokens[0]))  # its rows deleted, then the CHECKPOINT fails for good
    assert TABLE not in natives._tables and natives.bytes == 0 and not natives.ready(tokens[1])
    assert copies.path.exists() is False  # closed and deleted by the worker (no query read it)
    assert _answer(executor, QUERIES[0], names) == expected  # from the Arrow views
    assert not natives.ready(tokens[1])  # declined for a while, not copied again at once
    clock.now += 61
    assert _answer(executor, QUERIES[0], names) == expected
    assert natives.ready(tokens[1]) and natives.ready(tokens[2])  # a new database
    fresh = natives._tables[TABLE]
    fresh.con = _Failing(fresh.con, SEGMENT_COLUMN)  # every statement over the copies fails for good
    plan = plan_sql(QUERIES[0], resolve)
    failed, stats = executor.execute(ServerQueryRequest("1", TABLE, plan.server_sql, tuple(names), 10_000,
                                                        plan.docs_scanned_sql, plan.docs_column))
    assert failed is None and len(stats.exceptions) == 1  # this query fails with a clear error ...
    assert "No space left" in stats.exceptions[0].message and TABLE not in natives._tables
    assert _answer(executor, QUERIES[0], names) == expected  # ... the next one scans the segments
    assert not fresh.path.exists() and natives.bytes == 0
    natives.close()


def test_close_leaves_a_database_to_the_query_reading_it(segments: list[CommittedSegment]) -> None:
    """The server stopping never closes a DuckDB database under a running query (that crashed the process): the
    query's end closes it, and deletes its file."""
    natives = _natives()
    token = natives.token(segments[0])
    natives.want(token, TABLE, segments[0].segment)
    path = natives._tables[TABLE].path
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        natives.close()
        assert path.exists()
        assert read.cursor.sql(f'SELECT count(*) FROM "{read.relation}"').fetchall() == [(300,)]
    assert not path.exists()
    with natives.reading(TABLE, [token]) as read:
        assert read is None  # closed: nothing is lent any more


def test_a_segment_that_cannot_be_copied_for_want_of_a_directory_is_declined_not_retried(
        tmp_path: Path, segments: list[CommittedSegment]) -> None:
    """A database that cannot be made (its directory unwritable, a file in its place, no file handles left)
    declines the segment for min_idle_seconds: queries do not decode it again on every read."""
    clock = _Clock()
    blocked = tmp_path / "blocked"
    natives = NativeCopies(1 << 30, min_idle_seconds=60, min_rows=1, clock=clock, background=False,
                           directory=blocked / "natives")
    blocked.write_bytes(b"a file where the directory should be")
    decoded = []

    class Counted:
        total_docs = segments[0].segment.total_docs

        def to_arrow(self, decode: bool = False) -> pa.Table:
            decoded.append(decode)
            return segments[0].segment.to_arrow(decode=decode)

    token = natives.token(segments[0])
    counted = Counted()
    for _ in range(3):
        natives.want(token, TABLE, counted)
    assert decoded == [True] and not natives.ready(token) and natives.building == 0
    blocked.unlink()
    clock.now += 61
    natives.want(token, TABLE, counted)
    assert natives.ready(token) and len(decoded) == 2
    natives.close()


def test_a_copy_read_while_its_database_was_given_up_never_touches_the_next_database(
        segments: list[CommittedSegment]) -> None:
    """A query still reading a copy of a database that was given up ends after the segment was copied again into
    a new database: the old copy's late delete settles its bytes only — it must not delete the new copy's rows."""
    clock = _Clock()
    natives, tokens, sizes = _two_of_three_copied(segments, clock)
    executor = QueryExecutor(_registry(segments), natives=natives)
    names = [s.name for s in segments]
    expected = _answer(executor, QUERIES[0], names)
    with natives.reading(TABLE, [tokens[0]]) as read:
        assert read is not None
        read.lose()  # the query met a failed database
        assert natives.bytes == 0 and not natives.ready(tokens[0])
        clock.now += 61
        natives.want(tokens[0], TABLE, segments[0].segment)
        natives.want(tokens[1], TABLE, segments[1].segment)
        assert natives.ready(tokens[0]) and natives.ready(tokens[1])  # in a new database
    assert natives.bytes == sizes[0] + sizes[1]
    assert natives._tables[TABLE].copies == 2 and natives._tables[TABLE].dead_bytes == 0
    assert _answer(executor, QUERIES[0], names) == expected
    with natives.reading(TABLE, tokens[:2]) as read:
        assert read is not None and read.tokens == set(tokens[:2])
        counted = read.cursor.sql(f'SELECT {SEGMENT_COLUMN}, count(*) FROM "{read.relation}" GROUP BY 1 '
                                  "ORDER BY 1").fetchall()
    assert counted == [(tokens[0], 300), (tokens[1], 250)]
    natives.close()


def test_a_write_that_fails_declines_the_copy_for_a_while_instead_of_for_ever(
        segments: list[CommittedSegment]) -> None:
    """A failed INSERT (a disk full for a moment: DuckDB's IOException, the database still valid) is retried
    after min_idle_seconds; only rows DuckDB would read back otherwise are never copied."""
    clock = _Clock()
    natives = _natives(clock=clock)
    first, second = natives.token(segments[0]), natives.token(segments[1])
    natives.want(first, TABLE, segments[0].segment)
    copies = natives._tables[TABLE]
    real = copies.con
    copies.con = _Failing(real, "INSERT INTO", duckdb.IOException)  # type: ignore[assignment]
    natives.want(second, TABLE, segments[1].segment)
    assert not natives.ready(second) and second not in natives._never and natives.ready(first)
    assert natives.bytes == copy_bytes(segments[0].segment.to_arrow(decode=True))
    copies.con = real
    clock.now += 61
    natives.want(second, TABLE, segments[1].segment)
    assert natives.ready(second)
    natives.close()


def test_a_segment_refused_for_its_columns_after_a_decline_is_never_decoded_again(
        segments: list[CommittedSegment]) -> None:
    """A decline (no room) that is past must not hide a later attempt's outcome: a segment whose columns differ
    from its table's copies is never copied, and never decoded again to find that out."""
    clock = _Clock()
    natives, _, _ = _two_of_three_copied(segments, clock)
    rows = segments[2].segment.to_arrow(decode=True)
    other = rows.append_column("added_since", pa.array([1] * rows.num_rows, pa.int64()))
    decoded = []

    class AddedColumn:
        total_docs = rows.num_rows

        def to_arrow(self, decode: bool = False) -> pa.Table:
            decoded.append(decode)
            return other

    segment = AddedColumn()
    token = natives.token(segments[2])
    natives.want(token, TABLE, segment)  # the two copies were read just now: no room, declined
    assert len(decoded) == 1 and token in natives._declined
    clock.now += 61
    natives.want(token, TABLE, segment)  # room now, but not the table's columns: never
    assert len(decoded) == 2 and token in natives._never and not natives.ready(token)
    clock.now += 61
    natives.want(token, TABLE, segment)
    assert len(decoded) == 2
    natives.close()


def test_a_copy_waits_for_free_disk(tmp_path: Path, segments: list[CommittedSegment],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy is made only while the disk has its decoded bytes free (DuckDB gives up a database whose write
    fails): short of them, the segment is declined for min_idle_seconds, then copied once there is room."""
    from collections import namedtuple

    from cuvee.server import native_copies

    clock = _Clock()
    natives = NativeCopies(1 << 30, min_idle_seconds=60, min_rows=1, clock=clock, background=False,
                           directory=tmp_path / "natives")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(native_copies.shutil, "disk_usage", lambda path: usage(1 << 30, 1 << 30, 1024))
    token = natives.token(segments[0])
    natives.want(token, TABLE, segments[0].segment)
    assert not natives.ready(token) and token in natives._declined and natives.bytes == 0
    monkeypatch.undo()  # the disk's real free bytes again
    natives.want(token, TABLE, segments[0].segment)
    assert not natives.ready(token)  # declined a moment ago: not tried again yet
    clock.now += 61
    natives.want(token, TABLE, segments[0].segment)
    assert natives.ready(token)
    natives.close()
