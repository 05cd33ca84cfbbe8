"""Upsert on a server against append-only on the same rows: issue 7's server-level figures.

    .venv/bin/python bench/upsert_server.py [--rows 2000000] [--keys 500000] [--segments 8] [--repeat 5]

- **ingest**: CPU seconds (``time.process_time``) for a consuming segment to take the stream's rows, a batch of
  10,000 at a time as a consumer does: JSON messages decoded and stored, append-only against upsert (the key map
  deciding each batch between writing and publishing it) (target ≥ 0.7×). The storing step alone is shown too:
  the harshest ratio, with the decoding both pay left out.
  A PARTIAL table (each row merged with its key's previous version before it is stored) is shown beside it.
- **query**: median latency of a few queries against append-only segments holding only the valid rows (target
  overhead ≤ 20 %), read as the server reads them (``cuvee.upsert.reads``): the committed segments whose valid docs
  did not change since the last query (their valid rows cached), the same right after they changed (each query
  takes the valid rows again: the cache is cold), and one consuming segment holding every version (its valid
  docs filtered in DuckDB's scan).
- **restart**: the committed segments loaded as a restarting server does (load + CRC check), append-only against
  upsert deciding keys from the rows, and upsert preloading valid-docs snapshots (target ≤ 2× append-only).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import orjson
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from cuvee.config import Schema, TableConfig
from cuvee.decode.json import JsonDecoder
from cuvee.segment.builder import build_segment
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.mutable import MutableSegment
from cuvee.server.query_executor import _bind
from cuvee.server.queryable import CommittedSegment, encoded_logical_table
from cuvee.upsert.reads import VALID_COLUMN, ValidRowCache, scan_tables, valid_mask
from cuvee.upsert.snapshot import SnapshotStore
from cuvee.upsert.table import TableUpsert

SCHEMA = Schema.from_json({
    "schemaName": "accounts", "primaryKeyColumns": ["id"],
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "region", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})
CONFIG = TableConfig.from_json({
    "tableName": "accounts", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts"},
    "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "accounts",
                                           "stream.log.dir": "/nonexistent/not-read"}},
    "upsertConfig": {"mode": "FULL"}})
PARTIAL = TableConfig.from_json({**CONFIG.to_json(), "upsertConfig": {
    "mode": "PARTIAL", "partialUpsertStrategies": {"v": "INCREMENT"}}})
QUERIES = ["SELECT COUNT(*) FROM cuvee_segments",
           "SELECT SUM(v), MAX(ts) FROM cuvee_segments",
           "SELECT region, COUNT(*), SUM(v) FROM cuvee_segments GROUP BY region",
           "SELECT id, v FROM cuvee_segments WHERE v > 900000 ORDER BY v DESC LIMIT 10"]
BATCH = 10_000


def rows(count: int, keys: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ids = rng.integers(0, keys, count)
    return pa.table({"id": ids, "region": pa.array(np.char.add("r", (ids % 16).astype(str))),
                     "v": rng.integers(0, 1_000_000, count), "ts": np.arange(count, dtype=np.int64)})


def name(sequence: int) -> str:
    return f"accounts__0__{sequence}__20260101T0000Z"


class _Reader:
    """A mutable segment read as a server's consuming segment is (``cuvee.server.consuming.ConsumingSegment``)."""

    def __init__(self, segment: MutableSegment) -> None:
        self.segment, self.name = segment, segment.name

    @property
    def published_docs(self) -> int:
        return self.segment.num_docs

    def encoded_snapshot(self, *, past_cap: bool = False) -> pa.Table:
        return encoded_logical_table(self.segment.snapshot(), SCHEMA.arrow_schema())


