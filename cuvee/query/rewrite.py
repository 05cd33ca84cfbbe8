"""Split a parsed query into the SQL each server runs and the SQL the broker runs over their partial results.

Servers run ``server_sql`` with DuckDB over ``SERVER_RELATION`` (the union of the segments they were sent). The
broker concatenates the servers' Arrow results, binds them as ``PARTIALS_RELATION`` and runs ``final_sql``.

Aggregations become mergeable partials (``_PARTIALS``) and a final step (``_FINALS``):

- COUNT -> partial counts, summed. SUM/MIN/MAX -> partial SUM/MIN/MAX. AVG -> SUM and COUNT.
- DISTINCTCOUNT, COUNT(DISTINCT x), DISTINCTCOUNTSMARTHLL and DISTINCTCOUNTULL -> the list of distinct values per
  group, merged and counted: exact, so replicas and reruns agree, at the cost of shipping the distinct values
  (fine up to millions per group; a one-row count is merged in Arrow).
- PERCENTILE / PERCENTILEEST(x, p) and PERCENTILE90(x) forms -> the list of values, merged and sorted; the answer
  is Pinot's exact rule: sorted[floor(n * p / 100)], the last value for p = 100.
- DISTINCTCOUNTHLL(PLUS), DISTINCTCOUNTTHETASKETCH, PERCENTILETDIGEST and PERCENTILEKLL -> a DataSketches sketch per
  group, merged at the broker (``cuvee.query.sketches``): estimates within the sketches' error.

Pinot's aggregations with several arguments and typed answers (LASTWITHTIME, MODE, HISTOGRAM, FUNNEL_COUNT...:
``cuvee.query.pinot_aggregates``, ``cuvee.query.funnel``) carry their steps with them (``MergeSpec``): partials,
final aggregate, scalar step and one-step aggregate written for the call's arguments; the merger places them as it
places these.

Result types follow Pinot: COUNT is LONG, SUM/AVG/PERCENTILE DOUBLE, DISTINCTCOUNT INT, DISTINCTCOUNTHLL LONG;
MIN/MAX keep the column's type (Pinot answers DOUBLE) so that they also work on strings and timestamps. A missing
value reaches the servers' SQL as its column's default null value unless the query enables null handling
(``cuvee.query.null_defaults``); a NULL that remains is ignored by every aggregation and an empty input gives NULL,
COUNT gives 0.

The final SQL has two levels: an inner query merges partials per group into ``__f<k>`` columns, and an outer
query evaluates the user's select expressions, HAVING (as WHERE), ORDER BY and LIMIT/OFFSET over them. Selection
queries: servers apply WHERE, ORDER BY and LIMIT offset+limit; the broker re-sorts and cuts. Pinot's default LIMIT
of 10 applies to selection, GROUP BY and DISTINCT queries. A LOOKUP beside aggregations whose join values are GROUP BY
keys is a function of the group: the servers compute it as one more, hidden, group key (the broker holds no
dimension table to compute it with).

A GROUP BY also says how a server ranks its groups when it keeps fewer than it has (``QueryPlan.group_trim``,
planned by ``cuvee.query.group_trim``): Pinot's numGroupsLimit and its server-side trim of GROUP BY … ORDER BY.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from cuvee.pruning.predicate import Predicate, from_where
from cuvee.query.aggregate_call import MergeSpec, fill
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.functions import AggKind, AggregateCall, classify_aggregate
from cuvee.query.group_trim import GroupTrim, plan_trim
from cuvee.query.lookup import SERVER_RELATION, Lookup, lookup_fact_columns
from cuvee.query.parse import DIALECT, ParsedQuery, TableResolver, parse_query, sql_error

PARTIALS_RELATION = "cuvee_partials"
DEFAULT_LIMIT = 10
# The server step of ``SELECT COUNT(*)`` without WHERE: servers answer it from their row counts, not a scan.
COUNT_ROWS_SERVER_SQL = f"SELECT count(*) AS __p0 FROM {SERVER_RELATION}"
DOCS_COLUMN = "__docs"  # an aggregation's per-group count of rows passing WHERE (numDocsScanned), never merged

_DISTINCT_LIST = ("list(DISTINCT {x}) FILTER (WHERE {x} IS NOT NULL)",)
_PARTIALS: dict[AggKind, tuple[str, ...]] = {
    AggKind.COUNT: ("count({x})",),
    AggKind.SUM: ("sum({x})",),
    AggKind.MIN: ("min({x})",),
    AggKind.MAX: ("max({x})",),
    AggKind.AVG: ("sum({x})", "count({x})"),
    AggKind.MIN_MAX_RANGE: ("min({x})", "max({x})"),
    AggKind.DISTINCT_COUNT: _DISTINCT_LIST,
    AggKind.DISTINCT_COUNT_HLL: _DISTINCT_LIST,
    AggKind.DISTINCT_SUM: _DISTINCT_LIST,
    AggKind.DISTINCT_AVG: _DISTINCT_LIST,
    AggKind.PERCENTILE: ("list(CAST({x} AS DOUBLE)) FILTER (WHERE {x} IS NOT NULL)",),
}
# The same partials over every value of a multi-value column (Pinot's ...MV aggregations): per-row list functions
# inside the aggregation, so the servers' partials and the broker's finals stay those of the plain kind.
_MV_DISTINCT_LIST = ("list_distinct(flatten(list({x}) FILTER (WHERE {x} IS NOT NULL)))",)
_MV_VALUES = "list_filter(CAST({x} AS DOUBLE[]), lambda v: v IS NOT NULL)"
_MV_PARTIALS: dict[AggKind, tuple[str, ...]] = {
    AggKind.COUNT: ("sum(list_aggregate({x}, 'count'))",),
    AggKind.SUM: ("sum(list_sum({x}))",),
    AggKind.MIN: ("min(list_min({x}))",),
    AggKind.MAX: ("max(list_max({x}))",),
    AggKind.AVG: ("sum(list_sum({x}))", "sum(list_aggregate({x}, 'count'))"),
    AggKind.MIN_MAX_RANGE: ("min(list_min({x}))", "max(list_max({x}))"),
    AggKind.DISTINCT_COUNT: _MV_DISTINCT_LIST,
    AggKind.DISTINCT_COUNT_HLL: _MV_DISTINCT_LIST,
    AggKind.DISTINCT_SUM: _MV_DISTINCT_LIST,
    AggKind.DISTINCT_AVG: _MV_DISTINCT_LIST,
    AggKind.PERCENTILE: (f"flatten(list({_MV_VALUES}) FILTER (WHERE {{x}} IS NOT NULL))",),
}
# A distinct count each server counts alone, summed: its column's values are on one server each (``QueryPlan.disjoint``)
_SUMMED_COUNT = "CAST(coalesce(sum({p0}), 0) AS INTEGER)"
# A group's distinct values over the servers' partial lists (each one distinct, without NULLs). A group only one
# partial holds is that list as it is, and a distinct count counts the merged values without building their list:
# merging 599 RegionID groups holding 1M UserIDs from one server took 29 ms this way, 102 ms counting the
# flattened lists and 220 ms building their distinct list (2 threads).
_MERGED = "CASE WHEN count(*) = 1 THEN any_value({p0}) ELSE list_distinct(flatten(list({p0}))) END"
_MERGED_COUNT = "CASE WHEN count(*) = 1 THEN len(any_value({p0})) ELSE list_unique(flatten(list({p0}))) END"
# Final steps: (aggregation over the partial columns, scalar step over its result ``{a}``). The scalar step runs
# one level up so that a merged list is built and sorted once per group.
_FINALS: dict[AggKind, tuple[str, str]] = {
    AggKind.COUNT: ("CAST(coalesce(sum({p0}), 0) AS BIGINT)", "{a}"),
    AggKind.SUM: ("CAST(sum({p0}) AS DOUBLE)", "{a}"),
    AggKind.MIN: ("min({p0})", "{a}"),
    AggKind.MAX: ("max({p0})", "{a}"),
    AggKind.AVG: ("CAST(sum({p0}) AS DOUBLE) / nullif(sum({p1}), 0)", "{a}"),
    AggKind.MIN_MAX_RANGE: ("CAST(max({p1}) AS DOUBLE) - CAST(min({p0}) AS DOUBLE)", "{a}"),
    AggKind.DISTINCT_COUNT: (f"CAST(coalesce({_MERGED_COUNT}, 0) AS INTEGER)", "{a}"),
    AggKind.DISTINCT_COUNT_HLL: (f"CAST(coalesce({_MERGED_COUNT}, 0) AS BIGINT)", "{a}"),
    AggKind.DISTINCT_SUM: (f"CAST(list_sum({_MERGED}) AS DOUBLE)", "{a}"),
    AggKind.DISTINCT_AVG: (f"CAST(list_avg({_MERGED}) AS DOUBLE)", "{a}"),
    AggKind.PERCENTILE: ("list_sort(flatten(list({p0})))",
                         "CASE WHEN coalesce(len({a}), 0) = 0 THEN NULL "
                         "ELSE {a}[CAST(least(floor(len({a}) * {pct} / 100), len({a}) - 1) AS BIGINT) + 1] END"),
}


# An aggregation's value on one server's partial row, what a server ranks its groups by before trimming them
# (cuvee.query.group_trim): the aggregation's final value over that server's rows, as Pinot's TableResizer ranks a
# server's groups by each intermediate's final result. A distinct-value list gives its server's own count, sum or
# average (exact when a group's rows are on one server); a percentile's list is not ranked.
_ON_PARTIALS: dict[AggKind, str] = {
    AggKind.COUNT: "coalesce({p0}, 0)",
    AggKind.SUM: "CAST({p0} AS DOUBLE)",
    AggKind.MIN: "{p0}",
    AggKind.MAX: "{p0}",
    AggKind.AVG: "CAST({p0} AS DOUBLE) / nullif({p1}, 0)",
    AggKind.MIN_MAX_RANGE: "CAST({p1} AS DOUBLE) - CAST({p0} AS DOUBLE)",
    AggKind.DISTINCT_COUNT: "coalesce(len({p0}), 0)",
    AggKind.DISTINCT_COUNT_HLL: "coalesce(len({p0}), 0)",
    AggKind.DISTINCT_SUM: "CAST(list_sum({p0}) AS DOUBLE)",
    AggKind.DISTINCT_AVG: "CAST(list_avg({p0}) AS DOUBLE)",
}


# An aggregation computed in one step over the rows (``QueryPlan.whole_sql``): its _FINALS aggregate over a single
# partial, written over the partial templates ``{P<i>}`` (a merge of one partial row is that row). The scalar step
# is the same as after a merge, so both plans give one answer of the same types.
_WHOLE: dict[AggKind, str] = {
    AggKind.COUNT: "CAST(coalesce({P0}, 0) AS BIGINT)",
    AggKind.SUM: "CAST({P0} AS DOUBLE)",
    AggKind.MIN: "{P0}",
    AggKind.MAX: "{P0}",
    AggKind.AVG: "CAST({P0} AS DOUBLE) / nullif({P1}, 0)",
    AggKind.MIN_MAX_RANGE: "CAST({P1} AS DOUBLE) - CAST({P0} AS DOUBLE)",
    AggKind.DISTINCT_COUNT: "CAST(coalesce(len({P0}), 0) AS INTEGER)",
    AggKind.DISTINCT_COUNT_HLL: "CAST(coalesce(len({P0}), 0) AS BIGINT)",
    AggKind.DISTINCT_SUM: "CAST(list_sum({P0}) AS DOUBLE)",
    AggKind.DISTINCT_AVG: "CAST(list_avg({P0}) AS DOUBLE)",
    AggKind.PERCENTILE: "list_sort({P0})",
}
# A single-value column's distinct aggregations in one step without building the list of its values (a
# DISTINCTCOUNT of 1M UserIDs: ~45 ms as a list, ~23 ms as count(DISTINCT)); NULLs are skipped by both.
_WHOLE_SINGLE_VALUE: dict[AggKind, str] = {
    AggKind.DISTINCT_COUNT: "CAST(count(DISTINCT {x}) AS INTEGER)",
    AggKind.DISTINCT_COUNT_HLL: "CAST(count(DISTINCT {x}) AS BIGINT)",
    AggKind.DISTINCT_SUM: "CAST(sum(DISTINCT {x}) AS DOUBLE)",
    AggKind.DISTINCT_AVG: "CAST(avg(DISTINCT {x}) AS DOUBLE)",
}
DOCS_TOTAL_COLUMN = "__docs_total"  # a one-step answer's rows passing WHERE, the same on every row


# Final steps Arrow computes as DuckDB's _FINALS do: what ``cuvee.query.execute.merge_partials`` knows. A distinct
# count of the servers' distinct-value lists is one hash pass over their values in Arrow: DuckDB's
# ``list_unique(flatten(list(...)))`` over one group's 730,000 values from 2 servers took ~380 ms, Arrow ~35 ms.
_SIMPLE_MERGES = {AggKind.COUNT: "count", AggKind.SUM: "sum", AggKind.MIN: "min", AggKind.MAX: "max",
                  AggKind.AVG: "avg", AggKind.DISTINCT_COUNT: "distinctcount"}


def cheap_merge(simple: tuple[tuple[str, tuple[str, ...]], ...] | None) -> bool:
    """Whether a one-row Arrow merge (``QueryPlan.simple_merge``) reads one number per server and column: not a
    distinct count's, whose partials hold every distinct value a server saw."""
    return simple is not None and all(kind != "distinctcount" for kind, _ in simple)


