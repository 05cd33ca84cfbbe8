"""A consuming segment's sealed blocks (``cuvee.server.consuming.blocks``): queries over a real ConsumingSegment
answer as DuckDB does over the same rows at every tail size, read copied blocks from DuckDB and only the rest as
Arrow, stay a consistent prefix while rows arrive and blocks seal, keep multi-value columns decoded once (counted
in memoryBytes), and let their copies go with the segment."""

from __future__ import annotations

import copy
import gc
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from cuvee.config import Schema
from cuvee.config.errors import ConfigValidationError
from cuvee.node.config import load_config
from cuvee.protocol.query import ServerQueryRequest
from cuvee.query import TableInfo, merge_partials, plan_sql
from cuvee.segment.builder import build_segment
from cuvee.server import query_executor
from cuvee.server.consuming import SegmentCompletionClient
from cuvee.server.consuming.blocks import ConsumingScan
from cuvee.server.consuming.build import logical_table
from cuvee.server.config import ServerConfig
from cuvee.server.consuming.segment import ConsumingSegment
from cuvee.server.native_copies import TAILS, NativeCopies
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableContext
from tests.server.test_consuming_support import FAST, SCHEMA_DOC, TABLE, make_replica, record, schema

BLOCK = 8
INFO = TableInfo(TABLE, tuple(schema().column_names), frozenset({"ts"}), frozenset({"tags"}))
QUERIES = [  # (Pinot SQL, the same over the rows in DuckDB)
    ("SELECT COUNT(*) FROM events", None),
    ("SELECT COUNT(*), SUM(clicks), MIN(id), MAX(id) FROM events WHERE clicks > 2", None),
    ("SELECT country, COUNT(*) FROM events GROUP BY country ORDER BY country LIMIT 10",
     "SELECT country, COUNT(*) FROM events GROUP BY country ORDER BY country NULLS LAST"),
    ("SELECT DISTINCTCOUNT(country) FROM events", "SELECT COUNT(DISTINCT country) FROM events"),
    ("SELECT COUNT(*) FROM events WHERE tags = 't1'", "SELECT COUNT(*) FROM events WHERE list_contains(tags, 't1')"),
    ("SELECT id, tags FROM events WHERE clicks IS NULL ORDER BY id LIMIT 100",
     "SELECT id, tags FROM events WHERE clicks IS NULL ORDER BY id"),
]


def rows(start: int, count: int) -> pa.Table:
    """Events ``start``.. with nulls (every 5th clicks, every 7th country, every 6th tags) and multi-values."""
    ids = range(start, start + count)
    target = schema().arrow_schema()
    columns = {
        "id": list(ids),
        "country": [None if i % 7 == 3 else ["fr", "us", "de", "jp"][i % 4] for i in ids],
        "tags": [None if i % 6 == 1 else [f"t{j}" for j in range(i % 4)] for i in ids],
        "clicks": [None if i % 5 == 0 else i % 9 for i in ids],
        "ts": [1_700_000_000_000 + i for i in ids],
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in target}, schema=target)


@pytest.fixture
def consuming(tmp_path: Path) -> Any:
    """A real ConsumingSegment (not started: the test appends its rows) with blocks of ``BLOCK`` rows (set on its
    scan: the server setting's floor, ``MIN_BLOCK_ROWS``, would make every-tail-size tests slow)."""
    client = SegmentCompletionClient(FAST, leader_url="http://127.0.0.1:9")  # never called
    replica = make_replica(tmp_path, tmp_path / "log", record(rows=5_000), instance="s1", client=client,
                           config=FAST)
    assert replica.segment._scan is not None
    replica.segment._scan.block_rows = BLOCK  # no block is cut yet
    yield replica.segment
    replica.segment.stop()


def append(segment: ConsumingSegment, table: pa.Table) -> None:
    mutable = segment._mutable
    assert mutable is not None
    first = mutable.num_docs
    for batch in table.to_batches():
        assert mutable.append(batch, np.arange(first, first + batch.num_rows)) == batch.num_rows
        first += batch.num_rows


