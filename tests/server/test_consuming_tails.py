"""A consuming segment's tail tables (``NativeCopies`` tails of ``cuvee.server.consuming.blocks.OpenBlock``): the
rows since the last seal, appended to a DuckDB table per query, answer as the rows do; a query reads exactly the
rows published when it started though later queries append more (and a block seals) while it runs; the tables
count against the copies' budget and go with the block's copy or the segment."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cuvee.protocol.query import ServerQueryRequest
from cuvee.query import plan_sql
from cuvee.query.errors import QueryErrorCode
from cuvee.segment.builder import build_segment
from cuvee.server import query_executor
from cuvee.server.consuming.blocks import OpenBlock
from cuvee.server.consuming.build import logical_table
from cuvee.server.consuming.segment import ConsumingSegment
from cuvee.server.native_copies import TAILS, NativeCopies, tail_bytes
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.registry import SegmentRegistry
from tests.server.test_consuming_blocks import (BLOCK, INFO, QUERIES, append, consuming, natives,  # noqa: F401 - fixtures
                                                reference, rows, run, tail_tables, write_in_batches)
from tests.server.test_consuming_support import TABLE, schema

SQL = "SELECT COUNT(*), SUM(id), MIN(id), MAX(id) FROM events"


def prefix(count: int) -> list[tuple]:
    """What ``SQL`` answers over ids 0..count-1 (the rows of ``rows(0, count)``)."""
    return [(count, count * (count - 1) // 2, 0, count - 1)]


def with_committed(consuming: ConsumingSegment, tmp_path: Path) -> tuple[SegmentRegistry, CommittedSegment]:
    """A registry serving the consuming segment beside a committed segment of the same table (ids from 10,000):
    its copy makes the table's DuckDB database exist before any block seals."""
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    built = build_segment(rows(10_000, 40), schema(), consuming.table.indexing, tmp_path / "built", "events__0__9__x")
    committed = CommittedSegment(built)
    registry.put(TABLE, committed)
    return registry, committed


def tail_rows(natives: NativeCopies) -> dict[str, int]:
    copies = natives._tables[TABLE]
    return {name: copies.con.sql(f'SELECT COUNT(*) FROM {TAILS}."{name}"').fetchone()[0]  # type: ignore[index]
            for name in tail_tables(natives)}


def during(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Run ``act`` once, inside the next query, after it bound its rows (tail tables held) and before it runs."""
    real = query_executor._bind_native
    pending = [act]

    def bind(*args: Any, **kwargs: Any) -> str:
        bound = real(*args, **kwargs)
        if pending:
            pending.pop()()
        return bound

    monkeypatch.setattr(query_executor, "_bind_native", bind)


def test_a_query_reads_the_rows_published_when_it_started_not_those_appended_since(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later query appends rows published after an earlier one started to the tail table both read: the earlier
    one still answers its own prefix (no row more), the later one every row (none lost)."""
    registry, _ = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 2 * BLOCK + 7)
    append(consuming, every.slice(0, 2 * BLOCK + 2))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 2)
    inner: list[list[tuple]] = []

    def later() -> None:
        append(consuming, every.slice(2 * BLOCK + 2, 5))  # still in the open block
        inner.append(run(executor, SQL, [consuming.name]))

    during(monkeypatch, later)
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 2)
    assert inner == [prefix(2 * BLOCK + 7)]
    assert list(tail_rows(natives).values()) == [7]  # the table held the later rows while the first query read it
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 7)


