"""``EXPLAIN PLAN FOR <query>``: our plan of a single-stage query in the shape of Pinot's answer.

Pinot answers a table of operators — ``Operator`` (STRING), ``Operator_Id`` and ``Parent_Id`` (INT) — where each
operator feeds its parent: ``BROKER_REDUCE`` (id 1, parent 0) over a ``COMBINE_...`` (2) over each server plan,
which starts with ``PLAN_START(numSegmentsForThisPlan:N)`` (ids -1) and goes down to the segments. Our servers run
one DuckDB statement over the union of their segments, so a plan is described as:

- ``BROKER_REDUCE(limit:…,offset:…,merge:…)``: what the broker does with the servers' answers: merge their partial
  aggregates in its final SQL (``merge:partials``), in Arrow (``merge:arrow``: one-row COUNT/SUM/MIN/MAX/AVG, or a
  selection sorted by its columns), or nothing, when one server answers the whole query (``merge:none``);
- ``COMBINE_SELECT`` / ``COMBINE_AGGREGATE`` / ``COMBINE_GROUP_BY(servers:N)``: the servers' answers gathered;
- per table half (a hybrid table has two): ``PLAN_START(numSegmentsForThisPlan:N)``, then ``SERVER_<KIND>`` with
  the SQL each server runs (``sql:``; ``ROW_COUNTS`` for a bare COUNT(*) answered from row counts) and, for a
  hybrid table's half, the rows of its side of the time boundary (``timeFilter:EventTime<='2013-07-14 00:00:00'``,
  in the time column's own format), above
  ``SEGMENTS(committed:…,consuming:…,servers:…)``: where the routing sends the segments now.

The text of each operator is ours; only the shape is Pinot's. Pure: the broker hands in the routing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from cuvee.query.rewrite import COUNT_ROWS_SERVER_SQL, QueryKind, QueryPlan

COLUMN_NAMES = ("Operator", "Operator_Id", "Parent_Id")
_EXPLAIN = re.compile(r"^(?P<sets>\s*(?:SET\s+[^;]*;\s*)*)EXPLAIN\s+PLAN\s+FOR\s+", re.IGNORECASE)


def explained_query(sql: str) -> str | None:
    """The query an ``EXPLAIN PLAN FOR`` statement explains (its leading ``SET`` statements kept), or None when
    ``sql`` is no such statement."""
    match = _EXPLAIN.match(sql)
    if match is None:
        return None
    return match.group("sets") + sql[match.end():]


@dataclass(frozen=True)
class HalfRouting:
    """Where one table half's segments are read now: server -> segments, and which of them are consuming."""

    table: str
    servers: dict[str, tuple[str, ...]]
    consuming: frozenset[str]
    unavailable: int = 0
    time_filter: str | None = None  # a hybrid table's half: the rows of its side of the boundary (``TimeFilter.text``)


def _merge(plan: QueryPlan, whole: bool) -> str:
    if whole:
        return "none"
    if plan.simple_merge is not None or plan.selection_order is not None:
        return "arrow"
    return "partials" if plan.kind is not QueryKind.SELECTION else "sort"


def explain_table(plan: QueryPlan, halves: Sequence[HalfRouting], whole: bool) -> pa.Table:
    """The EXPLAIN answer for ``plan`` routed as ``halves`` (``whole``: one server answers it in one step)."""
    kind = {QueryKind.SELECTION: "SELECT", QueryKind.AGGREGATION: "AGGREGATE", QueryKind.GROUP_BY: "GROUP_BY"}[
        plan.kind]
    reduce = [f"limit:{plan.limit}"] if plan.limit is not None else []
    reduce += [f"offset:{plan.offset}"] if plan.offset else []
    reduce.append(f"merge:{_merge(plan, whole)}")
    servers = sorted({server for half in halves for server in half.servers})
    rows: list[tuple[str, int, int]] = [
        (f"BROKER_REDUCE({','.join(reduce)})", 1, 0),
        (f"COMBINE_{kind}(servers:{len(servers)})", 2, 1),
    ]
    next_id = 3
    for half in halves:
        segments = [s for names in half.servers.values() for s in names]
        consuming = sum(1 for s in segments if s in half.consuming)
        rows.append((f"PLAN_START(numSegmentsForThisPlan:{len(segments)})", -1, -1))
        sql = plan.whole_sql if whole and plan.whole_sql is not None else plan.server_sql
        server = "ROW_COUNTS" if sql == COUNT_ROWS_SERVER_SQL else f"sql:{sql}"
        bound = f",timeFilter:{half.time_filter}" if half.time_filter is not None else ""
        rows.append((f"SERVER_{kind}(table:{half.table}{bound},{server})", next_id, 2))
        detail = [f"committed:{len(segments) - consuming}", f"consuming:{consuming}"]
        detail += [f"unavailable:{half.unavailable}"] if half.unavailable else []
        detail.append(f"servers:{'|'.join(sorted(half.servers)) or 'none'}")
        rows.append((f"SEGMENTS({','.join(detail)})", next_id + 1, next_id))
        next_id += 2
    return pa.table({COLUMN_NAMES[0]: pa.array([r[0] for r in rows], pa.string()),
                     COLUMN_NAMES[1]: pa.array([r[1] for r in rows], pa.int32()),
                     COLUMN_NAMES[2]: pa.array([r[2] for r in rows], pa.int32())})