def write_in_batches(segment: ConsumingSegment, every: pa.Table, sizes: Any, done: threading.Event,
                     published: Callable[[int], None] | None = None) -> None:
    """Append ``every`` in batches of ``sizes`` (then ``published``, as the consume loop does), then set ``done``."""
    at, total = 0, every.num_rows
    for size in sizes:
        if at >= total:
            break
        append(segment, every.slice(at, min(int(size), total - at)))
        at = min(at + int(size), total)
        if published is not None:
            published(at)
    done.set()


def plain(table: pa.Table) -> pa.Table:
    return logical_table(table, schema())


def run(executor: QueryExecutor, sql: str, segments: list[str]) -> list[tuple]:
    plan = plan_sql(sql, lambda name: INFO if name.lower() == "events" else None)
    request = ServerQueryRequest("1", TABLE, plan.server_sql, tuple(segments), 10_000, plan.docs_scanned_sql,
                                 plan.docs_column)
    result, stats = executor.execute(request)
    assert stats.exceptions == (), stats.exceptions
    merged = merge_partials(plan, [result] if result is not None else [], schema().arrow_schema())
    return [tuple(row.values()) for row in merged.to_pylist()]


def reference(sql: str, table: pa.Table) -> list[tuple]:
    con = duckdb.connect()
    con.register("events", table)
    return con.sql(sql).fetchall()


def test_the_query_table_equals_the_rows_at_every_tail_size(consuming: ConsumingSegment) -> None:
    """One row at a time, from no row to two blocks and more: every tail size 0..BLOCK+1 behind sealed blocks, the
    whole table and a projection of it are the rows (nulls and multi-values included), and an earlier count still
    reads only its prefix."""
    every = rows(0, 2 * BLOCK + 3)
    for count in range(every.num_rows + 1):
        if count:
            append(consuming, every.slice(count - 1, 1))
        assert plain(consuming.encoded_snapshot()).equals(every.slice(0, count)), count
        assert len(consuming.sealed_blocks(count)) == count // BLOCK
        picked = consuming.encoded_snapshot(columns={"tags", "id"})
        assert picked.column_names == ["id", "tags"]
        assert picked.column("tags").to_pylist() == every.column("tags").to_pylist()[:count]
    scan = consuming._scan
    assert scan is not None
    assert plain(scan.table(BLOCK + 1)).equals(every.slice(0, BLOCK + 1))
    assert [(b.start, b.end) for b in scan.blocks(every.num_rows)] == [(0, BLOCK), (BLOCK, 2 * BLOCK)]


def test_sealed_blocks_keep_multi_value_columns_decoded_once_and_count_them(consuming: ConsumingSegment) -> None:
    append(consuming, rows(0, 3 * BLOCK + 2))
    first = consuming.encoded_snapshot().column("tags")
    again = consuming.encoded_snapshot().column("tags")
    assert first.num_chunks == again.num_chunks == 4  # three blocks, then the tail
    def values_at(chunk: pa.Array) -> int:  # where a chunk's decoded values live
        return chunk.values.buffers()[1].address

    assert [values_at(c) for c in first.chunks[:3]] == [values_at(c) for c in again.chunks[:3]]  # kept
    assert values_at(first.chunks[3]) != values_at(again.chunks[3])  # the tail's: decoded by each query
    scan = consuming._scan
    assert scan is not None and consuming._mutable is not None
    kept = scan.bytes_kept()
    assert set(kept) == {"tags"} and kept["tags"] > 0
    by_column = consuming.info()["memoryByColumn"]
    assert by_column["tags"] == consuming._mutable.bytes_used()["tags"] + kept["tags"]
    assert by_column["id"] == consuming._mutable.bytes_used()["id"]


def test_a_sealed_block_copies_as_the_committed_segment_of_its_rows(consuming: ConsumingSegment,
                                                                    tmp_path: Path) -> None:
    """A block's rows are its copy's rows, typed exactly as a committed segment's copy (one DuckDB table holds
    both: other types would keep the blocks out of it)."""
    every = rows(0, 2 * BLOCK)
    append(consuming, every)
    block = consuming.sealed_blocks(every.num_rows)[1]
    assert block.total_docs == BLOCK
    assert block.to_arrow(decode=True).equals(every.slice(BLOCK, BLOCK))
    built = build_segment(every, schema(), consuming.table.indexing, tmp_path / "built", "events__0__9__x")
    assert built.to_arrow(decode=True).schema == block.to_arrow(decode=True).schema