def test_a_block_sealing_while_a_query_runs_keeps_its_tail_until_it_ends(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a query holds the open block's tail table, rows seal the block, its copy is made and seen ready, and
    the block object is collected: the table stays until that query ends (which answers its own prefix), then
    goes; the next open block has a table of its own."""
    registry, _ = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 3 * BLOCK + 5)
    append(consuming, every.slice(0, 2 * BLOCK + 3))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 3)
    [held] = tail_tables(natives)
    seen: list[list[str]] = []

    def seal() -> None:
        append(consuming, every.slice(2 * BLOCK + 3, BLOCK + 2))  # block 2 seals; 5 rows open in block 3
        assert run(executor, SQL, [consuming.name]) == prefix(3 * BLOCK + 5)  # copies block 2
        assert run(executor, SQL, [consuming.name]) == prefix(3 * BLOCK + 5)  # sees it copied: block 2's tail goes
        gc.collect()
        natives.drain()
        seen.append(tail_tables(natives))

    during(monkeypatch, seal)
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 3)
    assert held in seen[0] and len(seen[0]) == 2  # still there while the first query read it, beside block 3's
    natives.drain()
    assert held not in tail_tables(natives) and len(tail_tables(natives)) == 1
    assert list(tail_rows(natives).values()) == [5]


def test_tail_tables_count_against_the_budget_and_go_with_the_segment(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path) -> None:
    """A tail table's rows count at what DuckDB's memory holds for them (``tail_bytes``) in the bytes the copies' budget bounds; when
    the segment leaves (committed or released), its tail table is dropped and its bytes given back, while the
    table's database stays for the committed segment's copy."""
    registry, _ = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    append(consuming, rows(0, 2 * BLOCK + 6))
    assert run(executor, SQL, [consuming.name, "events__0__9__x"]) == [
        (2 * BLOCK + 6 + 40, sum(range(2 * BLOCK + 6)) + sum(range(10_000, 10_040)), 0, 10_039)]

    def live_and_dead() -> int:
        tables, counted, _ = natives.summary()
        return tables[TABLE][1] + natives._tables[TABLE].dead_bytes

    assert consuming._mutable is not None
    open_rows = logical_table(consuming._mutable.snapshot(2 * BLOCK + 6, first_doc=2 * BLOCK), schema())
    assert natives.bytes - live_and_dead() == tail_bytes(open_rows, 0) > 2 * open_rows.nbytes > 0
    assert len(tail_tables(natives)) == 1
    registry.remove(TABLE, consuming.name)
    consuming.stop()
    gc.collect()
    natives.drain()
    assert tail_tables(natives) == [] and natives._tails == {}
    assert natives.bytes == live_and_dead() and natives.summary()[0][TABLE][0] == 1  # the committed segment's copy


def test_no_tail_table_past_the_budget_the_rows_are_read_as_arrow(
        consuming: ConsumingSegment, tmp_path: Path) -> None:
    """A tail that would not fit the copies' budget is not made: its rows are read as Arrow, the answers alike."""
    registry, committed = with_committed(consuming, tmp_path)
    copies = NativeCopies(max_bytes=1 << 30, min_rows=1, background=False, directory=tmp_path / "native")
    try:
        executor = QueryExecutor(registry, natives=copies)
        every = rows(0, 2 * BLOCK + 4)
        append(consuming, every.slice(0, 2 * BLOCK))
        assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK)  # the blocks copied, no tail yet
        copies.max_bytes = copies.bytes  # no room left for a tail
        append(consuming, every.slice(2 * BLOCK))
        for sql, ref in QUERIES[1:]:
            assert run(executor, sql, [consuming.name]) == reference(ref or sql, every), sql
        assert tail_tables(copies) == [] and [tail.dropping for tail in copies._tails.values()] == [True]
        assert copies.bytes == copies.max_bytes
    finally:
        copies.close()


class _Block:
    """An ``OpenBlock``'s shape (``start``, ``end``, ``rows``) over given rows, for many small tails at once."""

    def __init__(self, rows: pa.Table) -> None:
        self.start, self.end, self._rows = 0, BLOCK, rows

    def rows(self, start: int, end: int) -> pa.Table:
        return self._rows.slice(start, end - start)


def tails_memory(natives: NativeCopies) -> int:
    """The bytes DuckDB's in-memory tails database of ``TABLE`` holds (``pragma_database_size``, e.g. '7.7 MiB')."""
    [(text,)] = natives._tables[TABLE].con.sql(
        f"SELECT memory_usage FROM pragma_database_size() WHERE database_name = '{TAILS}'").fetchall()
    number, unit = text.split()
    return int(float(number) * {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit])


def test_many_small_tails_stay_within_the_budget_in_duckdbs_memory(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path) -> None:
    """Tails are in memory, uncompressed, each column a block however few its rows: many small tails under a
    small budget are counted at what DuckDB holds for them, so past the budget the next are refused (read as
    Arrow) instead of DuckDB's memory growing ~100 times past what was counted."""
    registry, committed = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    run(executor, SQL, [committed.name])  # its copy: the table's database, and the rows as DuckDB reads them
    token = natives.token(committed)
    assert natives.ready(token)
    copies = natives._tables[TABLE]
    version = copies.version
    assert version is not None
    logical = copies.con.sql(f'SELECT * FROM "{version.name}" LIMIT {BLOCK}').to_arrow_table()
    logical = logical.select(copies.schema.names)  # type: ignore[union-attr]
    budget = 4 << 20
    natives.max_bytes = natives.bytes + budget
    blocks = [_Block(logical) for _ in range(60)]
    made = []
    with natives.reading(TABLE, [token]) as read:
        assert read is not None
        for block in blocks:
            kept = read.tail(block, 2)
            kept = read.tail(block, 5) if kept is not None else None  # a second append, as each batch's
            made.append(kept is not None)
            if kept is not None:
                assert read.cursor.sql(f"SELECT COUNT(*) FROM {kept[0]}").fetchone() == (5,)
        assert tails_memory(natives) <= budget
    assert 0 < sum(made) < len(blocks) and made == sorted(made, reverse=True)  # the first fit, the rest refused
    assert natives.bytes <= natives.max_bytes


