"""One SQL query through the broker: plan, route, scatter, gather, merge, and Pinot's response JSON.

Every outcome is a response dict (Pinot answers HTTP 200 with ``exceptions``): bad SQL 150, unknown table 190,
unknown column 710, refused query 700 (too long, LIMIT too large), servers not answering 427 with
``partialResult``, server timeouts 250, segments no server serves 305, segments a server no longer holds 235,
and anything unexpected 450 (logged with its traceback). CPU-heavy steps (parsing, then merging together with
building the response) run on worker threads, so one large answer never stalls the event loop's other queries.

A hybrid table's query (``cuvee.broker.hybrid``) routes both halves, sends every server call of each half that
half's time filter, scatters all calls at once and merges every partial in the one merge: the halves' rows are
disjoint, so merging them is no different from merging two servers' partials.

The connection pool towards the servers lives on the HTTP server's event loop. ``close()`` refuses any new pool
(a query still planning is answered 450 "the broker is stopping") and closes the pool on that loop once the last
query using it has finished, so an in-flight query keeps its connections and no pool outlives the broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import duckdb
import pyarrow as pa
from sqlglot import exp

from cuvee.auth.layer import internal_headers
from cuvee.auth.policy import Permission, Principal
from cuvee.broker.cluster_view import ClusterView, TableEntry
from cuvee.broker.colocation import JoinPlacement, place_join
from cuvee.broker.config import BrokerConfig
from cuvee.broker.errors import query_error
from cuvee.broker.lookups import lookup_requests, with_schemas
from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.routing import RoutingTable
from cuvee.broker.partitioned_distinct import disjoint_plan
from cuvee.broker.segment_pruning import prune_routing
from cuvee.broker.scatter import ServerCall, ServerReply, scatter, server_session
from cuvee.broker.trim_rounds import exact_groups, untrimmed_first
from cuvee.cluster.records import SegmentState
from cuvee.config.table import raw_table_name
from cuvee.metrics.broker import BrokerMetrics
from cuvee.multistage.engine import SPARK_HINT, Stage
from cuvee.multistage.colocated_join import OTHER_RELATION, ColocatedJoin, colocated_joins
from cuvee.multistage.lookup_join import lookup_joins
from cuvee.multistage.plan import RELATION_PREFIX, MadeColumns, in_subqueries, inline_values, plan_stages
from cuvee.pruning.predicate import Predicate, with_bound
from cuvee.protocol.query import MAX_WIRE_INT, DimLookup, GroupLimits, ServerQueryRequest, ServerQueryStats
from cuvee.query import (
    ExecutionStats,
    QueryError,
    QueryErrorCode,
    QueryKind,
    QueryPlan,
    broker_response,
    check_plan,
    embedded_options,
    error_response,
    merge_partials,
    parse_query_options,
    plan_sql,
)
from cuvee.query.execute import PastDeadlineError, register, sandboxed_cursor
from cuvee.query.explain import COLUMN_NAMES as EXPLAIN_COLUMNS
from cuvee.query.explain import HalfRouting, explain_table, explained_query
from cuvee.query.functions import DIALECT
from cuvee.query.gapfill import GapfillQuery, mentions_gapfill, plan_gapfill
from cuvee.query.gapfill import finish as finish_gapfill
from cuvee.query.lookup import SERVER_RELATION
from cuvee.query.limits import check_text
from cuvee.query.group_trim import ACCURATE_GROUP_BY_OPTION, GroupOptions, group_options
from cuvee.query.parse import MultiStageRequired, TableInfo, split_query
from cuvee.query.plan_cache import PlanCache
from cuvee.query.rewrite import DOCS_TOTAL_COLUMN, cheap_merge

log = logging.getLogger(__name__)

_LISTED = 10  # segment names quoted in an error message
_INLINE_CHECK_BYTES = 16 * 1024  # query texts measured on the event loop (``check_text``); longer ones on a thread
_INLINE_MERGE_ROWS = 256  # partial rows merged on the event loop; more go to a worker thread


def _timeout_ms(options: Mapping[str, str], default: int, maximum: int) -> int:
    for key, value in options.items():
        if key.lower() == "timeoutms":
            text = value.strip()
            if not (text.isascii() and text.isdigit()) or len(text) > 12:
                raise QueryError(QueryErrorCode.SQL_PARSING,
                                 f"timeoutMs must be an integer from 1 to {maximum}, got {value[:40]!r}")
            timeout = int(text)
            if not 1 <= timeout <= maximum:
                raise QueryError(QueryErrorCode.SQL_PARSING, f"timeoutMs must be from 1 to {maximum}, got {timeout}")
            return timeout
    return default


def _flag_option(options: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A true/false query option (any case), ``default`` when not given; anything else is 150."""
    for key, value in options.items():
        if key.lower() == name.lower():
            if value.strip().lower() not in ("true", "false"):
                raise QueryError(QueryErrorCode.SQL_PARSING, f"{name} must be true or false, got {value[:40]!r}")
            return value.strip().lower() == "true"
    return default


@dataclasses.dataclass(frozen=True)
class _Asked:
    """What a query's options tell every server: skipUpsert, enableNullHandling (a missing value reads as NULL,
    not as its column's default: ``cuvee.query.null_defaults``), and the GROUP BY bounds that override the servers'
    defaults (numGroupsLimit, minServerGroupTrimSize); ``accurate``: a GROUP BY … ORDER BY whose servers trimmed
    is made exact (``cuvee.broker.trim_rounds``; ``accurateGroupByWithOrderBy=false``: Pinot's one round)."""

    skip_upsert: bool = False
    groups: GroupOptions = GroupOptions()
    null_handling: bool = False
    accurate: bool = True

    @staticmethod
    def of(options: Mapping[str, str]) -> _Asked:
        return _Asked(_flag_option(options, "skipUpsert"), group_options(options),
                      _flag_option(options, "enableNullHandling"),
                      _flag_option(options, ACCURATE_GROUP_BY_OPTION, default=True))

    def untrimmed(self) -> _Asked:
        """These options with the servers' trim off (numGroupsLimit still bounds their groups)."""
        return dataclasses.replace(self, groups=GroupOptions(self.groups.num_groups_limit, 0))

    @property
    def bounds_groups(self) -> bool:
        return self.groups.num_groups_limit is not None or self.groups.min_server_group_trim_size is not None