class QueryKind(enum.Enum):
    """SELECTION returns rows; AGGREGATION one row of aggregates; GROUP_BY one row per group (also DISTINCT)."""

    SELECTION = "selection"
    AGGREGATION = "aggregation"
    GROUP_BY = "group_by"


@dataclass(frozen=True)
class QueryPlan:
    """What the broker sends to servers and how it merges their answers. ``column_names`` are Pinot's names.

    Pinot's numDocsScanned (rows passing WHERE) comes from the same scan where it can: an aggregation with a WHERE
    adds ``count(*) AS <docs_column>`` to its server step, which the server sums and drops. A selection with a
    WHERE cannot count in the same query (its LIMIT stops early), so ``docs_scanned_sql`` counts in a second one.
    Both are None without a WHERE: the count is then every row of the segments.
    """

    table: str
    kind: QueryKind
    server_sql: str
    final_sql: str
    docs_scanned_sql: str | None
    docs_column: str | None
    column_names: tuple[str, ...]
    limit: int | None
    offset: int
    options: Mapping[str, str] = field(default_factory=dict)
    # the dimension tables LOOKUP reads: each server registers each one's rows as its relation (``Lookup``)
    lookups: tuple[Lookup, ...] = ()
    # A one-row aggregation whose every column is COUNT, SUM, MIN, MAX or AVG of partials: (kind, partial
    # columns) per answer column, merged in Arrow without DuckDB (``cuvee.query.execute``); None otherwise.
    simple_merge: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    # A GROUP BY's bound on the groups each server sends: how it ranks them, and whether the query may be trimmed
    # (``cuvee.query.group_trim``); None for other kinds.
    group_trim: GroupTrim | None = None
    # A selection whose ORDER BY terms are each a partial column, as (column, descending, NULLs first) (none
    # without ORDER BY): merged in Arrow without DuckDB (``cuvee.query.execute``); None otherwise.
    selection_order: tuple[tuple[str, bool, bool], ...] | None = None
    # A selection with ORDER BY … LIMIT whose SELECT list reads columns WHERE and ORDER BY do not: the SQL that
    # picks the rows of the server's answer by their positions in ``cuvee_segments`` (``ROW_COLUMN``), so that a
    # server may read the other columns of those rows only (late materialisation: ``SELECT * … ORDER BY EventTime
    # LIMIT 10`` over 10M ClickBench rows read every column of every row that passed WHERE and took 5 s); None
    # otherwise.
    top_sql: str | None = None
    # An aggregation the final step answers from the rows in one statement, for a query whose segments are all on
    # one server: that server's answer is the final one (no partials shipped, no second aggregation at the broker;
    # distinct counts without lists of values). Over ``cuvee_segments`` as ``server_sql``; its answer carries
    # ``DOCS_TOTAL_COLUMN`` when the query has a WHERE. None for selections and one-row merges done in Arrow.
    whole_sql: str | None = None
    # The rows passing WHERE counted alone (None without a WHERE): what a one-step answer left without rows (by
    # HAVING, LIMIT 0 or OFFSET) reports as numDocsScanned
    count_sql: str | None = None
    # Column -> this plan with every single-value distinct count of that bare column counted on each server and
    # summed (``count(DISTINCT x)`` per server, no values shipped): right only when no value of the column is on
    # two of the servers asked, which the broker proves from the segments' partitions
    # (``cuvee.broker.partitioned_distinct``) before it sends it.
    disjoint: Mapping[str, QueryPlan] = field(default_factory=dict)
    # What of WHERE segment metadata can rule out (``cuvee.pruning``): sent to the servers, which skip the committed
    # segments whose min/max, partitions or bloom filters prove no row passes; None: nothing to prune by
    prune_filter: Predicate | None = None
    # A selection without ORDER BY: any LIMIT rows answer it, so a server's full answer reports its rows as
    # numDocsScanned (Pinot stops scanning there too) instead of counting every row passing WHERE again
    unordered_selection: bool = False


