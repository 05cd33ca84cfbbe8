"""Run the broker's server step over this server's segments with DuckDB, within the request's timeout.

The segments a query names are held (``SegmentRegistry.acquire``) for the whole run, so a consuming → committed
swap never changes or frees rows under it. Their Arrow views (``queryable.query_table``: dictionary columns stay
encoded) are concatenated without copying (chunks are shared) and bound as ``cuvee_segments`` on a private cursor
of one process-wide DuckDB database whose file and network access is disabled and locked: the SQL comes over
HTTP, and it must only ever read what it was given.

Outcomes, all reported in the statistics and never raised: a segment this server does not hold is listed in
``missingSegments`` (the rest still run); SQL that is not one SELECT or that DuckDB rejects is error 200; running
past the deadline is error 250 (a timer calls ``interrupt()`` on the cursor); a time filter on a column the table
lacks or that holds no epoch numbers is error 200.

A request with a time filter (one half of a hybrid table) sees only that half's rows as ``cuvee_segments``;
``totalDocs`` stays the held segments' total (Pinot's meaning) and ``numDocsScanned`` counts the half's rows that
pass WHERE.

A GROUP BY request's ``groups`` bounds the groups sent back (``cuvee.query.group_trim``): every group is computed,
counted for ``numDocsScanned``, then ranked by the request's ``orderSql`` and cut to ``numGroupsLimit`` and, for a
trimmable query, to Pinot's trim size. Both sizes default to this server's configuration. A broker's second round
(``cuvee.query.exact_trim``) names the groups it wants instead: exactly those are sent, none cut.

Pinot's virtual columns (``$docId``, ``$hostName``, ``$segmentName``: ``cuvee.query.virtual_columns``) that the SQL
names are appended to each segment's view, after the upsert mask (an upsert table's valid docs then go to the scan
as a mask, so doc ids stay positions); such a query reads the Arrow views, never the DuckDB copies.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config import raw_table_name
from cuvee.config.string_times import sql_predicate
from cuvee.evolution.serving import ColumnTypeMismatch, ServedSchema
from cuvee.pruning import Work, may_match
from cuvee.protocol.query import GroupLimits, ServerException, ServerQueryRequest, ServerQueryStats, TimeFilter
from cuvee.query import SERVER_RELATION, QueryError, QueryErrorCode
from cuvee.query.execute import (
    duckdb_failure,
    engine_failure,
    interrupt_at,
    keep_groups,
    register,
    sandboxed_cursor,
    set_deadline,
    user_message,
    wanted_groups,
)
from cuvee.query.limits import QueryLimits, ServerQueryLimits, check_text
from cuvee.query.null_defaults import column_based, filled_columns, projection
from cuvee.query.group_trim import DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE, DEFAULT_NUM_GROUPS_LIMIT, GroupCut, GroupTrim
from cuvee.query import virtual_columns
from cuvee.query.rewrite import COUNT_ROWS_SERVER_SQL, ROW_COLUMN
from cuvee.query.wanted_keys import WantedKeysError
from cuvee.segment.partitioning import PARTITIONS_KEY, SegmentPartitions
from cuvee.server.consuming.blocks import SealedBlock
from cuvee.server.native_copies import DOC_COLUMN, SEGMENT_COLUMN, NativeCopies, NativeRead
from cuvee.server.queryable import CommittedSegment, ConsumingView, QueryableSegment, query_table
from cuvee.server.registry import Acquired, SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableNotFoundError
from cuvee.upsert.reads import VALID_COLUMN, ValidRows, scan_tables
from cuvee.upsert.table import TableUpsert, UpsertTables

log = logging.getLogger(__name__)


class _Failed(Exception):
    """``data``: DuckDB failed on the rows (a value that does not convert, a bad regex over a column…), so the
    segment holding them can be named."""

    def __init__(self, code: QueryErrorCode, message: str, *, data: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


_CULPRIT_PROBES = 32  # segments tried one by one to name the one a failing query trips on
_NO_CUT = GroupCut(keep=0, limit_reached=False, trimmed=False)  # a request whose groups were not bounded


@dataclass
class _Counts:
    total_docs: int = 0
    processed: int = 0
    consuming_queried: int = 0
    consuming_processed: int = 0
    non_empty: int = 0
    freshness_ms: int | None = None
    pruned: int = 0  # committed segments ruled out by their metadata (their rows still count in total_docs)


@dataclass
class _Dims:
    """The other tables a request reads beside its own (a LOOKUP's dimension table, a colocated join's other
    side): relation -> this server's rows of the listed segments, and per table the listed segments this server
    does not hold."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)  # dimension tables whose segments cannot be read
    misplaced: list[str] = field(default_factory=list)  # a colocated join's copies of other partitions

    def check(self) -> None:
        """A segment of the other table this server lacks would make LOOKUP answer NULL for its keys, or a join
        miss its rows: an error instead."""
        if self.broken:
            raise _Failed(QueryErrorCode.QUERY_EXECUTION, f"table(s) {', '.join(self.broken)[:512]} cannot "
                                                          "be read on this server (the server log has the details)")
        _check_placed(self.misplaced)
        if self.missing:
            listed = "; ".join(f"table {table[:256]} lacks segment(s) {', '.join(names[:10])}"
                               + (f" ... ({len(names) - 10} more)" if len(names) > 10 else "")
                               for table, names in sorted(self.missing.items()))
            raise _Failed(QueryErrorCode.SERVER_SEGMENT_MISSING, f"the query cannot run on this server: {listed} "
                                                                 "(a rebalance of the table places them)")


_CONSISTENT_TRIES = 100
_UNAVAILABLE: dict[str, tuple[Any, Any]] = {}  # _acquire's answer when the upsert state cannot be read
Valid = dict[str, tuple[Any, Any]]  # segment name -> (the copy's token, its valid docs)


def _token(segment: QueryableSegment) -> Any:
    """What identifies a segment's copy to the upsert views: the consuming segment, or the immutable one."""
    if isinstance(segment, ConsumingView):
        return segment.consuming
    if isinstance(segment, CommittedSegment):
        return segment.segment
    return segment