def ingest(data: pa.Table, upsert: TableUpsert | None, messages: list[bytes] | None = None
           ) -> tuple[float, MutableSegment]:
    """CPU seconds to store ``data`` (decoding ``messages``, its rows as JSON, first when given)."""
    segment = MutableSegment(SCHEMA, CONFIG.indexing, data.num_rows, name=name(1000 if messages is None else 1001))
    decoder = JsonDecoder(SCHEMA)
    hook = None
    token = _Reader(segment)  # what a server's consuming segment offers the upsert state
    if upsert is not None:
        upsert.start(segment.name, token)

        def hook(batch: pa.RecordBatch, first: int, publish: Callable[[], None]) -> None:
            upsert.ingest(segment.name, token, batch, first, publish)

    batches = data.to_batches(BATCH)
    started = time.process_time()
    offset = 0
    for batch in batches:
        offsets = np.arange(offset, offset + batch.num_rows)
        if messages is not None:
            batch = decoder.decode(messages[offset:offset + batch.num_rows], offsets).batch
        if upsert is not None and upsert.prepares:  # partial upsert: merged before it is stored
            batch, offsets, _ = upsert.prepare(segment.name, batch, offsets)
        segment.append(batch, offsets, before_publish=hook)
        offset += len(offsets)
    return time.process_time() - started, segment


def query_ms(read: Callable[[], list[pa.Table]], repeat: int) -> list[float]:
    """Median ms per query: reading the segments' rows (``read``, as the server does), binding and running them
    (a connection opened beforehand: the server's cursors are cheap, a fresh DuckDB connection is not)."""
    out = []
    for sql in QUERIES:
        times = []
        for _ in range(repeat):
            con = duckdb.connect()
            t0 = time.perf_counter()
            tables = read()
            union = pa.concat_tables(tables, promote_options="permissive")
            _bind(con, union, None, upsert=VALID_COLUMN in union.column_names)
            con.sql(sql).fetchall()
            times.append((time.perf_counter() - t0) * 1000)
            con.close()
        out.append(statistics.median(times))
    return out