def plan_sql(sql: str, resolve: TableResolver) -> QueryPlan:
    """Parse, validate and plan ``sql`` (QueryError with Pinot's code on failure), with the variants its distinct
    counts allow when their column is partitioned (``QueryPlan.disjoint``)."""
    try:
        parsed = parse_query(sql, resolve)
        columns = _distinct_counted_columns(parsed)
        plan = plan_query(parsed)
        if not columns or plan.kind is QueryKind.SELECTION:
            return plan
        variants = {column: plan_query(parse_query(sql, resolve), disjoint=column) for column in columns}
        return dataclasses.replace(plan, disjoint=variants)
    except RecursionError:  # an expression too deep for the planner's recursive steps
        raise sql_error("the query is nested too deeply to plan") from None


def _distinct_counted_columns(parsed: ParsedQuery) -> list[str]:
    """The bare columns the query's single-value distinct counts (``COUNT(DISTINCT x)``, ``DISTINCTCOUNT(x)``) read."""
    select = parsed.select
    found: list[str] = []
    for expression in [*select.expressions, *([select.args["having"]] if select.args.get("having") else []),
                       *(select.args["order"].expressions if select.args.get("order") else [])]:
        for _, call in _aggregates_in(expression):
            if _disjoint_count(call) and call.arg.name not in found:  # type: ignore[union-attr]
                found.append(call.arg.name)  # type: ignore[union-attr]
    return found