@pytest.fixture
def natives(tmp_path: Path) -> Any:
    copies = NativeCopies(max_bytes=1 << 30, min_rows=1, background=False, directory=tmp_path / "native")
    yield copies
    copies.close()


def test_queries_read_copied_blocks_from_duckdb_and_the_tail_from_its_duckdb_table(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the server's DuckDB copies, each sealed block is copied once, a query scans it there, and the rows
    since the last seal from the open block's tail table (appended per query: nothing reaches DuckDB as Arrow);
    the answers are DuckDB's over the same rows, at every tail size, beside a committed segment of the same table
    (one DuckDB table holds both copies)."""
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    done = rows(10_000, 40)
    built = build_segment(done, schema(), consuming.table.indexing, tmp_path / "built", "events__0__9__x")
    registry.put(TABLE, CommittedSegment(built))
    executor = QueryExecutor(registry, natives=natives)
    arrow_rows: list[int] = []
    real_register = query_executor.register

    def register(con: Any, name: str, table: pa.Table) -> None:
        if name == "cuvee_rest":
            arrow_rows.append(table.num_rows)
        real_register(con, name, table)

    monkeypatch.setattr(query_executor, "register", register)
    every = rows(0, 3 * BLOCK + 5)
    for count in range(1, every.num_rows + 1):  # every tail size, 0..BLOCK - 1, behind 0..3 sealed blocks
        append(consuming, every.slice(consuming.num_docs, count - consuming.num_docs))
        both = pa.concat_tables([every.slice(0, count), done])
        for sql, ref in QUERIES[1:]:
            arrow_rows.clear()
            assert run(executor, sql, [consuming.name, built.name]) == reference(ref or sql, both), (count, sql)
            assert arrow_rows == [], (count, sql, arrow_rows)  # the tail too is read from DuckDB
            assert len(tail_tables(natives)) <= 2, count  # the open block's, and a sealed one's not seen copied
    tables, _, _ = natives.summary()
    assert tables[TABLE][0] == 1 + 3  # the committed segment and three blocks


def tail_tables(natives: NativeCopies) -> list[str]:
    """The tail tables in ``TABLE``'s database of copies (none: no database)."""
    copies = natives._tables.get(TABLE)
    if copies is None:
        return []
    return [name for (name,) in copies.con.sql(
        f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{TAILS}'").fetchall()]


def test_a_stopped_segment_lets_its_blocks_copies_go(consuming: ConsumingSegment, natives: NativeCopies) -> None:
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    append(consuming, rows(0, 2 * BLOCK + 1))
    assert run(QueryExecutor(registry, natives=natives), QUERIES[1][0], [consuming.name])
    assert natives.summary()[0][TABLE][0] == 2
    registry.remove(TABLE, consuming.name)
    consuming.stop()
    gc.collect()
    natives.drain()
    assert natives.summary()[0] == {}


def test_answers_stay_a_consistent_prefix_while_rows_arrive_and_blocks_seal(consuming: ConsumingSegment,
                                                                            tmp_path: Path) -> None:
    """A writer appends batches of 1..20 rows while queries run (copies made in the background): every answer is
    some prefix's, whole (ids 0..n-1 counted once each), and the answers grow."""
    copies = NativeCopies(max_bytes=1 << 30, min_rows=1, directory=tmp_path / "native")
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry, natives=copies)
    total = 40 * BLOCK + 3
    every = rows(0, total)
    sizes = np.random.default_rng(3).integers(1, 21, total)
    done = threading.Event()

    writer = threading.Thread(target=write_in_batches, args=(consuming, every, sizes, done))
    seen: list[int] = []
    try:
        writer.start()
        while not done.is_set() or not seen or seen[-1] < total:
            [(count, id_sum, low, high)] = run(executor, "SELECT COUNT(*), SUM(id), MIN(id), MAX(id) FROM events",
                                               [consuming.name])
            assert id_sum == count * (count - 1) // 2 or count == 0, (count, id_sum)
            assert count == 0 or (low, high) == (0, count - 1)
            seen.append(count)
        assert seen == sorted(seen) and seen[-1] == total
    finally:
        writer.join()
        copies.close()


def test_a_blocks_copy_is_stored_compressed(tmp_path: Path, natives: NativeCopies) -> None:
    """DuckDB compresses rows at a checkpoint, and a block's few rows never reach its automatic one: each copy is
    checkpointed, so a filter on a string column compares dictionary entries, not every row's string."""
    config = replace(FAST, scan_block_rows=4096)
    client = SegmentCompletionClient(config, leader_url="http://127.0.0.1:9")
    segment = make_replica(tmp_path, tmp_path / "log", record(rows=20_000), instance="s1", client=client,
                           config=config).segment
    try:
        registry = SegmentRegistry()
        registry.put(TABLE, ConsumingView(segment))
        append(segment, rows(0, 3 * 4096))
        assert run(QueryExecutor(registry, natives=natives), QUERIES[1][0], [segment.name])
        copies = natives._tables[TABLE]
        assert copies.version is not None
        stored = copies.con.sql(
            f"SELECT DISTINCT compression FROM pragma_storage_info('{copies.version.name}') "
            "WHERE column_name = 'country' AND segment_type = 'VARCHAR'").fetchall()
        assert stored and ("Uncompressed",) not in stored, stored
    finally:
        segment.stop()


class _Evolved:
    """The table served under its schema plus a column ``color`` (default 'none'), added since the segment began."""

    def __init__(self, segment: ConsumingSegment) -> None:
        self.table = segment.table
        self.doc = copy.deepcopy(SCHEMA_DOC)
        self.doc["dimensionFieldSpecs"].append({"name": "color", "dataType": "STRING", "defaultNullValue": "none"})

    def served_version(self, table: str) -> tuple[str, int]:
        return "events", 2

    def schema_at(self, name: str, version: int) -> Schema:
        return Schema.from_json(self.doc)

    def get(self, table: str) -> TableContext:
        return TableContext(self.table, Schema.from_json(self.doc), "events")


def test_a_column_added_since_the_segment_began_reads_its_default_beside_copied_blocks(
        consuming: ConsumingSegment, natives: NativeCopies) -> None:
    """The blocks' copies hold the stored columns only: a query reading the added column scans Arrow (its default
    filled in), one that does not still reads the copies."""
    served = ServedSchemas(_Evolved(consuming))
    served.ensure(TABLE)
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry, natives=natives, schemas=served)
    every = rows(0, 2 * BLOCK + 3)
    append(consuming, every)
    result, stats = executor.execute(ServerQueryRequest("1", TABLE, "SELECT SUM(id) FROM cuvee_segments",
                                                        (consuming.name,), 10_000))
    assert stats.exceptions == () and result is not None
    assert result.column(0).to_pylist() == [sum(range(every.num_rows))]
    assert natives.summary()[0][TABLE][0] == 2  # that query asked for the blocks' copies, and read them
    sql = "SELECT color, COUNT(*), SUM(clicks) FROM cuvee_segments GROUP BY color"
    clicks = sum(c for c in every.column("clicks").to_pylist() if c is not None)
    result, stats = executor.execute(ServerQueryRequest("1", TABLE, sql, (consuming.name,), 10_000))
    assert stats.exceptions == () and result is not None
    assert [tuple(r.values()) for r in result.to_pylist()] == [("none", every.num_rows, clicks)]


def test_scan_block_rows_is_a_server_setting_of_integers_from_duckdbs_vector_size() -> None:
    config = load_config(ServerConfig, None, {"consumer.scan_block_rows": 2048})
    assert config.consumer.scan_block_rows == 2048
    assert ServerConfig().consumer.scan_block_rows == 122_880
    for bad in (2.5, True):
        with pytest.raises((ValueError, ConfigValidationError), match="scan_block_rows"):
            load_config(ServerConfig, None, {"consumer.scan_block_rows": bad})
    for small in (0, -5, 1, 1000, 2047):  # tiny blocks made queries far slower: refused, naming key and floor
        with pytest.raises((ValueError, ConfigValidationError), match=r"consumer\.scan_block_rows .*>= 2048"):
            load_config(ServerConfig, None, {"consumer.scan_block_rows": small})


def test_count_star_of_a_consuming_segment_is_answered_from_its_rows_as_execute_does(
        consuming: ConsumingSegment) -> None:
    """``count_now`` (the route's event-loop answer) counts a consuming segment's published rows, with the same
    statistics as a scan of them (freshness included), at every size: no worker thread, no view built."""
    from dataclasses import replace as changed

    from cuvee.query.rewrite import COUNT_ROWS_SERVER_SQL

    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry)
    request = ServerQueryRequest("1", TABLE, COUNT_ROWS_SERVER_SQL, (consuming.name,), 10_000)
    every = rows(0, BLOCK + 3)
    for count in (0, 1, BLOCK, BLOCK + 3):
        append(consuming, every.slice(consuming.num_docs, count - consuming.num_docs))
        now = executor.count_now(request)
        assert now is not None and now[0].column(0).to_pylist() == [count]
        result, stats = executor.execute(request)
        assert now[0].equals(result)
        assert changed(now[1], timeUsedMs=0, minConsumingFreshnessTimeMs=0) == changed(
            stats, timeUsedMs=0, minConsumingFreshnessTimeMs=0)
        assert now[1].numConsumingSegmentsQueried == 1 and now[1].minConsumingFreshnessTimeMs > 0


