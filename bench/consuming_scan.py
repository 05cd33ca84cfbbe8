"""A query over a consuming segment against the same rows committed, in one server's query executor.

The rows (the shared 10-column event, ``_events.py``) are appended to a real ``MutableSegment`` in batches of
``--batch`` rows, as the consume loop does, and served two ways by ``QueryExecutor`` with the server's DuckDB
copies on (its default): as the consuming segment (the path a ``ConsumingView`` takes: sealed blocks of
``--block`` rows copied into DuckDB, the rest read as Arrow per query; the copies made before timing, as on a
server a moment after each block sealed) and as the segment committed from the same rows (built by the same
builder, its copy made first, as a settled server reads it; ``--arrow`` also times it without the copy). Each
query's server step is timed ``--runs`` times after a warm-up, the two taking turns so that a shared machine's load
falls on both alike; printed: the best wall time and the median CPU time of the process (all of DuckDB's threads:
less sensitive to other processes' load than wall time), and their ratios. The tail (rows since the last seal)
is ``--rows`` modulo ``--block``; it is read from a DuckDB tail table appended by the queries (see
``cuvee.server.consuming.blocks``). ``--fresh N`` publishes N more rows before each timed consuming query, as
the consume loop does on a server ingesting between queries (the consuming segment grows by N rows a query, its
committed twin does not), ``--gap-ms`` after it: the time the copies' worker has to append them to the tail table
before the query comes (0: the query mostly appends them itself, the worst case). Issue 28's target: consuming
≤ 1.3× committed at 500,000 rows.

    .venv/bin/python bench/consuming_scan.py [--rows 500000] [--block 50000] [--batch 10000] [--runs 25] [--arrow]
        [--fresh 100 [--gap-ms 20]]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np
import pyarrow as pa

from cuvee.config.table import IndexingConfig
from cuvee.protocol.query import ServerQueryRequest
from cuvee.query import TableInfo, plan_sql
from cuvee.query.rewrite import DOCS_TOTAL_COLUMN
from cuvee.segment.builder import build_segment
from cuvee.segment.mutable import MutableSegment
from cuvee.server.consuming.blocks import DEFAULT_BLOCK_ROWS, ConsumingScan, OpenBlock, SealedBlock
from cuvee.server.native_copies import NativeCopies
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.registry import SegmentRegistry
from cuvee.testing.waiting import wait_until
from _events import SCHEMA, event_batches

TABLE = "events_REALTIME"
INFO = TableInfo(TABLE, tuple(SCHEMA.column_names), frozenset({"ts"}))
QUERIES = [
    "SELECT COUNT(*) FROM events",
    "SELECT SUM(revenue) FROM events WHERE clicks > 5",
    "SELECT page, COUNT(*) FROM events GROUP BY page ORDER BY COUNT(*) DESC LIMIT 10",
    "SELECT DISTINCTCOUNT(user) FROM events",
    "SELECT COUNT(*) FROM events WHERE country = 'country-00003'",
]


class _Consuming:
    """What ``ConsumingView`` reads of a consuming segment, over a bare MutableSegment (no stream, no thread)."""

    def __init__(self, mutable: MutableSegment, block_rows: int) -> None:
        self.name = mutable.name
        self.mutable = mutable
        self.schema = SCHEMA
        self.scan = ConsumingScan(mutable, SCHEMA, block_rows)
        self.last_ingestion_ms = 0

    @property
    def num_docs(self) -> int:
        return self.mutable.num_docs

    def encoded_snapshot(self, *, past_cap: bool = False, columns: Collection[str] | None = None) -> pa.Table:
        return self.scan.table(self.mutable.num_docs, columns)

    def sealed_blocks(self, count: int) -> list[SealedBlock]:
        return self.scan.blocks(count)

    def open_blocks(self, count: int) -> dict[int, OpenBlock]:
        return self.scan.open_blocks(count)

    def follow(self, follower: Callable[[OpenBlock, int], None]) -> None:
        self.scan.follow(follower)


def _request(sql: str, segment: str) -> ServerQueryRequest:
    """The request a broker sends its only server: the whole query in one step where the plan has one."""
    plan = plan_sql(sql, lambda name: INFO if name.lower() == "events" else None)
    if plan.whole_sql is not None:
        counted = plan.docs_column is not None
        return ServerQueryRequest("1", TABLE, plan.whole_sql, (segment,), 60_000,
                                  plan.count_sql if counted else plan.docs_scanned_sql,
                                  docs_total_column=DOCS_TOTAL_COLUMN if counted else None)
    return ServerQueryRequest("1", TABLE, plan.server_sql, (segment,), 60_000, plan.docs_scanned_sql, plan.docs_column)


def _timed(pairs: list[tuple[QueryExecutor, ServerQueryRequest]], runs: int,
           fresh: Callable[[], None] = lambda: None) -> list[list[tuple[float, float]]]:
    """Each request's server step, ``runs`` times after a warm-up, the requests taking turns (a shared machine's
    load then falls on each alike): (wall ms, CPU ms of this process: every DuckDB thread, load or not);
    ``fresh`` runs (untimed) before the first request's each time."""
    for executor, request in pairs:
        _, stats = executor.execute(request)  # warm-up (plain copies, caches)
        assert not stats.exceptions, stats.exceptions
    times: list[list[tuple[float, float]]] = [[] for _ in pairs]
    for _ in range(runs):
        for index, ((executor, request), kept) in enumerate(zip(pairs, times)):
            if index == 0:
                fresh()
            wall, cpu = time.perf_counter(), time.process_time()
            executor.execute(request)
            kept.append(((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK_ROWS, help="the consuming segment's scan_block_rows")
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--arrow", action="store_true", help="also time the committed segment without its copy")
    parser.add_argument("--fresh", type=int, default=0, help="rows published before each timed consuming query")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="the wait between publishing them and the query")
    args = parser.parse_args()
    more = args.fresh * (args.runs + 1) * len(QUERIES)
    mutable = MutableSegment(SCHEMA, IndexingConfig(), args.rows + more, name="events__0__0__20261129T0000Z",
                             time_column="ts")
    for i, batch in enumerate(event_batches(args.rows, args.batch)):
        mutable.append(batch, np.arange(i * args.batch, i * args.batch + batch.num_rows))
    arriving = iter(event_batches(more, args.fresh, seed=8) if args.fresh else [])

    def fresh() -> None:
        batch = next(arriving, None)
        if batch is not None:
            mutable.append(batch, np.arange(mutable.num_docs, mutable.num_docs + batch.num_rows))
            consuming_segment.scan.published(mutable.num_docs)  # as the consume loop does after each batch
            time.sleep(args.gap_ms / 1000)
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-consuming-") as tmp:
        built = build_segment(mutable.snapshot(), SCHEMA, IndexingConfig(), Path(tmp), "events__0__0__committed",
                              table_name=TABLE, time_column="ts")
        consuming, committed = SegmentRegistry(), SegmentRegistry()
        consuming_segment = _Consuming(mutable, args.block)
        view = ConsumingView(consuming_segment)  # type: ignore[arg-type]
        consuming.put(TABLE, view)
        segment = CommittedSegment(built)
        committed.put(TABLE, segment)
        base = mutable.num_docs
        natives = NativeCopies(max_bytes=4 << 30, min_rows=1, directory=Path(tmp) / "native")
        try:
            on_consuming = QueryExecutor(consuming, natives=natives)
            on_committed = QueryExecutor(committed, natives=natives)
            on_arrow = QueryExecutor(committed)
            on_committed.execute(_request(QUERIES[1], built.name))  # asks for the copies
            on_consuming.execute(_request(QUERIES[1], mutable.name))
            blocks = view.sealed_blocks(base)
            wait_until(lambda: all(natives.ready(natives.token(s)) for s in [segment, *blocks]), 300, interval=0.1)
            print(f"{args.rows} rows appended in batches of {args.batch}: {len(blocks)} sealed blocks of "
                  f"{args.block}, a tail of {args.rows - len(blocks) * args.block}; server step, median of "
                  f"{args.runs}, turn about (ms)" + (f"; {args.fresh} more rows appended before each consuming "
                                                    f"query ({more} in all)" if args.fresh else ""))
            print(f"{'query':<72} {'consuming':>15} {'committed':>15} {'ratio':>11}" +
                  ("  arrow (best)" if args.arrow else ""))
            print(f"{'':<72} {'wall   CPU':>15} {'wall   CPU':>15} {'wall   CPU':>11}")
            walls, cpus = [], []
            for sql in QUERIES:
                pairs = [(on_consuming, _request(sql, mutable.name)), (on_committed, _request(sql, built.name))]
                if args.arrow:
                    pairs.append((on_arrow, _request(sql, built.name)))
                times = _timed(pairs, args.runs, fresh)
                (live_wall, live_cpu), (done_wall, done_cpu) = [
                    (min(w for w, _ in t), statistics.median(c for _, c in t)) for t in times[:2]]
                walls.append(live_wall / done_wall)
                cpus.append(live_cpu / max(done_cpu, 1e-3))
                arrow = f" {min(w for w, _ in times[2]):13.2f}" if args.arrow else ""
                print(f"{sql[:72]:<72} {live_wall:6.2f} {live_cpu:8.2f} {done_wall:6.2f} {done_cpu:8.2f} "
                      f"{walls[-1]:5.2f} {cpus[-1]:5.2f}{arrow}")
            print(f"consuming / committed, geometric mean: wall {statistics.geometric_mean(walls):.2f}, CPU "
                  f"{statistics.geometric_mean(cpus):.2f}; worst: wall {max(walls):.2f}, CPU {max(cpus):.2f}")
        finally:
            natives.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