def _disjoint_count(call: AggregateCall, column: str | None = None) -> bool:
    """Whether ``call`` is a single-value distinct count of a bare column (``column``, when given)."""
    return call.kind is AggKind.DISTINCT_COUNT and call.spec is None and not call.multi_value \
        and isinstance(call.arg, exp.Column) and (column is None or call.arg.name == column)


def plan_query(parsed: ParsedQuery, disjoint: str | None = None) -> QueryPlan:
    """``parsed`` planned; ``disjoint``: a column whose values no two servers share (``QueryPlan.disjoint``)."""
    select = parsed.select
    items = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    names = parsed.names
    by_alias = {alias: items[i] for i, alias in enumerate(parsed.aliases) if alias}
    limit, offset = _limit_offset(select)
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if where is not None and _aggregates_in(where.this):
        raise sql_error("aggregations are not allowed in WHERE")
    having = select.args.get("having")
    order = list(select.args["order"].expressions) if select.args.get("order") else []
    group = _group_expressions(select, items, by_alias)
    has_aggregates = any(_aggregates_in(e) for e in [*items, *(o.this for o in order)]) or having is not None
    _single_value_arguments([*items, *(o.this for o in order), *([having.this] if having else [])],
                            parsed.table.multi_value_columns)
    source = SERVER_RELATION
    selection_order: tuple[tuple[str, bool, bool], ...] | None = None
    top_sql: str | None = None
    if not group and not has_aggregates:
        limit = DEFAULT_LIMIT if limit is None else limit
        kind, server, final, selection_order = _plan_selection(items, names, by_alias, order, where_sql, limit,
                                                               offset)
        top_sql = _plan_top_rows(items, by_alias, order, where, where_sql, limit + offset)
        simple = trim = whole = None
    else:
        kind = QueryKind.GROUP_BY if group else QueryKind.AGGREGATION
        if kind is QueryKind.GROUP_BY and limit is None:
            limit = DEFAULT_LIMIT
        source = _multi_value_groups(group, parsed.table.multi_value_columns, where_sql)
        kind, server, final, simple, trim, whole = _plan_aggregation(
            kind, items, names, by_alias, group, having, order, None if source != SERVER_RELATION else where_sql,
            limit, offset, source, disjoint)
    docs_scanned = docs_column = None
    count_sql = f"SELECT count(*) AS numDocsScanned FROM {SERVER_RELATION} WHERE {where_sql}" if where_sql else None
    if where_sql and (kind is QueryKind.SELECTION or source != SERVER_RELATION):  # unnested rows are not docs
        docs_scanned = count_sql
    elif where_sql:
        docs_column = DOCS_COLUMN
    return QueryPlan(table=parsed.table.name, kind=kind, server_sql=server, final_sql=final,
                     docs_scanned_sql=docs_scanned, docs_column=docs_column, column_names=names, limit=limit, offset=offset,
                     options=dict(parsed.options), lookups=parsed.lookups,
                     simple_merge=simple if kind is QueryKind.AGGREGATION else None,
                     group_trim=trim if kind is QueryKind.GROUP_BY else None, selection_order=selection_order,
                     top_sql=top_sql,
                     # a one-row merge in Arrow costs less than the longer statement (and a bare COUNT(*) is
                     # answered from row counts); not a distinct count's, which ships each server's values
                     whole_sql=whole if kind is QueryKind.GROUP_BY or (whole and not cheap_merge(simple)) else None,
                     count_sql=count_sql, prune_filter=from_where(where.this) if where is not None else None,
                     unordered_selection=kind is QueryKind.SELECTION and not order)