class QueryExecutor:
    """Executes ``ServerQueryRequest``s against a registry. Thread-safe: one cursor per query."""

    def __init__(self, registry: SegmentRegistry, *, clock: Callable[[], float] = time.monotonic,
                 wall_ms: Callable[[], int] = lambda: int(time.time() * 1000), upserts: UpsertTables | None = None,
                 num_groups_limit: int = DEFAULT_NUM_GROUPS_LIMIT,
                 min_server_group_trim_size: int = DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE,
                 natives: NativeCopies | None = None, schemas: ServedSchemas | None = None,
                 host_name: str = "localhost", limits: QueryLimits = ServerQueryLimits()):
        """``num_groups_limit`` and ``min_server_group_trim_size``: the defaults of the query options of those
        names (Pinot's server settings); ``natives``: committed segments' DuckDB copies (none: Arrow only);
        ``schemas``: the schema each table is served under (none: segments read as stored); ``host_name``: what
        the virtual column ``$hostName`` answers (``cuvee.query.virtual_columns``); ``limits``: how large and deep
        the SQL a broker sends may be (``cuvee.query.limits``: a client may reach a server directly)."""
        self.registry = registry
        self._limits = limits
        self._host_name = host_name
        self._schemas = schemas
        self._natives = natives if natives is not None and natives.enabled else None
        self._clock = clock
        self._wall_ms = wall_ms
        self._upserts = upserts
        self._num_groups_limit = num_groups_limit
        self._min_trim_size = min_server_group_trim_size

    @contextmanager
    def _acquire(self, request: ServerQueryRequest) -> Iterator[tuple[Acquired, Valid | None]]:
        """The segments to read and, for an upsert table, each one's valid docs from the same instant.

        An upsert table is read by *partition*: every segment this server's view of a requested segment's partition
        holds, whether or not the broker listed it. The broker's external view lags the server (a consuming segment
        started a moment ago, a commit mid-transition), and a key's newest doc may be in a segment the broker does
        not know yet while its older doc is already invalid; reading the partition whole from this one replica
        (the broker routes a partition to one replica) shows each key exactly once. The views are taken first,
        then the segments; a segment swapped for its committed copy in between (the acquired copy is not the one
        the view names), or one the view names that has left the registry, makes it try again (both change in one
        step for readers, so the next try sees them agree). Segments the broker asked for, and segments a view
        names, count as missing: a partition's valid doc is never skipped without saying so."""
        try:
            upsert = None if request.skip_upsert else self._upsert(request.table)
        except Exception:  # noqa: BLE001 - the store is unreachable or the config unreadable: no answer, not 500
            log.exception("the upsert state of %s is unavailable", request.table)
            yield Acquired([], list(request.segments), []), _UNAVAILABLE
            return
        if upsert is None:
            with self.registry.acquire(request.table, request.segments) as acquired:
                yield acquired, None
            return
        asked = set(request.segments)
        for attempt in range(_CONSISTENT_TRIES):
            valid = upsert.views(request.segments)
            names = sorted(asked | set(valid))
            with self.registry.acquire(request.table, names) as acquired:
                consistent = (all(valid.get(s.name, (None,))[0] is _token(s) for s in acquired.segments)
                              and not any(m in valid for m in acquired.missing))
                if consistent or attempt == _CONSISTENT_TRIES - 1:
                    yield Acquired(acquired.segments, [m for m in acquired.missing if m in asked or m in valid],
                                   [d for d in acquired.deleted if d in asked]), valid
                    return

    @contextmanager
    def _dims(self, request: ServerQueryRequest) -> Iterator[_Dims]:
        """Hold every listed segment of each dimension table the request reads, for the whole query (a segment
        deleted on purpose is not missing, as for the fact table)."""
        dims = _Dims()
        with ExitStack() as stack:
            for lookup in request.lookups:
                acquired = stack.enter_context(self.registry.acquire(lookup.table, lookup.segments))
                dims.misplaced += _misplaced(request, lookup.table, acquired.segments)
                if acquired.missing:
                    dims.missing[lookup.table] = list(acquired.missing)
                    continue
                served = self._served(lookup.table)
                try:
                    tables = [_conformed(query_table(segment), served, None) for segment in acquired.segments]
                except Exception:  # a broken segment costs this query an error, never the server's answer
                    log.exception("dimension table %s cannot be read for a query", lookup.table)
                    dims.broken.append(lookup.table)
                    continue
                if tables:
                    dims.tables[lookup.relation] = _union(tables)
                elif lookup.schema is not None:
                    dims.tables[lookup.relation] = lookup.schema.empty_table()
                else:
                    dims.missing[lookup.table] = ["(none listed, and no schema to type it)"]
            yield dims

    def _served(self, table: str) -> ServedSchema | None:
        return self._schemas.get(table) if self._schemas is not None else None

    def _upsert(self, table: str) -> TableUpsert | None:
        if self._upserts is None or not table.endswith("_REALTIME"):
            return None
        try:
            return self._upserts.get(table)
        except TableNotFoundError:  # the table is gone: its segments are reported missing as for any table
            return None

    def count_now(self, request: ServerQueryRequest) -> tuple[pa.Table, ServerQueryStats] | None:
        """``SELECT COUNT(*)`` from the segments' row counts — committed segments' fixed counts and consuming
        segments' published rows below their cap, as a scan of them would see — with no row read and nothing that
        can block, so the route runs it on the event loop (a worker thread's hop cost more than the answer). None
        for anything else (a missing segment, a filter, LOOKUP, an upsert table, whose rows are its valid docs,
        or a REALTIME table not yet known here not to be one: finding out could read the metadata store): that
        takes ``execute``. Segments are looked up, not held: only their row counts are read."""
        if not _counts_rows_only(request) or request.lookups or not request.segments:
            return None
        if request.table.endswith("_REALTIME") and not self._known_not_upsert(request.table):
            return None
        started = self._clock()
        held = [self.registry.get(request.table, name) for name in request.segments]
        found = [s for s in held if isinstance(s, (CommittedSegment, ConsumingView))]  # row counts that never block
        if len(found) != len(held):
            return None
        docs = [s.num_docs for s in found]
        rows = sum(docs)
        consuming = [s for s in found if s.is_consuming]
        fresh = [self._wall_ms() if s.last_ingestion_ms is None else s.last_ingestion_ms for s in consuming]
        stats = ServerQueryStats(
            numDocsScanned=rows, totalDocs=rows, numSegmentsQueried=len(found), numSegmentsProcessed=len(found),
            numSegmentsMatched=sum(1 for n in docs if n), numConsumingSegmentsQueried=len(consuming),
            numConsumingSegmentsProcessed=len(consuming), minConsumingFreshnessTimeMs=min(fresh, default=0),
            timeUsedMs=int((self._clock() - started) * 1000))
        return pa.table({"__p0": pa.array([rows], pa.int64())}), stats

    def _known_not_upsert(self, table: str) -> bool:
        """Whether this server already decided ``table`` is not an upsert table (no lookup: the event loop asks)."""
        if self._upserts is None:
            return True
        known = self._upserts.known()
        return table in known and known[table] is None

    def execute(self, request: ServerQueryRequest) -> tuple[pa.Table | None, ServerQueryStats]:
        """The partial result (None if nothing ran) and the statistics; never raises for a bad query."""
        started = self._clock()
        deadline = started + request.timeout_ms / 1000
        counts = _Counts()
        result: pa.Table | None = None
        docs_scanned = 0
        groups = _NO_CUT
        errors: list[ServerException] = []
        with self._acquire(request) as (acquired, valid), self._dims(request) as dims:
            missing = list(acquired.missing)
            if valid is _UNAVAILABLE:
                errors.append(ServerException(int(QueryErrorCode.QUERY_EXECUTION),
                                              f"the upsert state of {request.table[:256]} is unavailable on this "
                                              "server; query again"))
                valid = None
            try:
                _check_limits(request, self._limits)  # before DuckDB parses anything
                _check_select(request.sql)
                if request.docs_scanned_sql is not None:
                    _check_select(request.docs_scanned_sql)
                if request.groups is not None:
                    _check_select(request.groups.order_sql)
                if request.top_sql is not None:
                    _check_select(request.top_sql)
                _check_placed(_misplaced(request, request.table, acquired.segments))
                held = _unpruned(acquired.segments, request, counts,
                                 lambda: self._check_deadline(deadline, request.timeout_ms),
                                 self._served(request.table))
                tables, used = self._views(held, request, counts, errors, valid)
                if tables:
                    dims.check()
                    self._check_deadline(deadline, request.timeout_ms)
                    # scan_tables gives every part the valid-docs column or none; 79 names listed per segment
                    # to look for it cost ~0.4 ms
                    if _counts_rows_only(request) and tables[0].schema.get_field_index(VALID_COLUMN) < 0:
                        # COUNT(*) without a filter: the rows are counted already (Pinot answers it from
                        # segment metadata too); a scan of every row cost milliseconds on a 1M-row table, and
                        # even the union of the segments' columns ~0.5 ms on a wide one
                        rows = sum(t.num_rows for t in tables)
                        result = pa.table({"__p0": pa.array([rows], pa.int64())})
                        docs_scanned = rows
                    else:
                        try:
                            result, docs_scanned, groups = self._run(request, tables, used, deadline,
                                                                     counts.total_docs, dims.tables,
                                                                     upsert=valid is not None)
                        except _Failed as failure:
                            if not failure.data:
                                raise
                            culprit = (held[0].name if len(held) == 1 else
                                       self._culprit(request, held, valid, deadline, dims.tables))
                            where = f"on segment {culprit}" if culprit else f"on one of {len(tables)} segments"
                            raise _Failed(failure.code, f"the query failed {where}: {failure.message}") from None
                    counts.processed = len(tables)
                    counts.consuming_processed = counts.consuming_queried
            except _Failed as failure:
                errors.append(ServerException(int(failure.code), failure.message))
                result = None
        filtered = (request.docs_scanned_sql is not None or request.docs_column is not None
                    or request.docs_total_column is not None or request.time_filter is not None)
        matched = (counts.processed if docs_scanned else 0) if filtered else counts.non_empty
        stats = ServerQueryStats(
            numDocsScanned=docs_scanned if result is not None else 0,
            totalDocs=counts.total_docs,
            numSegmentsQueried=len(request.segments),
            numSegmentsProcessed=counts.processed if result is not None else 0,
            numSegmentsMatched=matched if result is not None else 0,
            numConsumingSegmentsQueried=counts.consuming_queried,
            numConsumingSegmentsProcessed=counts.consuming_processed if result is not None else 0,
            minConsumingFreshnessTimeMs=counts.freshness_ms or 0,
            timeUsedMs=int((self._clock() - started) * 1000),
            missingSegments=tuple(missing),
            exceptions=tuple(errors),
            numGroupsLimitReached=groups.limit_reached and result is not None,
            groupsTrimmed=groups.trimmed and result is not None and not (request.groups is not None
                                                                          and request.groups.exact),
            numSegmentsPrunedByServer=counts.pruned,
        )
        return result, stats

    def _views(self, segments: Sequence[QueryableSegment], request: ServerQueryRequest, counts: _Counts,
               errors: list[ServerException],
               valid: Valid | None = None) -> tuple[list[pa.Table], list[QueryableSegment]]:
        """Each held segment's Arrow view (an upsert table's valid rows: ``cuvee.upsert.reads``), and the segments
        they are of; a segment that cannot produce one is reported, the others still run. A committed segment of
        a table without upserts gives the columns ``request`` reads, in their plain copies where it keeps them
        (``CommittedSegment.with_plain``: DuckDB scans those faster) unless it has a DuckDB copy (then the view
        only types the union); an upsert table's reads cache whole rows."""
        parts: list[ValidRows] = []
        used: list[QueryableSegment] = []
        served = self._served(request.table)
        wanted = None if served is None else set(_named(served.names, request))
        # Pinot's virtual columns the SQL names, made per segment (none named: nothing added)
        virtual = virtual_columns.named((request.sql, request.docs_scanned_sql or "", request.top_sql or ""))
        for segment in segments:
            try:
                if isinstance(segment, ConsumingView):  # built per query: only the columns it reads
                    # (an upsert table's valid docs decide which rows, past the cap too)
                    table = segment.query_table(past_cap=valid is not None,
                                                columns=_named(segment.schema.names, request))
                else:
                    table = query_table(segment)
                if valid is not None:
                    token, bits = valid.get(segment.name, (None, None))
                    if token is not _token(segment):
                        errors.append(ServerException(int(QueryErrorCode.QUERY_EXECUTION),
                                                      f"segment {segment.name} is being replaced; query again"))
                        continue
                    assert self._upserts is not None
                    # a virtual column needs every row in doc order ($docId): the valid docs as a mask, never
                    # the cache's taken rows
                    part = self._upserts.reads.read(segment.name, token, table, bits,
                                                    committed=not isinstance(segment, ConsumingView) and not virtual)
                elif isinstance(segment, CommittedSegment):
                    read = _columns_read(table, request)
                    natives = self._natives
                    copied = natives is not None and natives.ready(natives.token(segment))
                    part = ValidRows(read if copied else segment.with_plain(read), False)
                else:
                    part = ValidRows(table, False)
                if served is not None:  # the table's schema as served: columns added since, as their defaults
                    part = ValidRows(served.conform(part.table, wanted), part.masked)
                if virtual:  # after the upsert mask, which stays last (the rows are still every doc, in order)
                    part = ValidRows(virtual_columns.appended(part.table, virtual, segment.name, self._host_name,
                                                              before=VALID_COLUMN), part.masked)
            except ColumnTypeMismatch as exc:
                errors.append(ServerException(int(QueryErrorCode.QUERY_EXECUTION), f"segment {segment.name}: {exc}"))
                continue
            except Exception as exc:  # a broken segment must not take the whole server answer down
                log.exception("segment %s cannot be read for a query", segment.name)
                errors.append(ServerException(int(QueryErrorCode.QUERY_EXECUTION),
                                              f"segment {segment.name} cannot be read ({type(exc).__name__}; the "
                                              "server log has the details)"))
                continue
            parts.append(part)
            used.append(segment)
            counts.total_docs += table.num_rows
            counts.non_empty += 1 if table.num_rows else 0
            if segment.is_consuming:
                counts.consuming_queried += 1
                fresh = segment.last_ingestion_ms
                fresh = self._wall_ms() if fresh is None else fresh  # nothing consumed yet: nothing is stale
                counts.freshness_ms = fresh if counts.freshness_ms is None else min(counts.freshness_ms, fresh)
        return scan_tables(parts), used

    def _check_deadline(self, deadline: float, timeout_ms: int) -> None:
        if self._clock() >= deadline:
            raise _Failed(QueryErrorCode.SERVER_TIMEOUT, f"query timed out: {timeout_ms} ms passed before it ran")

    def _run(self, request: ServerQueryRequest, tables: list[pa.Table], segments: Sequence[QueryableSegment],
             deadline: float, total_docs: int,
             dims: Mapping[str, pa.Table] | None = None, *, upsert: bool = False) -> tuple[pa.Table, int, GroupCut]:
        """``upsert``: the rows are an upsert table's valid docs (never read from DuckDB copies, which hold every
        version of every key)."""
        projected = [_columns_read(table, request) for table in tables]
        filled = self._filled(request, projected)
        # each consuming segment's sealed blocks, taken once: the copies asked for and the rows bound are the same
        # (a segment stopped in between answers no block: its rows read would lose their copied part)
        sealed = [segment.sealed_blocks(table.num_rows) if isinstance(segment, ConsumingView)
                  and self._natives is not None else [] for segment, table in zip(segments, projected)]
        with self._native_read(request, projected, segments, sealed, upsert,
                               lambda: self._clock() >= deadline) as native:
            if native is None:
                try:
                    union = _union(_alike(projected, segments, request))
                except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # kept apart by _conformed: never expected
                    log.warning("the segments of %s could not be joined for a query: %s", request.table, exc)
                    raise _Failed(QueryErrorCode.QUERY_EXECUTION,
                                  "the segments hold a column in different types; reload the table (POST "
                                  f"/segments/{raw_table_name(request.table)[:128]}/reload)") from None
                upsert = union.schema.get_field_index(VALID_COLUMN) >= 0
                late = request.top_sql is not None and union.num_rows >= LATE_ROWS
                con = sandboxed_cursor(union.num_rows)

                def bind() -> str:  # read late: the scan binds only what WHERE, ORDER BY and the docs count read
                    early = _with_positions(_columns_read(union, request, request.top_sql)) if late else union
                    _bind(con, early, request.time_filter, upsert=upsert, filled=filled)
                    return ""

                try:
                    return self._run_on(con, request, deadline, total_docs, dims, bind,
                                        (lambda: _late_rows(con, request, union, upsert, dims, filled)) if late
                                        else None)
                finally:
                    con.close()
            assert self._natives is not None
            natives = self._natives
            return self._run_on(native.cursor, request, deadline, total_docs, dims,
                                lambda: _bind_native(native, projected, segments, sealed, natives,
                                                     request.time_filter, request, filled), lost=native.lose)

    def _filled(self, request: ServerQueryRequest, projected: list[pa.Table]) -> dict[str, str]:
        """The columns whose NULLs read as their default null value (``cuvee.query.null_defaults``): those holding
        a null, unless the query asked for Pinot's null handling (``enableNullHandling``)."""
        served = self._served(request.table)
        if served is None or not projected:
            return {}
        if request.null_handling:  # only a column-based schema's notNull columns keep no nulls (Pinot's rule)
            if not column_based(served.schema.extra):
                return {}
            return filled_columns(projected[0].schema.names, served.spec, projected, not_null_only=True)
        return filled_columns(projected[0].schema.names, served.spec, projected)

    def _native_read(self, request: ServerQueryRequest, projected: list[pa.Table],
                     segments: Sequence[QueryableSegment], sealed: Sequence[Sequence[SealedBlock]],
                     upsert: bool, expired: Callable[[], bool]) -> AbstractContextManager[NativeRead | None]:
        """The DuckDB copies of the committed segments and of the consuming segments' ``sealed`` blocks (per
        segment) a large scan reads (asking for those not made yet), or nothing: an upsert table's valid docs (a
        view of a segment all of whose docs are valid carries no mask, so only the table's kind tells), small
        inputs and segments of different columns (a column added since some were built) take the Arrow views.
        ``expired``: whether the query's deadline passed (asked before a tail append the query makes itself)."""
        natives = self._natives
        if natives is None or upsert or not projected or sum(t.num_rows for t in projected) < natives.min_rows:
            return nullcontext(None)
        names = projected[0].schema.names
        if VALID_COLUMN in names or any(t.schema.names != names for t in projected[1:]):
            return nullcontext(None)
        if any(virtual_columns.canonical(name) for name in names):  # made per segment view, not in the copies
            return nullcontext(None)
        if not all(_stored_as_read(segment, table) for segment, table in zip(segments, projected)):
            return nullcontext(None)  # a column served as its default (added since the segment was built), or cast
        tokens = []
        for segment, blocks in zip(segments, sealed):
            if isinstance(segment, CommittedSegment):
                token = natives.token(segment)
                natives.want(token, request.table, segment.segment)
                tokens.append(token)
            else:  # a consuming segment's sealed blocks, copied like committed segments
                for block in blocks:
                    token = natives.token(block)
                    if natives.ready(token):  # read from DuckDB from now on: its decoded columns need not be kept
                        block.copied()
                    natives.want(token, request.table, block)
                    tokens.append(token)
        tails = any(isinstance(segment, ConsumingView) for segment in segments)  # its open block's tail table
        return natives.reading(request.table, tokens, expired, tails) if tokens or tails else nullcontext(None)

    def _run_on(self, con: duckdb.DuckDBPyConnection, request: ServerQueryRequest, deadline: float,
                total_docs: int, dims: Mapping[str, pa.Table] | None,
                bind: Callable[[], str],
                answer: Callable[[], pa.Table] | None = None,
                lost: Callable[[], None] | None = None) -> tuple[pa.Table, int, GroupCut]:
        """Bind ``cuvee_segments`` (``bind``: it returns what to put before each statement, a ``WITH`` clause or
        nothing) and run the request on ``con``; ``answer``: how the SQL's answer is made instead of running it
        whole (a selection read late); ``lost``: called when ``con``'s database failed for good (native copies:
        later queries scan the segments)."""
        at = time.monotonic() + max(deadline - self._clock(), 0.0)
        timer = interrupt_at(at, con)
        try:
            prefix = bind()
            if self._clock() >= deadline:  # binding ran past it (a tail's rows converted): the interrupt, sent to
                raise duckdb.InterruptException("bound past the deadline")  # an idle cursor, was lost
            set_deadline(con, request.sql, at)  # the Python functions it calls (windowed funnels) look at it
            for relation, rows in (dims or {}).items():  # LOOKUP's dimension tables (names checked on the wire)
                register(con, relation, rows)
            result = answer() if answer is not None else con.sql(prefix + request.sql).to_arrow_table()
            docs = total_docs
            if request.docs_total_column is not None:
                result, docs = _take_docs_column(result, request.docs_total_column, total=True)
                if not result.num_rows and request.docs_scanned_sql is not None:  # HAVING or OFFSET left no row
                    docs = _count(con, prefix + request.docs_scanned_sql)
            elif request.docs_column is not None:
                result, docs = _take_docs_column(result, request.docs_column)
            elif request.stops_at_limit and request.selection_limit is not None:
                # unordered: the rows it stopped at, every row passing WHERE when short of its LIMIT (Pinot's early
                # termination, with or without WHERE: a point lookup is not counted again in a second scan)
                docs = result.num_rows
            elif request.docs_scanned_sql is not None or request.time_filter is not None:
                if request.selection_limit is not None and result.num_rows < request.selection_limit:
                    docs = result.num_rows  # a selection short of its LIMIT answered every row passing WHERE
                elif request.docs_scanned_sql is not None:
                    docs = _count(con, prefix + request.docs_scanned_sql)
                else:  # no WHERE: the rows of this half, not the segments' total
                    docs = _count(con, f"{prefix}SELECT count(*) FROM {SERVER_RELATION}")
            groups = _NO_CUT
            if request.groups is not None:
                result, groups = self._cut_groups(con, result, request.groups)
            return result, docs, groups
        except duckdb.InterruptException:
            raise _Failed(QueryErrorCode.SERVER_TIMEOUT,
                          f"query timed out after {request.timeout_ms} ms and was interrupted") from None
        except duckdb.Error as exc:
            if self._clock() >= deadline:  # a Python function that gave up at the deadline, or its interrupt
                raise _Failed(QueryErrorCode.SERVER_TIMEOUT,
                              f"query timed out after {request.timeout_ms} ms and was interrupted") from None
            if (engine := engine_failure(exc)) is not None:  # the database invalidated: a new one serves the next
                if lost is not None:
                    lost()
                raise _Failed(QueryErrorCode.QUERY_EXECUTION, engine) from None
            failure = duckdb_failure(exc)
            if failure.code != QueryErrorCode.QUERY_EXECUTION:  # a bound on the query's data (700)
                raise _Failed(failure.code, failure.message) from None
            raise _Failed(QueryErrorCode.QUERY_EXECUTION, _not_served(exc, request.table) or _reason(exc),
                          data=isinstance(exc, (duckdb.DataError, duckdb.InvalidInputException))) from None
        except RuntimeError:  # a DuckDB copy's database closed under the query: the server is stopping
            log.exception("a query on %s failed in DuckDB", request.table)
            raise _Failed(QueryErrorCode.QUERY_EXECUTION, "the query failed on this server (the server log has "
                                                          "the details); query again") from None
        finally:
            timer.cancel()

    def _cut_groups(self, con: duckdb.DuckDBPyConnection, result: pa.Table,
                    limits: GroupLimits) -> tuple[pa.Table, GroupCut]:
        """The groups this server sends (``keep_groups``), bounded by the query's options or else this server's
        defaults; in a broker's second round, exactly the wanted ones (``wanted_groups``)."""
        if limits.wanted is not None:
            try:
                return wanted_groups(con, result, limits.wanted), _NO_CUT
            except WantedKeysError as exc:  # the request's keys, not the segments' rows: no segment to blame
                raise _Failed(QueryErrorCode.QUERY_EXECUTION, str(exc)) from None
            except duckdb.InterruptException:
                raise
            except duckdb.Error:  # over the groups, not a segment's rows: no segment to search for
                log.exception("matching a second round's wanted groups failed")
                raise _Failed(QueryErrorCode.QUERY_EXECUTION, "matching the wanted groups failed on this server "
                                                              "(the server log has the details)") from None
        return keep_groups(con, result, GroupTrim(limits.order_sql, limits.trim_rows, limits.exact),
                           self._num_groups_limit if limits.num_groups_limit is None else limits.num_groups_limit,
                           self._min_trim_size if limits.min_trim_size is None else limits.min_trim_size)

    def _culprit(self, request: ServerQueryRequest, segments: Sequence[QueryableSegment], valid: Valid | None,
                 deadline: float, dims: Mapping[str, pa.Table] | None = None) -> str | None:
        """The segment a query that failed on the rows fails on alone (the first of at most ``_CULPRIT_PROBES``
        tried, within the query's time), or None. Only after a failure: a good query never pays for it."""
        for segment in segments[:_CULPRIT_PROBES]:
            if self._clock() >= deadline:
                return None
            tables, used = self._views([segment], request, _Counts(), [], valid)
            if not tables:
                continue
            try:
                self._run(request, tables, used, deadline, tables[0].num_rows, dims, upsert=valid is not None)
            except _Failed as failure:
                if failure.data:
                    return segment.name
        return None