def test_concurrent_queries_and_ingestion_each_answer_a_whole_prefix(
        consuming: ConsumingSegment, tmp_path: Path) -> None:
    """A writer appends batches of 1..20 rows while two threads query (copies made in the background, the tail
    tables appended by the copies' worker after each batch or by a query that comes first): every answer is a
    whole prefix's, and each thread's grow."""
    scan = consuming._scan
    assert scan is not None
    registry, _ = with_committed(consuming, tmp_path)
    copies = NativeCopies(max_bytes=1 << 30, min_rows=1, directory=tmp_path / "native")
    executor = QueryExecutor(registry, natives=copies)
    total = 30 * BLOCK + 3
    every = rows(0, total)
    sizes = np.random.default_rng(5).integers(1, 21, total)
    done = threading.Event()
    failures: list[BaseException] = []
    seen: list[list[int]] = [[], []]

    def read(kept: list[int]) -> None:
        try:
            while not done.is_set() or not kept or kept[-1] < total:
                [(count, id_sum, low, high)] = run(executor, SQL, [consuming.name])
                assert count == 0 or (id_sum, low, high) == prefix(count)[0][1:], count
                kept.append(count)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    # published as the consume loop does: the worker appends to the tail tables queries made
    threads = [threading.Thread(target=write_in_batches, args=(consuming, every, sizes, done, scan.published))]
    threads += [threading.Thread(target=read, args=(k,)) for k in seen]
    try:
        for thread in threads:
            thread.start()
    finally:
        for thread in threads:
            thread.join(120)
        copies.close()
    assert failures == []
    assert all(kept == sorted(kept) and kept[-1] == total for kept in seen)


def test_answers_equal_the_committed_segments_of_the_same_rows(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path) -> None:
    """At several tail sizes behind sealed blocks (the tail read from its table), each query answers as the
    segment committed from the same rows does (its DuckDB copy read: one database of copies for both)."""
    registry = SegmentRegistry()
    registry.put(TABLE, ConsumingView(consuming))
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 3 * BLOCK + 7)
    for count in (BLOCK + 1, 2 * BLOCK + 3, 3 * BLOCK, 3 * BLOCK + 7):
        append(consuming, every.slice(consuming.num_docs, count - consuming.num_docs))
        name = f"events__0__9__{count}"
        built = build_segment(every.slice(0, count), schema(), consuming.table.indexing, tmp_path / name, name)
        committed = CommittedSegment(built)
        registry.put(TABLE, committed)
        for sql, _ in QUERIES:
            assert run(executor, sql, [name]) == run(executor, sql, [consuming.name]) == \
                run(executor, sql, [name]), (count, sql)
        if count % BLOCK:
            assert natives.ready(natives.token(committed))  # compared with its copy
            assert len(tail_tables(natives)) >= 1
        registry.remove(TABLE, name)


def test_rows_published_after_a_query_made_the_tail_are_appended_by_the_copies_not_the_next_query(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The consume loop tells the scan of each batch (``after_publish``): once a query made the open block's tail
    table, the copies' worker appends each batch to it, and the next query appends nothing and reads no Arrow."""
    assert consuming._scan is not None and consuming._consumer.after_publish == consuming._scan.published
    registry, _ = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 2 * BLOCK + 7)
    append(consuming, every.slice(0, 2 * BLOCK + 2))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 2)  # makes the tail (2 rows)
    append(consuming, every.slice(2 * BLOCK + 2, 3))
    consuming._scan.published(2 * BLOCK + 5)  # what the consume loop does: the worker appends (no thread: now)
    assert list(tail_rows(natives).values()) == [5]
    appends: list[int] = []
    real_append = NativeCopies._append
    monkeypatch.setattr(NativeCopies, "_append", lambda self, *args, **kwargs: appends.append(args[-1]) or
                        real_append(self, *args, **kwargs))
    arrow_rows: list[int] = []
    real_register = query_executor.register
    monkeypatch.setattr(query_executor, "register", lambda con, name, table: (
        arrow_rows.append(table.num_rows), real_register(con, name, table)))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 5)
    assert appends == [] and arrow_rows == []