def answered_whole(plan: QueryPlan, servers: Sequence[int], asked: _Asked) -> bool:
    """Whether one server answers the whole query in one step (``QueryPlan.whole_sql``), the broker merging
    nothing: the table has one half (``servers``: how many servers each half is routed to) on one server, and the
    query does not bound the servers' groups itself (it asks for Pinot's cut, and is told about it). What the
    query runs and what EXPLAIN shows."""
    return plan.whole_sql is not None and len(servers) == 1 and servers[0] == 1 and not asked.bounds_groups


def _group_limits(plan: QueryPlan, asked: _Asked) -> GroupLimits | None:
    """A GROUP BY's bound on the groups each server sends (None for other queries)."""
    trim = plan.group_trim
    if trim is None:
        return None
    return GroupLimits(trim.order_sql, trim.rows, trim.exact, asked.groups.num_groups_limit,
                       asked.groups.min_server_group_trim_size)


def _first_round(asked: _Asked, plan: QueryPlan, routings: Sequence[RoutingTable]) -> _Asked:
    """``asked`` for the first round: the servers' trim off when the query reaches several servers and its ranking
    gives the broker nothing to bound (``trim_rounds.untrimmed_first``; never for one server: nothing to undo)."""
    if asked.accurate and untrimmed_first(plan.group_trim, sum(len(r.servers) for r in routings)):
        return asked.untrimmed()
    return asked


def _execution_stats(stats: ServerQueryStats) -> ExecutionStats:
    return ExecutionStats(
        numDocsScanned=stats.numDocsScanned, totalDocs=stats.totalDocs,
        numSegmentsQueried=stats.numSegmentsQueried, numSegmentsProcessed=stats.numSegmentsProcessed,
        numSegmentsMatched=stats.numSegmentsMatched, numConsumingSegmentsQueried=stats.numConsumingSegmentsQueried,
        minConsumingFreshnessTimeMs=stats.minConsumingFreshnessTimeMs,
        numGroupsLimitReached=stats.numGroupsLimitReached, groupsTrimmed=stats.groupsTrimmed,
        numSegmentsPrunedByServer=stats.numSegmentsPrunedByServer)


@dataclasses.dataclass(frozen=True)
class _Gathered:
    """One plan's server answers: the table (a hybrid's first half), its routings, the replies, calls made."""

    entry: TableEntry
    routings: list[RoutingTable]
    replies: list[ServerReply]
    num_calls: int
    whole: bool = False  # one server answered the query in one step (``QueryPlan.whole_sql``): nothing to merge
    deadline: float | None = None  # the query's (the handler's clock): the merge is stopped past it, plus grace
    plan: QueryPlan | None = None  # the plan the servers ran, when not the query's own (``disjoint_plan``)
    pruned_by_broker: int = 0  # segments routing left out by their partitions (``cuvee.broker.segment_pruning``)


@dataclasses.dataclass
class _StageRun:
    """A multi-stage query in flight: its deadline and options, and every leaf's answers and errors so far."""

    deadline: float
    asked: _Asked
    principal: Principal | None
    gathered: list[_Gathered] = dataclasses.field(default_factory=list)
    exceptions: list[QueryError] = dataclasses.field(default_factory=list)
    leaves: int = 0  # single-stage queries asked so far
    held_bytes: int = 0  # of the leaves' answers held for the broker's stage

    def remaining_ms(self, now: float) -> int:
        return max(int((self.deadline - now) * 1000), 1)


def _too_many_rows(limit: int) -> QueryError:
    """A multi-stage answer has no default LIMIT (a single stage's is 10): one beyond the broker's bound is
    refused rather than cut silently."""
    return QueryError(QueryErrorCode.QUERY_VALIDATION, f"the answer has more than {limit} rows "
                                                       "(max_response_rows); add a LIMIT")


def _request(request_id: str, plan: QueryPlan, target: QueryTarget, segments: tuple[str, ...], remaining_ms: int,
             asked: _Asked, lookups: tuple[DimLookup, ...], *, whole: bool = False) -> ServerQueryRequest:
    """One server's share of ``plan`` over ``target`` (a table, or one half of a hybrid table); ``whole``: the
    whole query, in one step (``QueryPlan.whole_sql``), for the only server asked."""
    if whole:  # numDocsScanned rides on the answer's rows; when none is left, the server counts alone
        assert plan.whole_sql is not None
        counted = plan.docs_column is not None
        return ServerQueryRequest(request_id, target.entry.name, plan.whole_sql, segments, remaining_ms,
                                  plan.count_sql if counted else plan.docs_scanned_sql, None, target.time_filter,
                                  asked.skip_upsert, lookups, docs_total_column=DOCS_TOTAL_COLUMN if counted else None,
                                  null_handling=asked.null_handling, prune_filter=_prune_filter(plan, target))
    return ServerQueryRequest(request_id, target.entry.name, plan.server_sql, segments, remaining_ms,
                              plan.docs_scanned_sql, plan.docs_column, target.time_filter, asked.skip_upsert, lookups,
                              _group_limits(plan, asked), top_sql=plan.top_sql, selection_limit=_selection_limit(plan),
                              null_handling=asked.null_handling, prune_filter=_prune_filter(plan, target),
                              stops_at_limit=plan.unordered_selection and _selection_limit(plan) is not None)


def _prune_filter(plan: QueryPlan, target: QueryTarget) -> Predicate | None:
    """What a server prunes its committed segments by (``cuvee.pruning``): the plan's WHERE and, for a hybrid
    table's half, its time filter."""
    bound = target.time_filter
    value = bound.stored_bound if bound is not None else None
    if bound is None or value is None:  # a date pattern that does not sort as time: its text bounds nothing
        return plan.prune_filter
    return with_bound(plan.prune_filter, bound.column, bound.op, value)


def _selection_limit(plan: QueryPlan) -> int | None:
    """A selection's rows per server (LIMIT plus OFFSET): a server whose answer falls short of it counts the
    answer's rows for numDocsScanned instead of running a second statement."""
    if plan.kind is not QueryKind.SELECTION or plan.limit is None or plan.limit + plan.offset > MAX_WIRE_INT:
        return None
    return plan.limit + plan.offset