_UNFILTERED = "cuvee_unfiltered"
LATE_ROWS = 100_000  # a selection over at least this many rows reads its SELECT list's other columns late


def _with_positions(union: pa.Table) -> pa.Table:
    """``union`` with each row's position in it (``ROW_COLUMN``), which ``QueryPlan.top_sql`` selects."""
    return union.append_column(ROW_COLUMN, pa.array(np.arange(union.num_rows, dtype=np.int64)))


def _take_rows(union: pa.Table, positions: np.ndarray) -> pa.Table:
    """The rows of ``union`` at ``positions`` (in any order), taken from each record batch apart: ``Table.take``
    over a union of segments joined every column's chunks first, copying them whole (a 105-column ``SELECT *`` of
    1M rows)."""
    batches = union.to_batches()
    if not batches:
        return union.schema.empty_table()
    ends = np.cumsum([batch.num_rows for batch in batches])
    which = np.searchsorted(ends, positions, side="right")
    picked = []
    for index in np.unique(which):
        start = ends[index] - batches[index].num_rows
        picked.append(batches[index].take(pa.array(positions[which == index] - start)))
    return pa.Table.from_batches(picked, schema=union.schema) if picked else union.schema.empty_table()


def _late_rows(con: duckdb.DuckDBPyConnection, request: ServerQueryRequest, union: pa.Table, upsert: bool,
               dims: Mapping[str, pa.Table] | None, filled: Mapping[str, str]) -> pa.Table:
    """A selection's answer read late: ``top_sql`` on ``con`` (bound over ``union`` with positions) picks the rows
    by WHERE and ORDER BY, reading only their columns; ``sql`` then runs over those rows alone, so the SELECT
    list's other columns are read for LIMIT rows instead of every row that passed WHERE. The same answer:
    ``sql``'s WHERE, ORDER BY and LIMIT over the rows ``top_sql`` picked by the same WHERE, ORDER BY and LIMIT
    (among ties, either picks any)."""
    positions = con.sql(request.top_sql).to_arrow_table().column(0).to_numpy()
    picked = _take_rows(union, positions)
    step = sandboxed_cursor(picked.num_rows)
    try:
        _bind(step, picked, request.time_filter, upsert=upsert, filled=filled)
        for relation, rows in (dims or {}).items():
            register(step, relation, rows)
        return step.sql(request.sql).to_arrow_table()
    finally:
        step.close()