def restart_s(paths: list[Path], upsert: Callable[[], TableUpsert] | None) -> float:
    started = time.perf_counter()
    state = upsert() if upsert is not None else None
    for path in paths:
        segment = ImmutableSegment.load(path)
        segment.verify_crc()
        if state is not None:
            state.serve(segment.name, segment, segment.to_arrow(state.columns), lambda: None)
    if state is not None:  # the partition's consumer starts: preloaded snapshots are merged into the key map
        state.start(name(len(paths)), _Reader(MutableSegment(SCHEMA, CONFIG.indexing, 1, name=name(len(paths)))))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    data = rows(args.rows, args.keys)
    console = Console()

    messages = [orjson.dumps(row) for row in data.to_pylist()]
    ingest(data.slice(0, 4 * BATCH), TableUpsert(CONFIG, SCHEMA), messages[:4 * BATCH])  # warm-up, not counted
    plain_cpu, _ = ingest(data, None)
    upsert_state = TableUpsert(CONFIG, SCHEMA)
    upsert_cpu, stored = ingest(data, upsert_state)
    plain_dec, _ = ingest(data, None, messages)
    upsert_dec, _ = ingest(data, TableUpsert(CONFIG, SCHEMA), messages)
    partial_dec, _ = ingest(data, TableUpsert(PARTIAL, SCHEMA), messages)
    token, bits = next(iter(upsert_state.views([stored.name]).values()))
    valid = np.frombuffer(bits.to_array(), np.uint32)
    all_rows = encoded_logical_table(stored.snapshot(stored.num_docs), SCHEMA.arrow_schema())  # as queries read
    marked = all_rows.append_column(VALID_COLUMN, valid_mask(all_rows.num_rows, bits))

    work = Path(tempfile.mkdtemp(prefix="cuvee-upsert-bench-"))
    try:
        per = -(-args.rows // args.segments)
        paths = []
        for seq in range(args.segments):
            built = build_segment(data.slice(seq * per, per), SCHEMA, CONFIG.indexing, work / "segments", name(seq),
                                  table_name="accounts_REALTIME", time_column="ts")
            paths.append(built.path)
        snapshots = SnapshotStore(work / "snapshots")
        first = TableUpsert(CONFIG, SCHEMA, snapshots)
        restart_s(paths, lambda: first)  # decided from rows; the next consuming segment starts
        first.ready(name(args.segments))  # its first row: the snapshot round
        plain_r = min(restart_s(paths, None) for _ in range(args.repeat))
        rows_r = min(restart_s(paths, lambda: TableUpsert(CONFIG, SCHEMA)) for _ in range(args.repeat))
        preloaded = [TableUpsert(CONFIG, SCHEMA, snapshots) for _ in range(args.repeat)]
        preload_r = min(restart_s(paths, lambda s=s: s) for s in preloaded)  # type: ignore[misc]
        assert all(s.preloaded == args.segments for s in preloaded), "the restart did not preload"
        keys, per_key = first._partitions[0].stats()  # noqa: SLF001 - a bench reads the figure directly

        # queries over the committed segments, as the server reads them
        segments = {p.name: ImmutableSegment.load(p) for p in paths}
        decided = TableUpsert(CONFIG, SCHEMA)
        for segment in segments.values():
            decided.serve(segment.name, segment, segment.to_arrow(decided.columns), lambda: None)
        views = decided.views(list(segments))
        served = {n: CommittedSegment(s) for n, s in segments.items()}  # as the registry holds them
        latest = [served[n].query_table().take(pa.array(np.frombuffer(b.to_array(), np.uint32)))
                  for n, (_, b) in views.items()]

        def read(cache: ValidRowCache) -> list[pa.Table]:
            return scan_tables([cache.read(n, t, served[n].query_table(), b, committed=True)
                                for n, (t, b) in views.items()])

        warm = ValidRowCache()
        read(warm)
        one_latest = all_rows.take(pa.array(valid))
        plain_q = query_ms(lambda: latest, args.repeat)
        warm_q = query_ms(lambda: read(warm), args.repeat)
        cold_q = query_ms(lambda: read(ValidRowCache()), args.repeat)
        one_plain = query_ms(lambda: [one_latest], args.repeat)
        consuming_q = query_ms(lambda: [marked], args.repeat)
        del segments, served
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title=f"upsert vs append-only: {args.rows:,} rows, {args.keys:,} keys, "
                        f"{len(valid):,} valid, {args.segments} segments")
    for column in ("figure", "append-only", "upsert", "ratio"):
        table.add_column(column, justify="right" if column != "figure" else "left")
    table.add_row("ingest rows / CPU-s (decode + store)", f"{args.rows / plain_dec:,.0f}",
                  f"{args.rows / upsert_dec:,.0f}", f"{plain_dec / upsert_dec:.2f}×")
    table.add_row("  PARTIAL (INCREMENT v, else OVERWRITE)", f"{args.rows / plain_dec:,.0f}",
                  f"{args.rows / partial_dec:,.0f}", f"{plain_dec / partial_dec:.2f}×")
    table.add_row("store only rows / CPU-s", f"{args.rows / plain_cpu:,.0f}", f"{args.rows / upsert_cpu:,.0f}",
                  f"{plain_cpu / upsert_cpu:.2f}×")
    for sql, p, w, c, p1, m in zip(QUERIES, plain_q, warm_q, cold_q, one_plain, consuming_q):
        table.add_row(f"query ms: {sql[:60]}", "", "", "")
        table.add_row("  committed, valid rows cached", f"{p:.2f}", f"{w:.2f}", f"{w / p:.2f}×")
        table.add_row("  committed, just changed (cold)", f"{p:.2f}", f"{c:.2f}", f"{c / p:.2f}×")
        table.add_row("  consuming, filtered in the scan", f"{p1:.2f}", f"{m:.2f}", f"{m / p1:.2f}×")
    table.add_row("restart s (rows decided)", f"{plain_r:.3f}", f"{rows_r:.3f}", f"{rows_r / plain_r:.2f}×")
    table.add_row("restart s (preloaded)", f"{plain_r:.3f}", f"{preload_r:.3f}", f"{preload_r / plain_r:.2f}×")
    table.add_row("key map bytes / key", "", f"{per_key:.1f}", f"{keys:,} keys")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