def test_a_query_does_not_wait_for_the_worker_appending_its_rows(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows the worker was asked to append (``follow``) and has not yet: the query reads them as Arrow beside the
    rows the table holds, answers all of them, and appends nothing itself."""
    registry, _ = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, 2 * BLOCK + 6)
    append(consuming, every.slice(0, 2 * BLOCK + 1))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 1)
    [tail] = natives._tails.values()
    append(consuming, every.slice(2 * BLOCK + 1, 5))
    tail.following = 2 * BLOCK + 6  # asked, not done: the worker busy with a copy
    arrow_rows: list[int] = []
    real_register = query_executor.register
    monkeypatch.setattr(query_executor, "register", lambda con, name, table: (
        arrow_rows.append(table.num_rows), real_register(con, name, table)))
    for sql, ref in QUERIES[1:]:
        arrow_rows.clear()
        assert run(executor, sql, [consuming.name]) == reference(ref or sql, every), sql
        assert arrow_rows == [5], sql
    assert list(tail_rows(natives).values()) == [1]


def test_a_failing_follower_never_stops_the_consume_thread(consuming: ConsumingSegment) -> None:
    """The tail tables are an optimisation: a follower that fails is logged, and the batch's publication goes on."""
    scan = consuming._scan
    assert scan is not None
    append(consuming, rows(0, 3))
    scan.open_blocks(3)
    told: list[int] = []

    def failing(block: Any, count: int) -> None:
        told.append(count)
        raise RuntimeError("no thread left")

    scan.follow(failing)
    scan.published(3)
    assert told == [3]


def test_a_query_past_its_deadline_while_its_tail_rows_convert_times_out_and_appends_nothing(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A query that appends its tail's rows itself passes its deadline while they are converted (Python: DuckDB's
    interrupt, sent to a cursor not running anything, is lost): it answers the timeout (250) instead of inserting
    them and answering late; the tail is kept, and the next query appends them and answers them all."""
    now = [0.0]
    registry, committed = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives, clock=lambda: now[0])
    every = rows(0, 2 * BLOCK + 5)
    append(consuming, every.slice(0, 2 * BLOCK + 2))
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 2)  # its tail made, 2 rows
    append(consuming, every.slice(2 * BLOCK + 2, 3))
    real_rows = OpenBlock.rows

    def slow(block: OpenBlock, start: int, end: int) -> pa.Table:
        now[0] += 1.0  # the conversion outlives the query's 200 ms
        return real_rows(block, start, end)

    monkeypatch.setattr(OpenBlock, "rows", slow)
    plan = plan_sql(SQL, lambda name: INFO)
    request = ServerQueryRequest("1", TABLE, plan.server_sql, (consuming.name,), 200, plan.docs_scanned_sql,
                                 plan.docs_column)
    result, stats = executor.execute(request)
    assert result is None and [error.error_code for error in stats.exceptions] == [QueryErrorCode.SERVER_TIMEOUT]
    assert list(tail_rows(natives).values()) == [2]  # nothing appended past the deadline
    [tail] = natives._tails.values()
    assert not tail.dropping and tail.readers == 0
    monkeypatch.setattr(OpenBlock, "rows", real_rows)
    assert run(executor, SQL, [consuming.name]) == prefix(2 * BLOCK + 5)
    assert list(tail_rows(natives).values()) == [5]


def test_a_query_over_only_a_consuming_segment_with_no_block_copied_reads_its_tail_table(
        consuming: ConsumingSegment, natives: NativeCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table's database exists (a committed segment's copy) but no block of the consuming segment sealed: a
    query reading the consuming segment alone holds no copy, and still reads (and appends) its tail table in
    DuckDB rather than its rows as Arrow."""
    registry, committed = with_committed(consuming, tmp_path)
    executor = QueryExecutor(registry, natives=natives)
    every = rows(0, BLOCK - 1)
    append(consuming, every.slice(0, 3))
    run(executor, SQL, [consuming.name, committed.name])  # the committed segment's copy, and the tail (3 rows)
    assert natives.ready(natives.token(committed)) and list(tail_rows(natives).values()) == [3]
    append(consuming, every.slice(3))
    arrow_rows: list[int] = []
    real_register = query_executor.register
    monkeypatch.setattr(query_executor, "register", lambda con, name, table: (
        arrow_rows.append(table.num_rows), real_register(con, name, table)))
    for sql, ref in QUERIES[1:]:
        assert run(executor, sql, [consuming.name]) == reference(ref or sql, every), sql
    assert arrow_rows == [] and list(tail_rows(natives).values()) == [BLOCK - 1]