def _check_read(principal: Principal | None, tables: tuple[str, ...]) -> None:
    """Error 180 unless ``principal`` (None: auth off; internal: another role) may READ every table."""
    if principal is None or principal.internal:
        return
    for table in tables:
        if not principal.may(Permission.READ, table):
            raise QueryError(QueryErrorCode.ACCESS_DENIED, f"{principal.name} has no READ permission on "
                                                           f"table {table!r}")


async def _together(*steps: Awaitable[Any]) -> list[Any]:
    """The answers of ``steps`` run at once; when one fails, the others are stopped and waited for before the
    failure is raised (none goes on adding its answers and statistics to a query that has moved on)."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class _NotColocated(Exception):
    """A join on the servers that cannot answer: the broker joins the two tables itself instead."""


def _no_joined_rows(sql: str, placement: JoinPlacement) -> pa.Table:
    """A colocated join's answer over no rows, typed as the servers would type it (their SQL over empty tables)."""
    con = sandboxed_cursor(0)
    try:
        register(con, SERVER_RELATION, placement.left.arrow_schema.empty_table())
        register(con, OTHER_RELATION, placement.right.arrow_schema.empty_table())
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as exc:
        raise _NotColocated(f"the join's SQL does not run over no rows: {exc}") from None
    finally:
        con.close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # an interrupted stage's failure is nobody's answer