def _multi_value_groups(group: list[exp.Expression], multi_value: frozenset[str], where_sql: str | None) -> str:
    """What the server step groups over: its segments, or — when a GROUP BY key is a multi-value column — the rows
    that pass WHERE with that column unnested, so each of a row's values makes (or joins) a group of its own, as
    Pinot groups a multi-value column; several such keys group by every combination of their values."""
    keys = []
    for expr in group:
        used = {c.name for c in expr.find_all(exp.Column)} & multi_value
        if not used:
            continue
        if not isinstance(expr, exp.Column):
            raise sql_error(f"GROUP BY on an expression of multi-value column(s) {', '.join(sorted(used))} is not "
                            "supported: group by the column itself")
        keys.append(expr.name)
    if not keys:
        return SERVER_RELATION
    source = f"(SELECT * FROM {SERVER_RELATION} WHERE {where_sql})" if where_sql else SERVER_RELATION
    for key in keys:  # a row with no values (NULL or empty) stays, in the NULL group, as a single-value NULL would
        values = f"CASE WHEN len({_quote(key)}) > 0 THEN {_quote(key)} ELSE [NULL] END"
        source = f"(SELECT * REPLACE (unnest({values}) AS {_quote(key)}) FROM {source})"
    return f"{source} AS {SERVER_RELATION}"  # named so, a LOOKUP's fact columns still resolve


def _limit_offset(select: exp.Select) -> tuple[int | None, int]:
    def literal(key: str) -> int | None:
        node = select.args.get(key)
        if node is None:
            return None
        value = node.expression if node.expression is not None else node.this
        if not isinstance(value, exp.Literal) or value.is_string or not value.this.isdigit():
            raise sql_error(f"{key.upper()} must be a non-negative integer")
        return int(value.this)

    return literal("limit"), literal("offset") or 0


def _aggregates_in(expr: exp.Expression) -> list[tuple[exp.Expression, AggregateCall]]:
    """The aggregation calls in ``expr`` (outermost only); nested aggregations raise 150."""
    found: list[tuple[exp.Expression, AggregateCall]] = []
    for node in expr.walk(prune=lambda n: classify_aggregate(n) is not None):
        call = classify_aggregate(node)
        if call is None:
            continue
        if any(classify_aggregate(n) for n in node.walk() if n is not node):  # in any argument
            raise sql_error(f"nested aggregations are not supported: {node.sql(dialect=DIALECT)}")
        found.append((node, call))
    return found


def _single_value_arguments(expressions: list[exp.Expression], multi_value: frozenset[str]) -> None:
    """Pinot has no multi-value forms of the aggregations that carry their own steps (LASTWITHTIME, MODE,
    ARRAY_AGG...): a multi-value column in their arguments is 150, where DuckDB would read a list as text."""
    if not multi_value:
        return
    for expression in expressions:
        for node, call in _aggregates_in(expression):
            used = sorted({c.name for c in node.find_all(exp.Column)} & multi_value) \
                if call.spec and not call.multi_value else []
            if used:
                raise sql_error(f"{call.name.upper()} takes single-value arguments; {', '.join(used)} is "
                                "multi-value")


def _resolve_reference(expr: exp.Expression, items: list[exp.Expression], by_alias: dict[str, exp.Expression],
                       clause: str) -> exp.Expression:
    """A GROUP BY / ORDER BY item: an ordinal or alias names a select item; anything else is itself."""
    if isinstance(expr, exp.Literal) and not expr.is_string:
        if not expr.this.isdigit() or not 1 <= int(expr.this) <= len(items):
            raise sql_error(f"{clause} position {expr.this} is not in the select list")
        return items[int(expr.this) - 1]
    return _substitute_aliases(expr, by_alias)


def _substitute_aliases(expr: exp.Expression, by_alias: dict[str, exp.Expression]) -> exp.Expression:
    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.this.args.get("quoted"):
            if node.name not in by_alias:
                raise QueryError(QueryErrorCode.UNKNOWN_COLUMN, f"Unknown columnName '{node.name}' found in the query")
            return by_alias[node.name].copy()
        return node

    return expr.transform(swap)


def _group_expressions(select: exp.Select, items: list[exp.Expression],
                       by_alias: dict[str, exp.Expression]) -> list[exp.Expression]:
    group_node = select.args.get("group")
    distinct = select.args.get("distinct") is not None
    group = [_resolve_reference(g, items, by_alias, "GROUP BY") for g in group_node.expressions] if group_node else []
    if distinct:
        if group or any(_aggregates_in(item) for item in items):
            raise sql_error("SELECT DISTINCT cannot be combined with GROUP BY or aggregations")
        group = list(items)
    for expr in group:
        if _aggregates_in(expr):
            raise sql_error(f"aggregations are not allowed in GROUP BY: {expr.sql(dialect=DIALECT)}")
    unique: list[exp.Expression] = []
    for expr in group:
        if expr not in unique:
            unique.append(expr)
    return unique