def _bind(con: duckdb.DuckDBPyConnection, union: pa.Table, time_filter: TimeFilter | None, *,
          upsert: bool = False, filled: Mapping[str, str] | None = None) -> None:
    """``cuvee_segments`` on this cursor: the union, or only the rows the time filter keeps (a hybrid table's half)
    and the valid docs (an upsert table, by its ``VALID_COLUMN``, which the view does not show), as a TEMP view
    (private to this cursor, lazy: no row is copied, the scan filters). The predicate is built here from the
    structured filter (a quoted identifier, an operator from a fixed set, an integer), never from request text.
    TIMESTAMP columns compare as epoch milliseconds, the unit of the boundary; rows whose time is NULL belong to
    neither half."""
    if time_filter is None and not upsert and not filled:
        register(con, SERVER_RELATION, union)
        return
    register(con, _UNFILTERED, union)
    if filled:  # a missing value reads as its default null value (cuvee.query.null_defaults)
        shown = projection([n for n in union.schema.names if n != VALID_COLUMN], filled)
    else:
        shown = f'* EXCLUDE ("{VALID_COLUMN}")' if upsert else "*"
    keep = [f'"{VALID_COLUMN}"'] if upsert else []
    if time_filter is not None:
        keep.append(_time_predicate(union, time_filter))  # over the stored values: a NULL time is in neither half
    where = f" WHERE {' AND '.join(keep)}" if keep else ""
    con.execute(f"CREATE TEMP VIEW {SERVER_RELATION} AS SELECT {shown} FROM {_UNFILTERED}{where}")


