"""Pinot's bounds on the groups a server sends: ``numGroupsLimit`` and the server-side trim of GROUP BY … ORDER BY.

A server answers a GROUP BY with one row of partial aggregates per group. Without a bound a high-cardinality
grouping ships every group to the broker, which merges them all to keep ten. Pinot bounds it twice, and so do we:

- **numGroupsLimit** (default 100,000; server config, query option): a server keeps at most that many groups and
  says ``numGroupsLimitReached``. Pinot stops making groups once a segment has that many; DuckDB computes every
  group, so here the server keeps the first ``numGroupsLimit`` of its ranking (below), or of DuckDB's output for
  a query that is not trimmed (any groups, as Pinot's are any: ranking them all would cost a sort of every group
  to ship fewer), and drops the rest. It says ``numGroupsLimitReached`` only when the limit is what dropped
  groups, not when a smaller trim size kept fewer anyway.
- **Server trim** (Pinot's ``minServerGroupTrimSize``, default 5,000; a value <= 0 turns it off): a query with
  ORDER BY keeps only the server's top ``max((LIMIT + OFFSET) * 5, minServerGroupTrimSize)`` groups by the query's
  ORDER BY evaluated on that server's partials.

How a server ranks its groups (``GroupTrim.order_sql``, over ``GROUPS_RELATION``):

- ORDER BY group keys (any expression of them, no aggregation): exactly, with the remaining keys appended as
  tie-breakers. A group cut on some server then has more than ``LIMIT + OFFSET`` kept groups ahead of it in that
  order at the broker too, so it can never be in the answer: trimming is **exact** (the broker's ORDER BY gets the
  same tie-breakers so that it never picks a half-merged group among ties).
- no ORDER BY (and no HAVING): as ORDER BY every group key, ascending. Any ``LIMIT`` groups may answer, but each
  must be whole: Pinot's servers keep whichever groups they met first, so a group one server kept and another cut
  comes back with a partial count. Ranked by keys, every server keeps the same first groups and the broker takes
  the first ``LIMIT + OFFSET`` of the same order, which no server cut (a group some server cut has at least the
  kept groups of that server ahead of it). Exact under both cuts, ``numGroupsLimit`` and the trim size, for a
  LIMIT + OFFSET up to ``numGroupsLimit``; ranked only up to ``KEY_RANKED_ROWS`` (a larger one is not ranked, as
  below). The other way, a second round asking every server for the chosen groups,
  costs one more call per server and query; ranking costs a top-N over a server's groups, and only when it has
  more than it keeps.
- ORDER BY COUNT, SUM, MIN, MAX, AVG, MINMAXRANGE, DISTINCTCOUNT (and its HLL, SUM and AVG forms) or
  expressions of them (and keys): on the server's partials (AVG as partial sum / partial count, a distinct count
  as the length of the server's distinct list: each aggregation's final value over that server's rows, as Pinot's
  TableResizer ranks), Pinot's approximate semantics on each server: a group whose rows are spread over servers
  can rank low on each and be cut everywhere, or be cut on one server and arrive short. Exact when each group's
  rows are on one server (one server, or a table partitioned on the keys); on several servers the broker makes
  the answer exact (``cuvee.query.exact_trim``: a second round when a server cut, bounded by ``RankBound`` when
  the first ORDER BY term is a bare COUNT, SUM, MIN or MAX; other rankings are not trimmed there at all), unless
  the query asks for Pinot's single round (``accurateGroupByWithOrderBy=false``).
- anything else (PERCENTILE…: the server's own percentile says little about the merged one) is not trimmed; nor
  is a query with HAVING (the broker filters merged groups, and the groups a trim keeps may all fail it, even when
  ordering by keys). They are not ranked at all.

``groupsTrimmed`` (Pinot 1.4's flag) is reported when a server trimmed and trimming was not exact (nor made exact
by the broker); an exact trim, like Pinot's "safe trim", is not reported. Pure: the server runs ``order_sql`` and applies ``cut``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.functions import DIALECT

GROUPS_RELATION = "cuvee_groups"  # a server's groups (its partial result), as ``GroupTrim.order_sql`` reads them
DEFAULT_NUM_GROUPS_LIMIT = 100_000  # Pinot's pinot.server.query.executor.num.groups.limit
DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE = 5_000  # Pinot's pinot.server.query.executor.min.server.group.trim.size
TRIM_FACTOR = 5  # Pinot keeps at least 5 × (LIMIT + OFFSET) groups
INT_MAX = 2**31 - 1  # Pinot's options are Java ints; the same bounds here
# the most LIMIT + OFFSET a GROUP BY without ORDER BY is ranked by key for: past the default numGroupsLimit a server
# cut sends fewer groups than asked anyway (and flags it), and a multi-stage leaf, which asks for every group, would
# pay a sort of them all at the broker for nothing
KEY_RANKED_ROWS = DEFAULT_NUM_GROUPS_LIMIT
WANTED_KEY = re.compile(r"__g[0-9]{1,4}")  # the key columns a second round's wanted groups name (the planner's)
NUM_GROUPS_LIMIT_OPTION = "numGroupsLimit"
# true (default): a trimmed GROUP BY … ORDER BY on several servers is made exact (cuvee.query.exact_trim); false:
# Pinot's single approximate round, reported as groupsTrimmed. Named after Pinot's accurateGroupByWithoutOrderBy.
ACCURATE_GROUP_BY_OPTION = "accurateGroupByWithOrderBy"
MIN_SERVER_GROUP_TRIM_SIZE_OPTION = "minServerGroupTrimSize"


COMBINED_BY = {"count": "sum", "countsum": "sum", "sum": "sum", "max": "max", "min": "min"}  # simple-merge kinds


@dataclass(frozen=True)
class RankBound:
    """What the broker needs to bound a trimmed group's merged ranking value (``cuvee.query.exact_trim``): the
    query's first ORDER BY term is a bare COUNT, SUM, MIN or MAX whose merged value ``combine``s (sum, max, min)
    the servers' values of partial column ``column``; ``non_negative``: every partial is >= 0 (a COUNT);
    ``single_term``: the ORDER BY has no other term, so groups that tie on it may answer in any order."""

    column: str
    combine: str
    descending: bool
    non_negative: bool
    single_term: bool


@dataclass(frozen=True)
class GroupTrim:
    """How a server ranks its groups when it keeps fewer than it has. ``rows`` is LIMIT + OFFSET when the query may
    be trimmed (ORDER BY evaluable on partials, no HAVING), else None (only ``numGroupsLimit`` cuts, and
    ``order_sql`` ranks nothing); ``exact``: the ranking is by group keys, so a trim cannot change the answer;
    ``bound``: for a trim that is not exact, how the broker makes its answer exact in a second round (None: the
    ranking gives it nothing to bound, so a query on several servers is not trimmed)."""

    order_sql: str
    rows: int | None
    exact: bool
    bound: RankBound | None = None


@dataclass(frozen=True)
class GroupCut:
    """What a server does with ``groups`` groups: keep the first ``keep`` of its ranking; the two flags for its
    statistics (``trimmed``: a trim, not the groups limit, made it keep fewer)."""

    keep: int
    limit_reached: bool
    trimmed: bool


@dataclass(frozen=True)
class GroupOptions:
    """The query options that override a server's defaults (None: the server's configuration decides)."""

    num_groups_limit: int | None = None
    min_server_group_trim_size: int | None = None


def trim_size(rows: int, min_trim_size: int) -> int:
    """Pinot's server trim size: enough groups beyond the answer's that partial rankings rarely miss one."""
    return max(rows * TRIM_FACTOR, min_trim_size)


def cut(groups: int, trim: GroupTrim, num_groups_limit: int, min_trim_size: int) -> GroupCut:
    """How many of a server's ``groups`` it sends: at most ``num_groups_limit``, and for a trimmable query at most
    the trim size (``min_trim_size`` <= 0: no trim). ``limit_reached`` only when the limit is what dropped groups: a
    trim size below it keeps fewer anyway (DuckDB computed every group, so the limit cost no group's rows)."""
    size = trim_size(trim.rows, min_trim_size) if trim.rows is not None and min_trim_size > 0 else None
    if size is not None and size < num_groups_limit:
        return GroupCut(min(groups, size), False, groups > size)
    return GroupCut(min(groups, num_groups_limit), groups > num_groups_limit, False)


def plan_trim(order: Sequence[exp.Ordered], keys: int, on_partials: Mapping[str, str | None], having: bool,
              rows: int, merged_by: Mapping[str, tuple[str, str]] | None = None) -> tuple[GroupTrim, list[exp.Ordered]]:
    """The ranking of a GROUP BY's groups on a server, and the tie-breakers the broker's ORDER BY must append.

    ``order`` is the query's ORDER BY over merged columns (``__g<i>`` keys, ``__f<k>`` aggregations);
    ``on_partials`` gives each ``__f<k>`` as SQL over one server row's partial columns, or None when it cannot be
    evaluated there; ``rows`` is LIMIT + OFFSET; ``merged_by``: the ``__f<k>`` that are one partial column merged
    by a simple kind (``count``, ``sum``, ``min``, ``max``, ``countsum``) -> (kind, partial column)."""
    if not order and not having and keys and rows <= KEY_RANKED_ROWS:
        # Any LIMIT groups may answer (SQL, and Pinot, promise no order), so the same ones everywhere: the first by
        # their keys. A server then keeps groups whole or not at all among the broker's first, as for ORDER BY keys.
        breakers = _tie_breakers([], keys)
        order_sql = f"SELECT * FROM {GROUPS_RELATION} ORDER BY {', '.join(b.sql(dialect=DIALECT) for b in breakers)}"
        return GroupTrim(order_sql=order_sql, rows=rows, exact=True), breakers
    server_terms = [_on_partials(ordered, on_partials) for ordered in order]
    trimmable = bool(order) and all(term is not None for term in server_terms) and not having
    if not trimmable:
        return GroupTrim(order_sql=f"SELECT * FROM {GROUPS_RELATION}", rows=None, exact=False), []
    exact = all(_keys_only(ordered.this) for ordered in order)
    ranked = [term for term in server_terms if term is not None]
    breakers = _tie_breakers(ranked, keys)
    terms = ", ".join(t.sql(dialect=DIALECT) for t in [*ranked, *breakers])
    order_sql = f"SELECT * FROM {GROUPS_RELATION} ORDER BY {terms}"
    bound = None if exact else _rank_bound(order, merged_by or {})
    return GroupTrim(order_sql=order_sql, rows=rows, exact=exact, bound=bound), (breakers if exact else [])


def _rank_bound(order: Sequence[exp.Ordered], merged_by: Mapping[str, tuple[str, str]]) -> RankBound | None:
    """The bound of the first ORDER BY term, when it is a bare aggregation merged by a simple kind."""
    first = order[0].this
    while isinstance(first, exp.Paren):
        first = first.this
    if not _merged_column(first, "__f") or first.name not in merged_by:
        return None
    kind, column = merged_by[first.name]
    if kind not in COMBINED_BY:
        return None
    return RankBound(column=column, combine=COMBINED_BY[kind], descending=bool(order[0].args.get("desc")),
                     non_negative=kind in ("count", "countsum"), single_term=len(order) == 1)


def _merged_column(node: exp.Expression, prefix: str) -> bool:
    """A planner's column (``__g<i>``/``__f<k>``: unquoted; the table's columns are quoted)."""
    return (isinstance(node, exp.Column) and not node.this.args.get("quoted") and node.name.startswith(prefix)
            and node.name[len(prefix):].isdigit())


def _keys_only(expr: exp.Expression) -> bool:
    return not any(_merged_column(node, "__f") for node in expr.walk())


def _on_partials(ordered: exp.Ordered, on_partials: Mapping[str, str | None]) -> exp.Ordered | None:
    """``ordered`` evaluated on one server's partial row, or None if an aggregation in it cannot be."""
    missing = False

    def swap(node: exp.Expression) -> exp.Expression:
        nonlocal missing
        if _merged_column(node, "__f"):
            sql = on_partials.get(node.name)
            if sql is None:
                missing = True
                return node
            return exp.paren(sqlglot.parse_one(sql, read=DIALECT))
        return node

    term = ordered.transform(swap)
    return None if missing else term


def _tie_breakers(terms: list[exp.Ordered], keys: int) -> list[exp.Ordered]:
    """Every group key the ranking does not already order by, ascending: a total order, the same on every server
    and at the broker."""
    present = {term.this.name for term in terms if _merged_column(term.this, "__g")}
    return [exp.Ordered(this=exp.column(f"__g{i}"), nulls_first=False) for i in range(keys)
            if f"__g{i}" not in present]


def group_options(options: Mapping[str, str]) -> GroupOptions:
    """``numGroupsLimit`` (1 to 2^31-1) and ``minServerGroupTrimSize`` (<= 0: no trim) from a query's options,
    keys in any case; a value that is not such an integer is 150, as for ``timeoutMs``."""
    limit = trim = None
    for key, value in options.items():
        if key.lower() == NUM_GROUPS_LIMIT_OPTION.lower():
            limit = _integer(NUM_GROUPS_LIMIT_OPTION, value, 1)
        elif key.lower() == MIN_SERVER_GROUP_TRIM_SIZE_OPTION.lower():
            trim = _integer(MIN_SERVER_GROUP_TRIM_SIZE_OPTION, value, -INT_MAX - 1)
    return GroupOptions(limit, trim)


def _integer(name: str, value: str, low: int) -> int:
    text = value.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 10 or not low <= int(text) <= INT_MAX:
        raise QueryError(QueryErrorCode.SQL_PARSING, f"{name} must be an integer from {low} to {INT_MAX}, "
                                                     f"got {value[:40]!r}")
    return int(text)