def _output_alias(expr: exp.Expression, items: list[exp.Expression],
                  by_alias: dict[str, exp.Expression]) -> int | None:
    """The select position an ORDER BY name refers to: output aliases win over table columns, as in SQL."""
    if isinstance(expr, exp.Column) and expr.name in by_alias:
        return next(i for i, item in enumerate(items) if item is by_alias[expr.name])
    return None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _plan_selection(items: list[exp.Expression], names: tuple[str, ...], by_alias: dict[str, exp.Expression],
                    order: list[exp.Ordered], where_sql: str | None, limit: int,
                    offset: int) -> tuple[QueryKind, str, str, tuple[tuple[str, bool, bool], ...] | None]:
    columns = [f"{item.sql(dialect=DIALECT)} AS __c{i}" for i, item in enumerate(items)]
    order_terms: list[str] = []
    for ordered in order:
        position = _output_alias(ordered.this, items, by_alias)
        if position is None:
            target = _resolve_reference(ordered.this, items, by_alias, "ORDER BY")
            position = items.index(target) if target in items else None
        if position is not None:
            ref = f"__c{position}"
        else:
            ref = f"__o{len(columns) - len(items)}"
            columns.append(f"{target.sql(dialect=DIALECT)} AS {ref}")
        order_terms.append(_ordered_sql(ordered, exp.column(ref)))
    order_sql = f" ORDER BY {', '.join(order_terms)}" if order_terms else ""
    server = f"SELECT {', '.join(columns)} FROM {SERVER_RELATION}"
    server += f" WHERE {where_sql}" if where_sql else ""
    server += f"{order_sql} LIMIT {limit + offset}"
    outputs = ", ".join(f"__c{i} AS {_quote(name)}" for i, name in enumerate(names))
    final = f"SELECT {outputs} FROM {PARTIALS_RELATION}{order_sql} LIMIT {limit} OFFSET {offset}"
    keys = [_PLAIN_ORDER.fullmatch(term) for term in order_terms]
    in_arrow = tuple((m.group(1), m.group(2) == " DESC", m.group(3) == " NULLS FIRST") for m in keys if m) \
        if all(keys) and len(set(names)) == len(names) else None
    return QueryKind.SELECTION, server, final, in_arrow


ROW_COLUMN = "__cuvee_row"  # a row's position in cuvee_segments, which a server adds for ``QueryPlan.top_sql``


def _plan_top_rows(items: list[exp.Expression], by_alias: dict[str, exp.Expression], order: list[exp.Ordered],
                   where: exp.Where | None, where_sql: str | None, rows: int) -> str | None:
    """``QueryPlan.top_sql`` for a selection: the positions of its first ``rows`` rows by its ORDER BY (the ORDER
    BY terms as expressions of the table's columns), or None when there is no ORDER BY or every column the SELECT
    list reads is read by WHERE or ORDER BY already (nothing to read late)."""
    if not order:
        return None
    terms, targets = [], []
    for ordered in order:
        position = _output_alias(ordered.this, items, by_alias)
        target = items[position] if position is not None else _resolve_reference(ordered.this, items, by_alias,
                                                                                  "ORDER BY")
        targets.append(target)
        terms.append(_ordered_sql(ordered, target.copy()))
    if not _column_names(items) - _column_names(targets + ([where.this] if where is not None else [])):
        return None
    sql = f"SELECT {ROW_COLUMN} FROM {SERVER_RELATION}"
    sql += f" WHERE {where_sql}" if where_sql else ""
    return f"{sql} ORDER BY {', '.join(terms)} LIMIT {rows}"


def _column_names(expressions: list[exp.Expression]) -> set[str]:
    """The table columns ``expressions`` read, in lower case (a star reads every one: never read early)."""
    names: set[str] = set()
    for expression in expressions:
        for node in expression.walk():
            if isinstance(node, exp.Star):
                names.add("*")
            elif isinstance(node, exp.Column):
                names.add(node.name.lower())
    return names


# A bare partial column; without NULLS FIRST or LAST, NULLs sort last either way (DuckDB's default)
_PLAIN_ORDER = re.compile(r"(__[co]\d+)( ASC| DESC)?( NULLS FIRST| NULLS LAST)?")


def _ordered_sql(ordered: exp.Ordered, target: exp.Expression) -> str:
    copy = ordered.copy()
    copy.set("this", target)
    return copy.sql(dialect=DIALECT)