_REST = "cuvee_rest"


def _bind_native(native: NativeRead, projected: list[pa.Table], segments: Sequence[QueryableSegment],
                 sealed: Sequence[Sequence[SealedBlock]], natives: NativeCopies, time_filter: TimeFilter | None,
                 request: ServerQueryRequest, filled: Mapping[str, str] | None = None) -> str:
    """``cuvee_segments`` on the table database's cursor as ``_bind`` makes it: the rows of the held copies (by
    their segment ids; the consuming segments' blocks ``_native_read`` was given in ``sealed``) and the Arrow
    views of the other rows (not copied yet), in one ``UNION ALL`` of the columns read (every view has the same:
    ``_native_read``). Returned as a ``WITH`` clause to put before each
    statement (a TEMP view is a catalog write: ~1.3 ms of a filtered COUNT's server step over 1M rows), or bound as
    a TEMP view (returning "") when a statement does not start with SELECT."""
    names = projected[0].schema.names
    columns = ", ".join('"' + name.replace('"', '""') + '"' for name in names)
    copied: list[int] = []
    rest: list[pa.Table] = []
    tails: list[str] = []
    for table, segment, blocks in zip(projected, segments, sealed):
        if isinstance(segment, ConsumingView):
            # a consuming segment: its copied sealed blocks from DuckDB, the other blocks from their DuckDB tail
            # tables (the open block's, and sealed ones' not copied yet), rows that have neither as Arrow
            count = table.num_rows
            opened = {block.start: block for block in segment.open_blocks(count).values()}
            tail_start = blocks[-1].end if blocks else 0
            ranges: list[tuple[int, int, SealedBlock | None]] = [(b.start, b.end, b) for b in blocks]
            ranges += [(tail_start, count, None)] if tail_start < count else []
            for start, end, block in ranges:
                token = natives.token(block) if block is not None else None
                if token is not None and token in native.tokens:
                    copied.append(token)
                    continue
                open_block = opened.get(start)
                found = native.tail(open_block, count) if open_block is not None else None
                if found is None:
                    rest.append(table.slice(start, end - start))
                    continue
                segment.follow(natives.follow)  # its table is appended as rows arrive, not by the next query
                relation, upto = found  # its table may hold rows published after this query's count: not read
                tails.append(f"SELECT {columns} FROM {relation}" +
                             (f" WHERE {DOC_COLUMN} < {int(upto)}" if upto < open_block.end else ""))
                if upto < end:  # rows the worker is appending right now: as Arrow, not waited for
                    rest.append(table.slice(upto, end - upto))
            continue
        token = natives.token(segment) if isinstance(segment, CommittedSegment) else None
        if token is not None and token in native.tokens:
            copied.append(token)
        else:
            rest.append(table)
    selects = []
    if copied:  # an empty IN list is not SQL
        ids = ", ".join(str(int(token)) for token in copied)
        selects.append(f'SELECT {columns} FROM "{native.relation}" WHERE {SEGMENT_COLUMN} IN ({ids})')
    selects += tails
    con = native.cursor
    if rest or not selects:
        register(con, _REST, _union(rest) if rest else projected[0].schema.empty_table())
        selects.append(f"SELECT {columns} FROM {_REST}")
    source = " UNION ALL ".join(selects)
    if time_filter is not None:
        source = f"SELECT * FROM ({source}) WHERE {_time_predicate(projected[0], time_filter)}"
    if filled:  # a missing value reads as its default null value (cuvee.query.null_defaults)
        source = f"SELECT {projection(names, filled)} FROM ({source})"
    if all(text.lstrip()[:6].upper() == "SELECT" for text in (request.sql, request.docs_scanned_sql or "SELECT")):
        return f"WITH {SERVER_RELATION} AS NOT MATERIALIZED ({source})\n"
    # anything else (a WITH, a comment or a parenthesis first) binds the view: a clause before it could not parse
    con.execute(f"CREATE TEMP VIEW {SERVER_RELATION} AS {source}")
    return ""