def test_a_segment_stopped_between_taking_its_blocks_copies_and_binding_them_still_answers(
        consuming: ConsumingSegment, natives: NativeCopies, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit's swap (or a table's delete, or shutdown) stops the segment after a query took its sealed blocks'
    copies and before it binds them: the query binds the blocks it took (the stopped segment has none left), and
    answers its rows."""
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 2 * BLOCK + 3)
    append(consuming, every)
    sql = QUERIES[1][0]
    assert run(executor, sql, [consuming.name]) == reference(sql, every)  # asks for the blocks' copies (made)
    assert natives.summary()[0][TABLE][0] == 2
    real = query_executor._bind_native

    def stopping(*args: Any, **kwargs: Any) -> str:
        consuming.stop()
        return real(*args, **kwargs)

    monkeypatch.setattr(query_executor, "_bind_native", stopping)
    assert run(executor, sql, [consuming.name]) == reference(sql, every)
    assert consuming.sealed_blocks(every.num_rows) == []  # stopped indeed: a second look would find no block


def test_the_memory_limit_counts_the_multi_value_columns_blocks_keep(consuming: ConsumingSegment) -> None:
    """The consumer ends a segment at its memory share by what ``memoryBytes`` reports: the segment's buffers and
    the multi-value columns its sealed blocks keep decoded (a share between the two ends it)."""
    from cuvee.server.consuming.consume import EndCriteria, StopReason

    append(consuming, rows(0, 3 * BLOCK + 2))
    consuming.encoded_snapshot()  # a query reading tags: the sealed blocks keep it decoded
    scan, mutable = consuming._scan, consuming._mutable
    assert scan is not None and mutable is not None and scan.bytes_kept()["tags"] > 0
    buffers = sum(mutable.bytes_used().values())
    assert consuming.info()["memoryBytes"] == buffers + scan.bytes_kept()["tags"]
    share = buffers + scan.bytes_kept()["tags"] // 2
    end = EndCriteria(row_limit=1_000_000, deadline=None, force=lambda: False, paused=lambda: False,
                      memory_limit=lambda: share)
    assert consuming._consumer.consume(end) == StopReason.MEMORY_LIMIT  # before any fetch (there is no stream)


def test_a_block_copied_into_duckdb_no_longer_keeps_its_multi_value_columns(
        consuming: ConsumingSegment, natives: NativeCopies) -> None:
    """Once a sealed block's DuckDB copy is ready, queries read its rows there: its decoded multi-value columns are
    dropped (and not kept again by a query reading it as Arrow), and the answers stay the rows'."""
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 3 * BLOCK + 2)
    append(consuming, every)
    scan = consuming._scan
    assert scan is not None
    sql, ref = QUERIES[4]  # reads tags
    assert run(executor, sql, [consuming.name]) == reference(ref, every)  # asks for the copies (made: no thread)
    assert scan.bytes_kept()["tags"] > 0 and natives.summary()[0][TABLE][0] == 3
    assert run(executor, sql, [consuming.name]) == reference(ref, every)  # reads the copies
    assert scan.bytes_kept() == {}
    assert consuming.encoded_snapshot().column("tags").to_pylist() == every.column("tags").to_pylist()
    assert scan.bytes_kept() == {}