class _Merger:
    """Collects the partials the servers compute and rewrites expressions over the merged columns."""

    def __init__(self, group: list[exp.Expression], disjoint: str | None = None) -> None:
        self.group = group
        self.disjoint = disjoint  # a column whose values no two servers share: its distinct counts are summed
        self.partials: list[str] = []
        self.aggregates: list[str] = []
        self.wholes: list[str] = []  # each of ``aggregates`` in one step over the rows (``_WHOLE``)
        self.finals: list[tuple[int, str]] = []
        self.simple: dict[int, tuple[str, tuple[str, ...]]] = {}  # final index -> (kind, partial columns)
        self.on_partials: dict[str, str | None] = {}  # __f<k> -> its value on one partial row (None: unknown)

    def partial(self, template: str, call: AggregateCall) -> str:
        arg = "*" if call.arg is None else call.arg.sql(dialect=DIALECT)
        return self._partial_column(template.format(x=arg))

    def _partial_column(self, sql: str) -> str:
        """The partial column computing ``sql`` (added once: two aggregations of one partial share it)."""
        if sql not in self.partials:
            self.partials.append(sql)
        return f"__p{self.partials.index(sql)}"

    def final_column(self, call: AggregateCall) -> exp.Expression:
        if call.spec is not None:
            return self._spec_column(call.spec)
        if self.disjoint is not None and _disjoint_count(call, self.disjoint):
            partial = f"count(DISTINCT {call.arg.sql(dialect=DIALECT)})"  # type: ignore[union-attr]
            column = self._spec_column(MergeSpec((partial,), _SUMMED_COUNT, f"CAST({partial} AS INTEGER)",
                                                 on_partial="{p0}"))
            self.simple[int(column.name[3:])] = ("countsum", (f"__p{self.partials.index(partial)}",))
            return column
        templates = _MV_PARTIALS[call.kind] if call.multi_value else _PARTIALS[call.kind]
        refs = {f"p{i}": self.partial(t, call) for i, t in enumerate(templates)}
        pct = "" if call.percentile is None else repr(call.percentile)
        aggregate, scalar = _FINALS[call.kind]
        aggregate = aggregate.format(**refs)
        index = self._final(aggregate, self._whole(call, templates), scalar.replace("{pct}", pct))
        if call.kind in _SIMPLE_MERGES:
            self.simple[index] = (_SIMPLE_MERGES[call.kind], tuple(refs[f"p{i}"] for i in range(len(refs))))
        partial = _ON_PARTIALS.get(call.kind) if scalar == "{a}" else None
        self.on_partials[f"__f{index}"] = partial.format(**refs) if partial is not None else None
        return exp.column(f"__f{index}")

    def _spec_column(self, spec: MergeSpec) -> exp.Expression:
        """An aggregation that carries its own steps (``MergeSpec``: Pinot's LASTWITHTIME, MODE, FUNNEL_COUNT...)."""
        refs = {f"p{i}": self._partial_column(sql) for i, sql in enumerate(spec.partials)}
        index = self._final(fill(spec.final, refs), spec.whole, spec.scalar)
        self.on_partials[f"__f{index}"] = fill(spec.on_partial, refs) if spec.on_partial is not None else None
        return exp.column(f"__f{index}")

    def _final(self, aggregate: str, whole: str, scalar: str) -> int:
        """The index of the final column that is ``scalar`` over ``aggregate`` (added once: the same call twice in a
        query is merged once)."""
        if aggregate not in self.aggregates:
            self.aggregates.append(aggregate)
            self.wholes.append(whole)
        step = (self.aggregates.index(aggregate), scalar)
        if step not in self.finals:
            self.finals.append(step)
        return self.finals.index(step)

    @staticmethod
    def _whole(call: AggregateCall, templates: tuple[str, ...]) -> str:
        arg = "*" if call.arg is None else call.arg.sql(dialect=DIALECT)
        direct = None if call.multi_value else _WHOLE_SINGLE_VALUE.get(call.kind)
        if direct is not None:
            return direct.format(x=arg)
        return _WHOLE[call.kind].format(**{f"P{i}": t.format(x=arg) for i, t in enumerate(templates)})

    def hidden_key(self, lookup: exp.Expression, facts: frozenset[str], where: str) -> exp.Expression:
        """A LOOKUP outside the aggregations whose join values read only GROUP BY keys: a function of the group, so
        the servers compute it as one more group key (it splits no group) and the broker, which holds no dimension
        table, merges it like the others."""
        keys = {g.name for g in self.group if isinstance(g, exp.Column)}
        missing = sorted(facts - keys)
        if not self.group or missing:
            reason = f"column(s) {', '.join(missing)} are not GROUP BY keys" if self.group else "there is no GROUP BY"
            raise sql_error(f"a LOOKUP in {where} outside an aggregation must read only GROUP BY key columns for its "
                            f"join values ({reason}): group by them, or by the LOOKUP itself")
        if lookup not in self.group:
            self.group.append(lookup.copy())
        return exp.column(f"__g{self.group.index(lookup)}")

    def rewrite(self, expr: exp.Expression, where: str) -> exp.Expression:
        """``expr`` over merged columns: group keys become ``__g<i>``, aggregations ``__f<k>``, a LOOKUP over group
        keys a hidden group key (``hidden_key``)."""

        def swap(node: exp.Expression) -> exp.Expression:
            if node in self.group:
                return exp.column(f"__g{self.group.index(node)}")
            facts = lookup_fact_columns(node)
            if facts is not None:
                return self.hidden_key(node, facts, where)
            call = classify_aggregate(node)
            if call is not None:
                return self.final_column(call)
            return node

        _aggregates_in(expr)  # reject nested aggregations before rewriting
        result = expr.transform(swap)
        for column in result.find_all(exp.Column):
            if column.this.args.get("quoted"):
                raise sql_error(f"column '{column.name}' in {where} must be in GROUP BY or inside an aggregation")
        return result