def _time_predicate(union: pa.Table, time_filter: TimeFilter) -> str:
    """The time filter as SQL over ``union``'s column (see ``_bind``)."""
    if union.schema.get_field_index(time_filter.column) < 0:
        raise _Failed(QueryErrorCode.QUERY_EXECUTION, f"time filter column {time_filter.column!r} is not in the table")
    column_type = union.schema.field(time_filter.column).type
    if pa.types.is_dictionary(column_type):
        column_type = column_type.value_type
    quoted = '"' + time_filter.column.replace('"', '""') + '"'
    times = time_filter.string_times
    if times is not None:  # formatted date strings (cuvee.config.string_times)
        if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
            raise _Failed(QueryErrorCode.QUERY_EXECUTION,
                          f"time filter column {time_filter.column!r} is {column_type}, not a string of dates")
        return sql_predicate(quoted, time_filter.op, time_filter.value, times)
    if pa.types.is_timestamp(column_type):
        quoted = f"epoch_ms({quoted})"
    elif not pa.types.is_integer(column_type):
        raise _Failed(QueryErrorCode.QUERY_EXECUTION,
                      f"time filter column {time_filter.column!r} is {column_type}, not an epoch or TIMESTAMP column")
    return f"{quoted} {time_filter.op} {int(time_filter.value)}"


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    """The first value of a counting statement's answer (0 for none or NULL)."""
    rows = con.sql(sql).fetchall()
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _take_docs_column(result: pa.Table, name: str, *, total: bool = False) -> tuple[pa.Table, int]:
    """The rows that passed WHERE, counted by the query itself in ``name`` (per row, or ``total`` on every row),
    and the result without that column."""
    # the planner puts it last: a user's column of the same name (an alias) comes before it
    index = result.num_columns - 1
    if index < 0 or result.schema.field(index).name != name or \
            not pa.types.is_integer(result.schema.field(index).type):
        raise _Failed(QueryErrorCode.QUERY_EXECUTION,
                      f"the server SQL has no integer column {name[:64]!r} last to count scanned rows")
    column = result.column(index)
    if total:
        docs = column[0].as_py() if len(column) else 0
    else:
        docs = sum(value or 0 for value in column.to_pylist()) if len(column) <= 64 else pc.sum(column).as_py()
    return result.remove_column(index), int(docs or 0)