def _names(segments: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(segments[:_LISTED])
    return shown + (f", ... ({len(segments) - _LISTED} more)" if len(segments) > _LISTED else "")


class QueryHandler:
    """Answers queries for one broker. ``handle`` runs on the HTTP server's event loop."""

    def __init__(self, config: BrokerConfig, view: ClusterView, *, clock: Callable[[], float] = time.monotonic,
                 metrics: BrokerMetrics | None = None):
        self.config = config
        self.view = view
        self._clock = clock
        self._numbers = itertools.count(1)
        self._client: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # the pool and the closing flag, between the loop and close()'s thread
        self._closing = False
        self._in_flight = 0  # queries inside handle(); only touched on the event loop
        self._overrun_plans = 0  # plans still running after their query was answered at its timeout (event loop)
        self._plans = PlanCache(config.plan_cache_entries, plan=self._checked_plan,
                                fingerprint=getattr(view, "fingerprint", None))  # test views may lack it
        self.pools_opened = 0
        self.metrics = metrics

    def _http(self) -> aiohttp.ClientSession:
        with self._lock:
            if self._closing:
                raise QueryError(QueryErrorCode.INTERNAL, "the broker is stopping")
            if self._client is None:
                cfg = self.config
                self._client = server_session(headers=internal_headers(cfg.auth), verify=cfg.tls.client_verify(),
                                              connect_timeout=cfg.connect_timeout_seconds,
                                              max_connections=cfg.max_server_connections)
                self._loop = asyncio.get_running_loop()
                self.pools_opened += 1
            return self._client

    @property
    def pool_open(self) -> bool:
        return self._client is not None

    def close(self, timeout: float | None = None) -> None:
        """Refuse new pools, and close the pool on its loop once no query uses it (call from any other thread,
        before that loop stops). Waits at most ``timeout`` (default ``stop_timeout_seconds``) for the loop."""
        with self._lock:
            self._closing = True
            loop = self._loop if self._client is not None else None
        if loop is None or loop.is_closed():
            return
        wait = self.config.stop_timeout_seconds if timeout is None else timeout
        try:
            asyncio.run_coroutine_threadsafe(self._close_when_idle(), loop).result(wait)
        except Exception:  # the loop is already stopping: the sockets close with it
            log.warning("closing the server connection pool failed", exc_info=True)

    async def _close_when_idle(self) -> None:
        if self._in_flight == 0:  # else the last query to finish closes it
            await self._close_pool()

    async def _close_pool(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def handle(self, sql: Any, query_options: Any = None, principal: Principal | None = None) -> dict[str, Any]:
        """``principal``: who asks, when auth is on (it needs READ on the query's table)."""
        number = next(self._numbers)
        started = self._clock()
        request_id = str(number)
        self._in_flight += 1
        measured: list[Any] = [None, []]  # the table asked for, and the answer's error codes
        try:
            answer = await self._handle(number, started, sql, query_options, principal, measured)
        except QueryError as exc:
            answer = error_response(exc, request_id=request_id, time_used_ms=self._elapsed_ms(started))
        except Exception as exc:  # a bug must cost one query, never the broker
            log.error("query %s failed unexpectedly", request_id, exc_info=exc)
            error = QueryError(QueryErrorCode.INTERNAL, f"internal error running query {request_id}; the broker log "
                                                        "has the details")
            answer = error_response(error, request_id=request_id, time_used_ms=self._elapsed_ms(started))
        try:
            self._measure(measured[0], answer, started)
            return answer
        finally:
            self._in_flight -= 1
            if self._closing and self._in_flight == 0:
                await self._close_pool()

    def _measure(self, table: str | None, answer: dict[str, Any], started: float) -> None:
        if self.metrics is None:
            return
        table = table or "unknown"
        self.metrics.queries.labels(table).inc()
        self.metrics.query_seconds.labels(table).observe(self._clock() - started)
        for error in answer.get("exceptions") or []:
            code = error.get("errorCode")
            self.metrics.query_errors.labels(str(code)).inc()

    def _elapsed_ms(self, started: float) -> int:
        """Rounded, not truncated: Pinot's figure is the difference of two millisecond clocks, right on average;
        truncating would understate every query by half a millisecond."""
        return round((self._clock() - started) * 1000)

    async def _handle(self, number: int, started: float, sql: Any, query_options: Any,
                      principal: Principal | None, measured: list[Any]) -> dict[str, Any]:
        cfg = self.config
        if not isinstance(sql, str) or not sql.strip():
            raise QueryError(QueryErrorCode.SQL_PARSING, "the request has no SQL: send {\"sql\": \"SELECT ...\"}")
        size = len(sql.encode())
        if size > cfg.max_sql_bytes:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"the query is {size} bytes; this broker accepts at most {cfg.max_sql_bytes}")
        if query_options is not None and not isinstance(query_options, str):
            raise QueryError(QueryErrorCode.SQL_PARSING, "queryOptions must be a string like \"k=v;k2=v2\"")
        options = parse_query_options(query_options)
        budget_ms = _timeout_ms({**options, **embedded_options(sql)}, cfg.timeout_ms, cfg.timeout_limit_ms)
        if size <= _INLINE_CHECK_BYTES:  # microseconds: no thread hop on the hot path
            check_text(sql, cfg.query_limits)
        else:  # a long text takes a scan of its every token: off the event loop
            await self._bounded(budget_ms, check_text, sql, cfg.query_limits)
        if (explained := explained_query(sql)) is not None:
            return await self._explain(number, started, explained, budget_ms, principal)
        if mentions_gapfill(sql) and (gapfill := await self._bounded(budget_ms, plan_gapfill, sql)) is not None:
            return await self._gapfill(number, started, gapfill, options, principal)
        try:
            plan = await self._plan(sql, budget_ms)
        except MultiStageRequired:
            return await self._multi_stage(number, started, sql, options, principal, measured)
        options.update(plan.options)
        measured[0] = raw_table_name(plan.table)  # Pinot labels broker metrics by raw table name
        timeout_ms = _timeout_ms(options, self._table_timeout_ms(plan.table), cfg.timeout_limit_ms)
        gathered = await self._gather(number, plan, principal, started + timeout_ms / 1000, _Asked.of(options),
                                      cfg.max_response_rows)
        if (cheap_merge((gathered.plan or plan).simple_merge) or gathered.whole) and \
                sum(r.table.num_rows for r in gathered.replies if r.table is not None) <= _INLINE_MERGE_ROWS:
            # one row merged in Arrow, or a server's whole answer: a thread hop costs more (a DISTINCTCOUNT's or
            # PERCENTILE's one partial row may hold a million values: those go to a worker thread)
            return self._answer(number, started, plan, gathered)
        return await asyncio.to_thread(self._answer, number, started, plan, gathered)

    def _table_timeout_ms(self, table: str) -> int:
        """A query's time limit on ``table`` when it sets none: the table config's ``query.timeoutMs`` (the smaller
        of a hybrid table's two), else the broker's ``timeout_ms``; never past ``timeout_limit_ms``."""
        own = [t.entry.timeout_ms for t in self.view.targets(table) if t.entry.timeout_ms is not None]
        return min(min(own), self.config.timeout_limit_ms) if own else self.config.timeout_ms

    async def _explain(self, number: int, started: float, sql: str, budget_ms: int,
                       principal: Principal | None) -> dict[str, Any]:
        """``EXPLAIN PLAN FOR``: the plan of a single-stage query and where it would run now, in the shape of
        Pinot's answer (``cuvee.query.explain``); nothing runs on the servers. Needs READ on the tables, as the
        query would."""
        try:
            plan = await self._plan(sql, budget_ms)
        except MultiStageRequired as exc:
            raise QueryError(QueryErrorCode.SQL_PARSING, f"EXPLAIN PLAN FOR describes single-stage queries; "
                                                         f"{exc.construct} run on the multi-stage engine") from None
        _check_read(principal, (plan.table, *(lookup.table for lookup in plan.lookups)))
        servers = frozenset(self.view.snapshot.servers)
        targets = self.view.targets(plan.table)
        routed = [(t.entry.name, t.entry.route(servers, number)) for t in targets]
        halves = [HalfRouting(name, dict(r.servers), r.consuming, len(r.unavailable),
                              t.time_filter.text() if t.time_filter is not None else None)
                  for t, (name, r) in zip(targets, routed)]
        whole = answered_whole(plan, [len(r.servers) for _, r in routed], _Asked.of(plan.options))
        shown = plan if whole else disjoint_plan(plan, targets, [r for _, r in routed])  # as the query would run
        return broker_response(request_id=str(number), time_used_ms=self._elapsed_ms(started),
                               table=explain_table(shown, halves, whole), column_names=EXPLAIN_COLUMNS)

    async def _gapfill(self, number: int, started: float, query: GapfillQuery, options: dict[str, str],
                       principal: Principal | None) -> dict[str, Any]:
        """A GAPFILL query (``cuvee.query.gapfill``): its source query answered as a multi-stage leaf, then the
        gapfill and any aggregation over the gapfilled rows at the broker."""
        options.update(query.options)
        if query.gapfill.limit > self.config.max_response_rows:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION, f"GAPFILL's LIMIT asks for {query.gapfill.limit} rows; "
                                                              f"this broker returns at most "
                                                              f"{self.config.max_response_rows}")
        timeout_ms = _timeout_ms(options, self.config.timeout_ms, self.config.timeout_limit_ms)
        run = _StageRun(started + timeout_ms / 1000, _Asked.of(options), principal)
        answers = await self._leaves(number, run, [(query.source_sql, "GAPFILL's source")])
        if answers is None:
            return self._stage_response(number, started, None, None, run)
        answer, names = await asyncio.to_thread(finish_gapfill, query, answers[0])
        return await asyncio.to_thread(self._stage_response, number, started, answer, names, run)

    async def _gather(self, number: int, plan: QueryPlan, principal: Principal | None, deadline: float,
                      asked: _Asked, max_rows: int) -> _Gathered:
        """Route ``plan`` over its table (both halves of a hybrid one), ask the servers, and ask again for what a
        server no longer held. ``principal`` needs READ on the table; ``max_rows`` bounds LIMIT + OFFSET (700)."""
        cfg = self.config
        _check_read(principal, (plan.table, *(lookup.table for lookup in plan.lookups)))  # a LOOKUP reads its table
        rows = (plan.limit or 0) + plan.offset
        if rows > max_rows:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"LIMIT + OFFSET asks for {rows} rows; this broker returns at most {max_rows}")
        targets = self.view.targets(plan.table)
        if not targets:
            raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"table {plan.table!r} does not exist")
        snapshot = self.view.snapshot
        servers = dict(snapshot.servers)
        routings = [target.entry.route(frozenset(servers), number) for target in targets]
        # segments whose recorded partitions rule the query out are never asked for (segmentPrunerTypes)
        pruned = [prune_routing(routing, plan.prune_filter, target.entry.pruning_facts)
                  for target, routing in zip(targets, routings)]
        routings = [routing for routing, _ in pruned]
        # all of the query's segments on one server: it answers the whole query, the broker merges nothing (not
        # when the query bounds the servers' groups itself: it asks for Pinot's cut, and is told about it)
        whole = answered_whole(plan, [len(r.servers) for r in routings], asked)
        asked_plan = plan if whole else disjoint_plan(plan, targets, routings)  # distinct counts summed if provable
        exact = asked.accurate and not whole  # a trim that may change the answer is undone (trim_rounds)
        asked = _first_round(asked, asked_plan, routings)
        calls: list[ServerCall] = []
        called: list[QueryTarget] = []  # each call's table half
        # a hybrid table: both halves at once, each server told its side of the boundary
        for target, routing in zip(targets, routings):
            made = self._calls(str(number), asked_plan, target, routing, servers, deadline, asked, whole=whole)
            calls += made
            called += [target] * len(made)
        wait = max(deadline - self._clock(), 0.0) + cfg.server_grace_seconds
        replies = await scatter(self._http(), calls, wait, max_bytes=cfg.max_server_response_bytes) if calls else []
        num_calls = len(calls)
        if (whole or asked_plan is not plan) and self._elsewhere(calls, called, replies, servers):
            # the server no longer held some segments, which another replica will answer for: its one-step answer
            # (or the distinct counts of a partition that replica then shares) cannot be merged with theirs, so it
            # is asked again for its partial result (rare: a move under way)
            whole, asked_plan, exact = False, plan, asked.accurate
            asked = _first_round(asked, plan, routings)
            calls, called = [], []
            for target, routing in zip(targets, routings):  # every half again (a summed plan may span both)
                made = self._calls(str(number), plan, target, routing, servers, deadline, asked)
                calls += made
                called += [target] * len(made)
            wait = max(deadline - self._clock(), 0.0) + cfg.server_grace_seconds
            replies = await scatter(self._http(), calls, wait, max_bytes=cfg.max_server_response_bytes)
            num_calls += len(calls)
        replies, retried = await self._ask_again(str(number), plan, calls, called, replies, servers, deadline,
                                                 asked)
        if exact:
            replies, again = await exact_groups(
                asked_plan.group_trim, calls + retried, replies, lambda: max(int((deadline - self._clock()) * 1000), 1),
                lambda more: scatter(self._http(), more, max(deadline - self._clock(), 0.0) + cfg.server_grace_seconds,
                                     max_bytes=cfg.max_server_response_bytes),
                upsert=any(target.entry.upsert for target in targets))
            num_calls += again
        return _Gathered(targets[0].entry, routings, replies, num_calls + len(retried), whole, deadline,
                         asked_plan if asked_plan is not plan else None, sum(count for _, count in pruned))

    async def _multi_stage(self, number: int, started: float, sql: str, options: dict[str, str],
                           principal: Principal | None, measured: list[Any]) -> dict[str, Any]:
        """A query a single stage cannot answer (``cuvee.multistage``), within its timeout: first its
        IN-subqueries, whose values take their place (what is left may then be one stage, pushed to the servers
        whole); then its leaves through the single-stage path at once, and the rest at the broker under
        ``multistage_memory_mb``."""
        cfg = self.config
        budget_ms = _timeout_ms({**options, **embedded_options(sql)}, cfg.timeout_ms, cfg.timeout_limit_ms)
        query, text_options = await self._bounded(budget_ms, split_query, sql)
        options.update(text_options)
        timeout_ms = _timeout_ms(options, cfg.timeout_ms, cfg.timeout_limit_ms)
        run = _StageRun(started + timeout_ms / 1000, _Asked.of(options), principal)
        relations: dict[str, pa.Table] = {}
        while pending := await self._bounded(run.remaining_ms(self._clock()), in_subqueries, query,
                                             self.view.resolve, cfg.multistage_leaf_rows):
            measured[0] = measured[0] or raw_table_name(pending[0].table)
            answers = await self._leaves(number, run, [(p.sql, p.table) for p in pending])
            if answers is None:
                return self._stage_response(number, started, None, None, run)
            for subquery, answer in zip(pending, answers):
                relation = f"{RELATION_PREFIX}in{len(relations) + 1}"
                if inline_values(subquery, answer.column(0).to_pylist(), relation):
                    relations[relation] = answer
        query = await self._bounded(run.remaining_ms(self._clock()), lookup_joins, query, self.view.resolve,
                                    self._plans_alone)
        if not relations:  # every IN-subquery became a list, joins with dimension tables LOOKUPs: one stage now?
            if isinstance(query, exp.Select) and query.args.get("limit") is None:
                query.set("limit", exp.Limit(expression=exp.Literal.number(cfg.max_response_rows + 1)))
            try:
                plan = await self._plan(query.sql(dialect=DIALECT), run.remaining_ms(self._clock()))
            except MultiStageRequired:
                plan = None
            if plan is not None:
                measured[0] = raw_table_name(plan.table)
                run.gathered.append(await self._gather(number, plan, principal, run.deadline, run.asked,
                                                       cfg.max_response_rows + 1))
                merged, errors, _ = await asyncio.to_thread(self._merge, plan, run.gathered[-1])
                run.exceptions += errors
                if merged is not None and merged.num_rows > cfg.max_response_rows:
                    raise _too_many_rows(cfg.max_response_rows)
                return await asyncio.to_thread(self._stage_response, number, started, merged, plan.column_names, run)
        joined_query, joins, joined = await self._bounded(run.remaining_ms(self._clock()), self._colocated_joins,
                                                          query)
        if joins:
            marks = (len(run.gathered), run.held_bytes, run.leaves, len(run.exceptions))
            try:
                return await self._staged(number, started, run, joined_query, joins, joined, dict(relations),
                                          timeout_ms, measured)
            except _NotColocated as reason:  # the broker joins the two tables instead, as if never tried
                log.info("a join on the servers fell back to the broker: %s", reason)
                del run.gathered[marks[0]:], run.exceptions[marks[3]:]
                run.held_bytes, run.leaves = marks[1], marks[2]
        return await self._staged(number, started, run, query, [], MadeColumns(), relations, timeout_ms, measured)

    def _colocated_joins(self, query: exp.Expression) -> tuple[exp.Expression, list[ColocatedJoin], MadeColumns]:
        """``colocated_joins`` over the cluster's placement; a planner failure leaves the joins to the broker."""
        try:
            return colocated_joins(query, self.view.resolve, self._colocate, self.config.multistage_leaf_rows)
        except Exception:  # noqa: BLE001 - a rewrite bug must cost the optimisation, never the query
            log.warning("planning joins on the servers failed; the broker joins instead", exc_info=True)
            return query, [], MadeColumns()

    async def _staged(self, number: int, started: float, run: _StageRun, query: exp.Expression,
                      joins: list[ColocatedJoin], joined: MadeColumns, relations: dict[str, pa.Table],
                      timeout_ms: int, measured: list[Any]) -> dict[str, Any]:
        """``query``'s stages: its leaves and joins on the servers at once, then the rest at the broker. Raises
        ``_NotColocated`` when a join on the servers has no usable answer."""
        cfg = self.config
        stages = await self._bounded(run.remaining_ms(self._clock()), plan_stages, query, self.view.resolve,
                                     cfg.multistage_leaf_rows, joined)
        measured[0] = measured[0] or raw_table_name(stages.leaves[0].table if stages.leaves else joins[0].left)
        answers, *joined_rows = await _together(
            self._leaves(number, run, [(leaf.sql, leaf.table) for leaf in stages.leaves]),
            *(self._joined(number, run, join) for join in joins))
        if answers is None:
            return self._stage_response(number, started, None, None, run)
        relations.update({leaf.relation: answer for leaf, answer in zip(stages.leaves, answers)})
        relations.update({join.relation: rows for join, rows in zip(joins, joined_rows)})
        stage = Stage(cfg.multistage_memory_mb)
        running = asyncio.ensure_future(asyncio.to_thread(stage.run, stages.final_sql, relations,
                                                          self._monotonic(run.deadline)))
        try:
            answer = await asyncio.wait_for(asyncio.shield(running),
                                            max(run.deadline - self._clock(), 0.0) + cfg.server_grace_seconds)
        except TimeoutError:
            stage.interrupt()
            running.add_done_callback(_retrieve)
            raise QueryError(QueryErrorCode.BROKER_TIMEOUT, f"the broker stage did not finish within the query's "
                                                            f"timeout ({timeout_ms} ms)") from None
        if answer.num_rows > cfg.max_response_rows:
            raise _too_many_rows(cfg.max_response_rows)
        names = stages.column_names if stages.column_names and len(stages.column_names) == answer.num_columns \
            else None
        return await asyncio.to_thread(self._stage_response, number, started, answer, names, run)

    def _colocate(self, left: TableInfo, left_key: str, right: TableInfo, right_key: str) -> JoinPlacement | None:
        """Where a join of two tables partitioned alike runs on the servers now (``cuvee.broker.colocation``)."""
        entries = [self.view.targets(info.name) for info in (left, right)]
        if any(len(targets) != 1 for targets in entries):  # a hybrid table (or one gone): the broker joins
            return None
        types = [dict(info.value_types).get(key) for info, key in ((left, left_key), (right, right_key))]
        return place_join(entries[0][0].entry, left_key, entries[1][0].entry, right_key,
                          frozenset(self.view.snapshot.servers), types[0] is not None and types[0] == types[1])

    async def _joined(self, number: int, run: _StageRun, join: ColocatedJoin) -> pa.Table:
        """The rows of a join the servers answer: each server's share asked at once, within the leaves' bounds.
        Raises ``_NotColocated`` when a share has no usable answer (a server gone, a copy refreshed or moved since
        the placement, a failure) or the joined rows exceed ``multistage_leaf_rows``: the broker's join of the two
        tables answers then, with its own retries and bounds."""
        cfg = self.config
        self._count_leaves(run, 1)
        placement: JoinPlacement = join.placement
        _check_read(run.principal, (join.left, join.right))
        servers = dict(self.view.snapshot.servers)
        if any(instance not in servers for instance in placement.servers):
            raise _NotColocated(f"a server holding rows of {join.left} left the cluster")
        if not placement.servers:  # the FROM table holds no rows: neither does an INNER or LEFT join of it
            return await asyncio.to_thread(_no_joined_rows, join.sql, placement)
        remaining_ms = run.remaining_ms(self._clock())
        calls = [ServerCall(instance, servers[instance], ServerQueryRequest(
                    str(number), join.left, join.sql, left, remaining_ms, lookups=(DimLookup(
                        OTHER_RELATION, join.right, right, None if right else placement.right.arrow_schema),),
                    colocation=placement.colocation(instance), null_handling=run.asked.null_handling))
                 for instance, (left, right) in sorted(placement.servers.items())]
        replies = await scatter(self._http(), calls, max(run.deadline - self._clock(), 0.0) + cfg.server_grace_seconds,
                                max_bytes=cfg.max_server_response_bytes)
        run.gathered.append(_Gathered(placement.left, [], replies, len(calls)))
        errors = self._exceptions(replies)
        if errors or any(r.table is None for r in replies):
            raise _NotColocated("; ".join(e.message for e in errors)[:1024] or "a server sent no rows")
        tables = [r.table for r in replies if r.table is not None]
        rows = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
        if rows.num_rows > cfg.multistage_leaf_rows:  # the join multiplies rows: each table's may still fit
            raise _NotColocated(f"{rows.num_rows} joined rows are over multistage_leaf_rows")
        self._hold(run, rows, f"joined rows of tables {join.left!r} and {join.right!r}")
        return rows

    def _count_leaves(self, run: _StageRun, asked: int) -> None:
        """Count single-stage queries (and joins on the servers) against ``multistage_max_leaves`` (700 beyond)."""
        run.leaves += asked
        if run.leaves > self.config.multistage_max_leaves:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"the query reads tables {run.leaves} times; the broker's multistage_max_leaves allows "
                             f"{self.config.multistage_max_leaves}")

    def _hold(self, run: _StageRun, rows: pa.Table, what: str) -> None:
        """Count rows a leaf brings to the broker against ``multistage_leaf_rows`` and the query's
        ``multistage_memory_mb`` (700 beyond either, pointing to Spark for what is too big for one machine)."""
        cfg = self.config
        if rows.num_rows > cfg.multistage_leaf_rows:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"more than {cfg.multistage_leaf_rows} {what} would reach the broker "
                             f"(multistage_leaf_rows); filter them, or {SPARK_HINT}")
        run.held_bytes += rows.nbytes
        if run.held_bytes > cfg.multistage_memory_mb * 1024 * 1024:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"the rows this query brings to the broker take more than its multistage_memory_mb "
                             f"({cfg.multistage_memory_mb}); filter them, or {SPARK_HINT}")

    async def _leaves(self, number: int, run: _StageRun, leaves: list[tuple[str, str]]) -> list[pa.Table] | None:
        """The answers of single-stage queries (SQL, table) asked at once, named as each plan names its columns;
        None when one has no answer (the errors are in ``run``). More rows than ``multistage_leaf_rows`` is 700."""
        cfg = self.config
        self._count_leaves(run, len(leaves))
        plans = [await self._plan(sql, run.remaining_ms(self._clock())) for sql, _ in leaves]
        gathered = await asyncio.gather(*(self._gather(number, plan, run.principal, run.deadline, run.asked,
                                                       cfg.multistage_leaf_rows + 1 + plan.offset) for plan in plans))
        run.gathered += gathered
        answers: list[pa.Table] = []
        for (_, table), plan, leaf_gathered in zip(leaves, plans, gathered):
            merged, errors, _ = await asyncio.to_thread(self._merge, plan, leaf_gathered)
            run.exceptions += errors
            if merged is None or errors:  # a leaf short of rows would make NOT IN, EXCEPT, anti-joins say wrong
                return None
            self._hold(run, merged, f"rows of table {table!r}")
            answers.append(merged.rename_columns(list(plan.column_names)))
        return answers

    def _stage_response(self, number: int, started: float, answer: pa.Table | None, names: Any,
                        run: _StageRun) -> dict[str, Any]:
        replies = [reply for g in run.gathered for reply in g.replies]
        stats = ExecutionStats.combine(_execution_stats(r.stats) for r in replies if r.stats is not None)
        stats = dataclasses.replace(stats, numSegmentsPrunedByBroker=sum(g.pruned_by_broker for g in run.gathered))
        return broker_response(
            request_id=str(number), time_used_ms=self._elapsed_ms(started), table=answer,
            column_names=names if answer is not None else None, stats=stats,
            num_servers_queried=sum(g.num_calls for g in run.gathered),
            num_servers_responded=sum(1 for r in replies if r.responded), exceptions=run.exceptions)

    async def _ask_again(self, request_id: str, plan: QueryPlan, calls: list[ServerCall], called: list[QueryTarget],
                         replies: list[ServerReply], servers: Mapping[str, str], deadline: float,
                         asked: _Asked) -> tuple[list[ServerReply], list[ServerCall]]:
        """Segments a server no longer held (it dropped them after the broker's view was taken: a rebalance, a
        deletion) are asked once more of another ONLINE replica the view lists, within what is left of the query's
        time, so a move never costs a query its rows (consuming copies are not asked: their ends differ).
        Not for upsert tables (a partition is read whole from one replica). Returns the replies (the first ones
        without what the second found) and the calls made again (their replies follow the first ones)."""
        if self._clock() >= deadline:  # no time left: what is missing is reported (235)
            return replies, []
        again = self._elsewhere(calls, called, replies, servers)
        if not again:
            return replies, []
        halves = {id(target): target for target in called}
        remaining_ms = max(int((deadline - self._clock()) * 1000), 1)
        lookups = lookup_requests(plan, self.view)
        retry_calls = [ServerCall(instance, servers[instance],
                                  _request(request_id, plan, halves[half], tuple(sorted(segments)), remaining_ms,
                                           asked, lookups))
                       for (half, instance), segments in again.items()]
        second = await scatter(self._http(), retry_calls, max(deadline - self._clock(), 0.0),  # within the query's time
                               max_bytes=self.config.max_server_response_bytes)
        found = {segment for call, reply in zip(retry_calls, second) if reply.stats is not None
                 for segment in call.request.segments if segment not in reply.stats.missingSegments}
        kept = [dataclasses.replace(reply, stats=dataclasses.replace(
                    reply.stats, missingSegments=tuple(s for s in reply.stats.missingSegments if s not in found)))
                if reply.stats is not None and reply.stats.missingSegments else reply for reply in replies]
        return kept + second, retry_calls

    @staticmethod
    def _elsewhere(calls: list[ServerCall], called: list[QueryTarget], replies: list[ServerReply],
                   servers: Mapping[str, str]) -> dict[tuple[int, str], list[str]]:
        """The segments servers answered they no longer hold that another ONLINE replica the view lists may
        answer for: (table half, that replica) -> segments (none of an upsert table: a partition is read whole
        from one replica)."""
        again: dict[tuple[int, str], list[str]] = {}
        for call, target, reply in zip(calls, called, replies):
            missing = reply.stats.missingSegments if reply.stats is not None else ()
            if not missing or target.entry.upsert:
                continue
            for segment in missing:
                others = sorted(i for i, state in target.entry.view.segments.get(segment, {}).items()
                                if i != call.instance and i in servers and state is SegmentState.ONLINE)
                if others:
                    again.setdefault((id(target), others[0]), []).append(segment)
        return again

    async def _plan(self, sql: str, budget_ms: int) -> QueryPlan:
        """Plan on a worker thread within the query's timeout. A plan that overruns it is answered at the timeout
        and left to finish unheard; while ``max_overrun_plans`` such plans still run, new queries are refused
        rather than piling up more (each holds a worker thread)."""
        if self._overrun_plans >= self.config.max_overrun_plans:
            raise QueryError(QueryErrorCode.BROKER_TIMEOUT, f"{self._overrun_plans} queries that overran their "
                                                            "timeout are still being planned; retry shortly")
        cached = self._plans.cached(sql, self.view.resolve)  # a repeated query: no parsing, no thread hop
        if cached is not None:
            return cached
        return await self._bounded(budget_ms, self._plans.plan, sql, self.view.resolve)

    async def _bounded(self, budget_ms: int, work: Callable[..., Any], *args: Any) -> Any:
        """``work(*args)`` (planning: CPU only) on a worker thread, answered 400 when it overruns ``budget_ms`` —
        what is left of the query's timeout — and counted among the overrun plans until it ends."""
        if self._overrun_plans >= self.config.max_overrun_plans:
            raise QueryError(QueryErrorCode.BROKER_TIMEOUT, f"{self._overrun_plans} queries that overran their "
                                                            "timeout are still being planned; retry shortly")
        future = asyncio.ensure_future(asyncio.to_thread(work, *args))
        try:
            return await asyncio.wait_for(asyncio.shield(future), budget_ms / 1000)
        except TimeoutError:
            self._overrun_plans += 1
            future.add_done_callback(self._overrun_done)
            raise QueryError(QueryErrorCode.BROKER_TIMEOUT, f"planning the query took longer than the time its "
                                                            f"timeout left ({budget_ms} ms)") from None

    def _checked_plan(self, sql: str, resolve: Any) -> QueryPlan:
        """A plan whose steps bind over the table's columns (``check_plan``: 700 before any server is asked);
        checked once per text, then cached with the plan."""
        plan = with_schemas(plan_sql(sql, resolve), self.view)  # LOOKUP's dimension tables typed
        targets = self.view.targets(plan.table)
        if targets:
            check_plan(plan, targets[0].entry.arrow_schema)
        return plan

    def _plans_alone(self, select: exp.Select) -> bool:
        """Whether ``select`` is a query the single stage answers (a join rewritten into LOOKUPs must be)."""
        try:
            plan = self._checked_plan(select.sql(dialect=DIALECT), self.view.resolve)
        except QueryError:
            return False
        except Exception:  # a planner bug: the join runs at the broker instead, and the log says why
            log.warning("planning a join rewritten into LOOKUPs failed; the broker joins instead", exc_info=True)
            return False
        return self._dimensions_beside_facts(plan)

    def _dimensions_beside_facts(self, plan: QueryPlan) -> bool:
        """Whether every server holding the fact table's segments holds every segment of each dimension table the
        plan looks up, ONLINE: else the servers could not answer the rewritten join (a server of another tenant,
        or one added before a rebalance brought it the dimension table), which the broker can."""
        facts = {instance for target in self.view.targets(plan.table)
                 for states in target.entry.view.segments.values() for instance in states}
        for lookup in plan.lookups:
            targets = self.view.targets(lookup.table)
            segments = targets[0].entry.view.segments if targets else {}
            if not segments:
                return False
            holders = set.intersection(*({i for i, state in states.items() if state is SegmentState.ONLINE}
                                         for states in segments.values()))
            if not facts <= holders:
                return False
        return True

    def _overrun_done(self, future: asyncio.Future[Any]) -> None:
        self._overrun_plans -= 1
        if not future.cancelled():
            future.exception()  # retrieved: a failed overrun plan is nobody's answer

    def _merge(self, plan: QueryPlan, gathered: _Gathered) -> tuple[pa.Table | None, list[QueryError],
                                                                      ExecutionStats]:
        """The merged answer (None when merging failed), the errors to report, and the servers' statistics."""
        unavailable = sum(len(routing.unavailable) for routing in gathered.routings)
        if unavailable and self.metrics is not None:
            self.metrics.unavailable_segments.labels(raw_table_name(gathered.entry.name)).inc(unavailable)
        replies = gathered.replies
        exceptions = [e for routing in gathered.routings for e in self._unavailable(routing)]
        exceptions += self._exceptions(replies)
        partials = [r.table for r in replies if r.table is not None]
        merged: pa.Table | None
        try:
            # a one-step answer is final; none (the server failed) is answered as no partials are
            merged = partials[0] if gathered.whole and partials else \
                merge_partials(gathered.plan or plan, partials, gathered.entry.arrow_schema,
                               deadline=self._monotonic(gathered.deadline))
        except PastDeadlineError:
            merged = None
            exceptions.append(QueryError(QueryErrorCode.BROKER_TIMEOUT, "merging the servers' answers ran past the "
                                                                        "query's timeout"))
        except QueryError as exc:  # a bound the query's data passed (700) keeps its code
            merged = None
            exceptions.append(exc if exc.code == QueryErrorCode.QUERY_VALIDATION else
                              QueryError(QueryErrorCode.MERGE_RESPONSE, exc.message))
        stats = ExecutionStats.combine(_execution_stats(r.stats) for r in replies if r.stats is not None)
        return merged, exceptions, dataclasses.replace(stats, numSegmentsPrunedByBroker=gathered.pruned_by_broker)

    def _monotonic(self, deadline: float | None) -> float | None:
        """A query's deadline on the handler's clock as a ``time.monotonic()`` time, with the servers' grace (what
        the broker's own steps are stopped at)."""
        if deadline is None:
            return None
        return time.monotonic() + max(deadline - self._clock(), 0.0) + self.config.server_grace_seconds

    def _answer(self, number: int, started: float, plan: QueryPlan, gathered: _Gathered) -> dict[str, Any]:
        """Merge the partials and build the response (a worker thread: both are CPU-bound on large answers)."""
        merged, exceptions, stats = self._merge(plan, gathered)
        return broker_response(
            request_id=str(number), time_used_ms=self._elapsed_ms(started), table=merged,
            column_names=plan.column_names if merged is not None else None, stats=stats,
            num_servers_queried=gathered.num_calls,
            num_servers_responded=sum(1 for r in gathered.replies if r.responded), exceptions=exceptions)

    def _calls(self, request_id: str, plan: QueryPlan, target: QueryTarget, routing: RoutingTable,
               servers: Mapping[str, str], deadline: float, asked: _Asked = _Asked(), *,
               whole: bool = False) -> list[ServerCall]:
        remaining_ms = max(int((deadline - self._clock()) * 1000), 1)
        lookups = lookup_requests(plan, self.view)
        return [ServerCall(instance, servers[instance],
                           _request(request_id, plan, target, segments, remaining_ms, asked, lookups, whole=whole))
                for instance, segments in routing.servers.items()]

    @staticmethod
    def _unavailable(routing: RoutingTable) -> list[QueryError]:
        if not routing.unavailable:
            return []
        return [QueryError(QueryErrorCode.BROKER_SEGMENT_UNAVAILABLE, f"{len(routing.unavailable)} segment(s) have no "
                           f"ONLINE or CONSUMING replica: {_names(routing.unavailable)}")]

    @staticmethod
    def _exceptions(replies: list[ServerReply]) -> list[QueryError]:
        errors: list[QueryError] = []
        for reply in replies:
            if reply.error is not None:
                errors.append(reply.error)
                continue
            assert reply.stats is not None
            for exc in reply.stats.exceptions:
                errors.append(query_error(exc.error_code, f"{exc.message} (on server {reply.instance})"))
            if reply.stats.missingSegments:
                missing = list(reply.stats.missingSegments)
                errors.append(QueryError(QueryErrorCode.SERVER_SEGMENT_MISSING,
                                         f"server {reply.instance} does not hold {len(missing)} segment(s): "
                                         f"{_names(missing)}"))
        return errors