def _plan_aggregation(kind: QueryKind, items: list[exp.Expression], names: tuple[str, ...],
                      by_alias: dict[str, exp.Expression], group: list[exp.Expression], having: exp.Having | None,
                      order: list[exp.Ordered], where_sql: str | None, limit: int | None,
                      offset: int, source: str = SERVER_RELATION, disjoint: str | None = None
                      ) -> tuple[QueryKind, str, str, tuple[tuple[str, tuple[str, ...]], ...] | None,
                                 GroupTrim | None, str]:
    merger = _Merger(group, disjoint)
    outputs = [merger.rewrite(item, "the select list") for item in items]
    having_sql = None
    if having is not None:
        having_sql = merger.rewrite(_substitute_aliases(having.this, by_alias), "HAVING").sql(dialect=DIALECT)
    order_terms = []
    merged_order: list[exp.Ordered] = []  # the ORDER BY over merged columns, for the servers' ranking
    for ordered in order:
        target = ordered.this
        position = _output_alias(target, items, by_alias)
        if position is not None:
            order_terms.append(_ordered_sql(ordered, exp.column(target.name, quoted=True)))
            merged = outputs[position]
        else:
            resolved = _resolve_reference(target, items, by_alias, "ORDER BY")
            merged = merger.rewrite(resolved, "ORDER BY")
            order_terms.append(_ordered_sql(ordered, merged))
        term = ordered.copy()
        term.set("this", merged.copy())
        merged_order.append(term)
    trim = None
    if group:
        rows = (limit or 0) + offset
        merged_by = {f"__f{i}": (kind, columns[0]) for i, (kind, columns) in merger.simple.items()
                     if len(columns) == 1 and merger.finals[i][1] == "{a}"}
        trim, breakers = plan_trim(merged_order, len(group), merger.on_partials, having is not None, rows,
                                   merged_by)
        order_terms += [b.sql(dialect=DIALECT) for b in breakers]
    keys = [f"{g.sql(dialect=DIALECT)} AS __g{i}" for i, g in enumerate(group)]
    partials = [f"{p} AS __p{i}" for i, p in enumerate(merger.partials)]
    docs = [f"count(*) AS {DOCS_COLUMN}"] if where_sql else []  # numDocsScanned from this scan (see QueryPlan)
    server = f"SELECT {', '.join(keys + partials + docs) or 'count(*) AS __rows'} FROM {source}"
    server += f" WHERE {where_sql}" if where_sql else ""
    server += f" GROUP BY {', '.join(str(i + 1) for i in range(len(group)))}" if group else ""
    group_cols = [f"__g{i}" for i in range(len(group))]
    aggregates = [f"{aggregate} AS __a{i}" for i, aggregate in enumerate(merger.aggregates)]
    inner = f"SELECT {', '.join(group_cols + aggregates) or 'count(*) AS __rows'} FROM {PARTIALS_RELATION}"
    inner += f" GROUP BY {', '.join(group_cols)}" if group_cols else ""
    scalars = [f"{fill(scalar, {'a': f'__a{a}'})} AS __f{i}" for i, (a, scalar) in enumerate(merger.finals)]
    middle = f"SELECT {', '.join(group_cols + scalars) or '1 AS __one'} FROM ({inner}) AS __aggregated"
    select_list = ", ".join(f"{o.sql(dialect=DIALECT)} AS {_quote(n)}" for o, n in zip(outputs, names))
    tail = f" WHERE {having_sql}" if having_sql else ""  # HAVING, ORDER BY, LIMIT: the same after either step
    tail += f" ORDER BY {', '.join(order_terms)}" if order_terms else ""
    tail += f" LIMIT {limit}" if limit is not None else ""
    tail += f" OFFSET {offset}" if offset else ""
    final = f"SELECT {select_list} FROM ({middle}) AS __merged{tail}"
    whole = _whole_sql(merger, keys, group_cols, scalars, select_list, source, where_sql, len(group)) + tail
    return kind, server, final, _simple_merge(merger, outputs, having_sql, limit, offset), trim, whole


def _whole_sql(merger: _Merger, keys: list[str], group_cols: list[str], scalars: list[str], select_list: str,
               source: str, where_sql: str | None, groups: int) -> str:
    """The aggregation in one step over the rows, up to its HAVING (``QueryPlan.whole_sql``): the final step's
    shape over ``_WHOLE`` aggregates instead of merged partials, with the rows that passed WHERE on every answer
    row (``DOCS_TOTAL_COLUMN``, summed over every group before HAVING, ORDER BY and LIMIT cut any)."""
    aggregates = [f"{whole} AS __a{i}" for i, whole in enumerate(merger.wholes)]
    docs = [f"count(*) AS {DOCS_COLUMN}"] if where_sql else []
    inner = f"SELECT {', '.join(keys + aggregates + docs) or 'count(*) AS __rows'} FROM {source}"
    inner += f" WHERE {where_sql}" if where_sql else ""
    inner += f" GROUP BY {', '.join(str(i + 1) for i in range(groups))}" if groups else ""
    total = []
    if where_sql:
        total = [f"CAST(sum({DOCS_COLUMN}) OVER () AS BIGINT) AS {DOCS_TOTAL_COLUMN}" if groups
                 else f"{DOCS_COLUMN} AS {DOCS_TOTAL_COLUMN}"]
    middle = f"SELECT {', '.join(group_cols + scalars + total) or '1 AS __one'} FROM ({inner}) AS __aggregated"
    shown = f"{select_list}, {DOCS_TOTAL_COLUMN}" if where_sql else select_list
    return f"SELECT {shown} FROM ({middle}) AS __merged"


def _simple_merge(merger: _Merger, outputs: list[exp.Expression], having_sql: str | None, limit: int | None,
                  offset: int) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """Each answer column's (kind, partials) when every one is a bare COUNT/SUM/MIN/MAX/AVG/DISTINCTCOUNT and nothing filters
    or skips the one row; else None."""
    if merger.group or having_sql or offset or limit == 0:
        return None
    simple = []
    for output in outputs:
        if not isinstance(output, exp.Column) or not output.name.startswith("__f"):
            return None
        index = int(output.name[3:])
        if index not in merger.simple or merger.finals[index][1] != "{a}":
            return None
        simple.append(merger.simple[index])
    return tuple(simple)