_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _columns_read(union: pa.Table, request: ServerQueryRequest, sql: str | None = None) -> pa.Table:
    """``union`` with only the columns the request's SQL can read (zero-copy). DuckDB's Arrow scan pays for every
    column of the table it is given, read or not: a filter and a MAX over 1M rows took ~95 ms with the 79 columns
    of a wide table and ~19 ms with the two it reads. A column stays when the SQL names it as a quoted identifier
    or as a bare word in any case (DuckDB's unquoted names ignore case); words inside strings only keep a column
    too many, never drop one."""
    names = tuple(union.schema.names)  # not Table.column_names: that builds every column's object (~80 µs for 79)
    needed = _named(names, request, sql)
    return union if len(needed) == len(names) else union.select(list(needed))


def _named(names: Sequence[str], request: ServerQueryRequest, sql: str | None = None) -> tuple[str, ...]:
    """The columns of ``names`` the request's SQL (or ``sql``) can read, by ``_columns_read``'s rule (also the
    columns of a table's served schema a query reads: ``_views``)."""
    texts = (request.sql if sql is None else sql, request.docs_scanned_sql or "")
    time_column = request.time_filter.column if request.time_filter is not None else None
    if len(texts[0]) + len(texts[1]) <= _REMEMBERED_SQL_BYTES:
        return _remembered_needed(tuple(names), texts, time_column)
    return _needed(tuple(names), texts, time_column)


@functools.lru_cache(maxsize=1024)
def _remembered_needed(names: tuple[str, ...], texts: tuple[str, str], time_column: str | None) -> tuple[str, ...]:
    """``_needed``, remembered for short texts (as ``_check_select`` does): a query projects each segment's view and
    then their union, and 17 scans of its SQL over 105 names cost ~1 ms."""
    return _needed(names, texts, time_column)


def _needed(names: tuple[str, ...], texts: tuple[str, str], time_column: str | None) -> tuple[str, ...]:
    quoted: set[str] = set()
    words: set[str] = set()
    for text in texts:
        quoted.update(m.replace('""', '"') for m in _QUOTED.findall(text))
        words.update(w.lower() for w in _WORD.findall(_QUOTED.sub(" ", text)))
    keep = {VALID_COLUMN} if time_column is None else {VALID_COLUMN, time_column}
    named = [name for name in names if name not in keep and (name in quoted or name.lower() in words)]
    if not named:  # COUNT(*) and the like: one column, so the view has one and the row count stays
        named = [name for name in names if name != VALID_COLUMN][:1]
    return tuple(name for name in names if name in keep or name in named)


def _unpruned(segments: Sequence[QueryableSegment], request: ServerQueryRequest, counts: _Counts,
              check_deadline: Callable[[], None], served: ServedSchema | None) -> Sequence[QueryableSegment]:
    """The held segments a query must read: committed segments whose metadata proves that no row passes its
    ``prune_filter`` (its WHERE and, for a hybrid half, the time filter: the broker joins them) are left out, and
    counted (``cuvee.pruning``); consuming segments are always read (their rows are still coming: no stats to trust
    yet). A request without one (a broker that predates it) prunes nothing, so it is never sent a count it does not
    know. The work is the query's (``pruning.Work``: bounded, by the ``served`` schema's column types), and its
    deadline is checked before each segment."""
    predicate = request.prune_filter
    if predicate is None:
        return segments
    kept: list[QueryableSegment] = []
    asked = set(request.segments)  # an upsert table's server also reads segments not asked for: not counted
    work = Work(served=None if served is None else
                {name: (spec.data_type.value, spec.single_value) for name in served.names
                 if (spec := served.spec(name)) is not None})
    for segment in segments:
        check_deadline()
        if isinstance(segment, CommittedSegment) and not may_match(predicate, segment.facts, work):
            counts.pruned += segment.name in asked
            counts.total_docs += segment.num_docs
        else:
            kept.append(segment)
    return kept


def _misplaced(request: ServerQueryRequest, table: str, segments: Sequence[QueryableSegment]) -> list[str]:
    """The segments of a colocated join's share whose held copy records rows of other partitions than the
    share's (``Colocation.admits``): a copy refreshed since the broker placed the join, or never partitioned."""
    if request.colocation is None:
        return []
    return [s.name for s in segments if not request.colocation.admits(table, _held_partitions(s))]


def _held_partitions(segment: QueryableSegment) -> SegmentPartitions | None:
    if not isinstance(segment, CommittedSegment):
        return None  # a consuming segment's rows are still coming: no partitions to trust
    return SegmentPartitions.from_json(segment.segment.metadata.custom.get(PARTITIONS_KEY))


def _check_placed(misplaced: list[str]) -> None:
    if misplaced:
        shown = ", ".join(misplaced[:10]) + (f" ... ({len(misplaced) - 10} more)" if len(misplaced) > 10 else "")
        raise _Failed(QueryErrorCode.SERVER_SEGMENT_MISSING,
                      f"this server's copies of segment(s) {shown[:1024]} hold rows of other partitions than the join "
                      "placed here (refreshed since the broker's view); query again")


def _counts_rows_only(request: ServerQueryRequest) -> bool:
    """``SELECT COUNT(*)`` over every row held: no WHERE, no hybrid time filter."""
    return (request.sql == COUNT_ROWS_SERVER_SQL and request.time_filter is None and request.docs_column is None
            and request.docs_scanned_sql is None)


def _check_limits(request: ServerQueryRequest, limits: QueryLimits) -> None:
    """Every text of ``request`` DuckDB would read, measured first (150 naming the limit past one)."""
    for text in (request.sql, request.docs_scanned_sql, request.top_sql,
                 request.groups.order_sql if request.groups is not None else None):
        if text is not None:
            try:
                check_text(text, limits)
            except QueryError as exc:
                raise _Failed(exc.code, exc.message) from None


_REMEMBERED_SQL_BYTES = 16 * 1024  # longer texts are checked every time, never kept


def _check_select(sql: str) -> None:
    """Exactly one SELECT: the server step never writes, attaches or changes settings. Short texts that passed
    are remembered (a dashboard repeats its queries; DuckDB's parse costs ~0.3 ms); a failure is not (it
    raises), nor a long text (a thousand 1 MB IN-lists would pin a gigabyte)."""
    if len(sql) <= _REMEMBERED_SQL_BYTES:
        _checked_select(sql)
    else:
        _select_check(sql)


@functools.lru_cache(maxsize=1024)
def _checked_select(sql: str) -> None:
    _select_check(sql)


def _select_check(sql: str) -> None:
    con = sandboxed_cursor(0)
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise _Failed(QueryErrorCode.QUERY_EXECUTION, f"cannot parse the server SQL: {str(exc).splitlines()[0]}") \
            from None
    finally:
        con.close()
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise _Failed(QueryErrorCode.QUERY_EXECUTION, "the server SQL must be exactly one SELECT statement")


def _reason(exc: duckdb.Error) -> str:
    """Why DuckDB failed, in a line: its first line in a user's words (``cuvee.query.execute.user_message``: no
    error class like ``Conversion Error:``, no SQL it quotes after it)."""
    return user_message(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)[:500]


_NOT_FOUND = re.compile(r'Referenced column "((?:[^"]|"")*)" not found')


def _not_served(exc: duckdb.Error, table: str) -> str | None:
    """A column the broker let through (its schema has it) that this server's segments do not serve: a column
    added to the schema since the table was last reloaded here. Said so, with the way out."""
    found = _NOT_FOUND.search(str(exc))
    if found is None:
        return None
    column = found.group(1).replace('""', '"')[:128]
    raw = raw_table_name(table)[:128]
    return (f"column {column!r} is not served by this server: if it was added to the schema of {raw} lately, "
            f"reload the table (POST /segments/{raw}/reload) to serve it, and its default value in the segments "
            "built before it")


def _conformed(table: pa.Table, served: ServedSchema | None, wanted: set[str] | None) -> pa.Table:
    return table if served is None else served.conform(table, wanted)


def _stored_as_read(segment: QueryableSegment, read: pa.Table) -> bool:
    """A committed segment's view reads each column as the segment stores it (none served as a default or cast),
    so its DuckDB copy, which holds the stored columns, answers the same; a consuming segment's likewise, for its
    sealed blocks' copies."""
    if isinstance(segment, ConsumingView):
        stored = segment.schema
    elif isinstance(segment, CommittedSegment):
        stored = segment.query_table().schema
    else:
        return True
    for field in read.schema:
        index = stored.get_field_index(field.name)
        if field.name != VALID_COLUMN and (index < 0 or stored.field(index).type != field.type):
            if index >= 0 and pa.types.is_dictionary(stored.field(index).type) and \
                    stored.field(index).type.value_type == field.type:
                continue  # its plain copy (CommittedSegment.with_plain)
            if index >= 0 and pa.types.is_dictionary(field.type) and field.type.value_type == stored.field(index).type:
                continue  # a consuming segment's dictionary ids over the stored values
            return False
    return True


def _alike(tables: list[pa.Table], segments: Sequence[QueryableSegment], request: ServerQueryRequest) -> list[pa.Table]:
    """``tables`` with each column in one form across committed segments: where some segments give a plain copy
    of a dictionary column and others its encoded form (the plain copies' budget holds only some), the copies are
    swapped for the encoded columns, zero-copy. Joined as they were, ``_union`` decoded every encoded part on
    every query: at 10M ClickBench rows a ``SELECT *`` took 7 s with about half the copies kept."""
    if len(tables) < 2:
        return tables

    def plain(table: pa.Table, name: str) -> bool:
        index = table.schema.get_field_index(name)
        return index >= 0 and not pa.types.is_dictionary(table.schema.field(index).type)

    def encoded(table: pa.Table, name: str) -> bool:
        index = table.schema.get_field_index(name)
        return index >= 0 and pa.types.is_dictionary(table.schema.field(index).type)

    # only where every plain part is a committed segment's copy (a consuming segment's plain column stays plain,
    # and the encoded parts are decoded to join it, as before)
    mixed = [name for name in tables[0].schema.names
             if any(encoded(t, name) for t in tables) and any(plain(t, name) for t in tables)
             and all(isinstance(s, CommittedSegment) for t, s in zip(tables, segments) if plain(t, name))]
    if not mixed:
        return tables
    alike = []
    for table, segment in zip(tables, segments):
        if isinstance(segment, CommittedSegment):
            held = segment.query_table()  # the segment's own columns, dictionary-encoded where it encodes them
            for name in mixed:
                if plain(table, name) and encoded(held, name):
                    table = table.set_column(table.schema.get_field_index(name), held.schema.field(name),
                                             held.column(name))
        alike.append(table)
    return alike


def _union(tables: list[pa.Table]) -> pa.Table:
    """One table over all segments, sharing their buffers. A column that is dictionary-encoded in some segments and
    plain in others is decoded where it is encoded; every other column stays as it is."""
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    mixed: set[str] = set()
    for name in dict.fromkeys(n for t in tables for n in t.column_names):  # a column the first lacks too
        kinds = {str(t.schema.field(name).type) for t in tables if name in t.column_names}
        if len(kinds) > 1:
            mixed.add(name)
    return pa.concat_tables([_decoded(t, mixed) for t in tables], promote_options="permissive")


def _decoded(table: pa.Table, names: set[str]) -> pa.Table:
    columns = [c.cast(c.type.value_type) if n in names and pa.types.is_dictionary(c.type) else c
               for n, c in zip(table.column_names, table.columns)]
    return pa.table(columns, names=table.column_names)
