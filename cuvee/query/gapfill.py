"""Pinot's GAPFILL: time buckets with no row for a time series get one, filled from the series' previous row or
with defaults, at the broker, over an answer the servers gave.

``GAPFILL(timeExpr, 'format', 'start', 'end', 'bucketSize'[, 'aggregationBucketSize'], FILL(col, 'FILL_PREVIOUS_
VALUE' | 'FILL_DEFAULT_VALUE') ..., TIMESERIESON(col1, ...))`` appears in the select list of one of Pinot's four
query shapes (``plan_gapfill``):

- select/gapfill: ``SELECT GAPFILL(...) AS t, k, v FROM table WHERE ... ORDER BY 1 LIMIT n``;
- aggregate/gapfill: ``SELECT GAPFILL(t, ...), k, v FROM (SELECT t, k, agg(...) AS v FROM table GROUP BY ...)``;
- gapfill/aggregate: ``SELECT t, SUM(v) FROM (SELECT GAPFILL(...) AS t, k, v FROM table ...) GROUP BY t``;
- aggregate/gapfill/aggregate: both subqueries.

The innermost query (``GapfillQuery.source_sql``, the GAPFILL call replaced by its time expression) runs as any
single-stage query. ``finish`` then walks the buckets from start (inclusive) to end (exclusive): a bucket keeps the
rows whose time equals its start, and every series (the TIMESERIESON values of any row before the end) without
such a row gets one — the bucket's time, the series' values, each FILL column's previous value in that series
(FILL_PREVIOUS_VALUE, when there is one, rows before the start included) and defaults elsewhere (0, false,
'', the epoch, an empty array). Pinot's order: bucket by bucket, a bucket's own rows as they came, then the filled
ones (series in the order first seen). With an aggregation over the gapfilled rows, each window of
``aggregationBucketSize`` takes its first bucket's time, and the outer query (its WHERE, GROUP BY, HAVING, ORDER BY
— by time when it has none — and LIMIT) runs over them with the planner's own aggregations.

Differences from Pinot: the gapfilled rows stop at the LIMIT (Pinot's own count of them is off by the series of each
bucket); a source row whose time falls inside a bucket but not on its start is skipped (Pinot stops reading that
bucket's rows there); at most ``MAX_BUCKETS`` buckets; an unknown GAPFILL argument is refused (150).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from cuvee.config.datetime_format import (
    TIME_UNIT_MS,
    DateTimeFormat,
    TimeFormatKind,
    parse_datetime_format,
    parse_granularity,
)
from cuvee.query.datetime_functions import strftime_of
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.execute import merge_partials, run_server_step, run_sql
from cuvee.query.functions import DIALECT, pinot_column_name
from cuvee.query.parse import TableInfo, split_query
from cuvee.query.rewrite import DEFAULT_LIMIT, plan_sql

GAPFILLED_RELATION = "__gapfilled"  # the gapfilled rows, as the outer aggregation reads them
MAX_BUCKETS = 100_000
_MENTION = re.compile(r"\bgap_?fill\s*\(", re.IGNORECASE)
_FILL_TYPES = ("FILL_PREVIOUS_VALUE", "FILL_DEFAULT_VALUE")


def mentions_gapfill(sql: str) -> bool:
    """Whether ``sql`` may call GAPFILL (a cheap look at the text before any parsing)."""
    return _MENTION.search(sql) is not None


def _bad(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


@dataclass(frozen=True)
class Gapfill:
    """What to fill: the time column of the source answer and its format, the buckets (millis), the FILL columns
    (name -> fills from the previous row), the series columns, and how many gapfilled rows to keep."""

    time_column: str
    time_format: DateTimeFormat
    start_ms: int
    end_ms: int
    bucket_ms: int
    window_ms: int
    fills: tuple[tuple[str, bool], ...]
    series: tuple[str, ...]
    limit: int

    @property
    def buckets(self) -> int:
        return int((self.end_ms - self.start_ms) / self.bucket_ms)


@dataclass(frozen=True)
class GapfillQuery:
    """A GAPFILL query's steps: the single-stage query answered first, the gapfill over its answer, then either a
    projection of the gapfilled columns (source name, answer name) or an aggregation over them (``post_sql``, over
    ``GAPFILLED_RELATION``); ``options`` are those its text sets."""

    source_sql: str
    gapfill: Gapfill
    projection: tuple[tuple[str, str], ...] | None = None
    post_sql: str | None = None
    options: tuple[tuple[str, str], ...] = ()


def _gapfill_item(select: exp.Select) -> tuple[int, exp.Anonymous] | None:
    """The select item that is a GAPFILL call (aliased or not), and its position; None without one."""
    found = None
    for i, item in enumerate(select.expressions):
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Anonymous) and inner.name.upper().replace("_", "") == "GAPFILL":
            if found is not None:
                raise _bad("a query may call GAPFILL once")
            found = (i, inner)
    return found


def _subquery(select: exp.Select) -> exp.Select | None:
    source = select.args.get("from_") or select.args.get("from")
    inner = source.this if source is not None else None
    if isinstance(inner, exp.Subquery) and isinstance(inner.this, exp.Select):
        return inner.this
    return None


def plan_gapfill(sql: str) -> GapfillQuery | None:
    """The steps of a GAPFILL query (None when ``sql`` calls no GAPFILL); a GAPFILL outside Pinot's shapes, or with
    bad arguments, is 150."""
    query, options = split_query(sql)
    if not isinstance(query, exp.Select):
        return None
    outer = query
    inner = _subquery(outer)
    if (hit := _gapfill_item(outer)) is not None:
        position, call = hit
        if inner is None:  # select/gapfill
            return _plan(outer, position, call, None, None, options)
        if _subquery(inner) is not None or _gapfill_item(inner) is not None:
            raise _bad("GAPFILL over a subquery reads one single-stage query")
        return _plan(inner, None, call, outer, None, options)  # aggregate/gapfill
    if inner is not None and (hit := _gapfill_item(inner)) is not None:
        position, call = hit
        innermost = _subquery(inner)
        if innermost is None:  # gapfill/aggregate
            return _plan(inner, position, call, None, outer, options)
        if _subquery(innermost) is not None:
            raise _bad("GAPFILL queries nest at most three SELECTs")
        return _plan(innermost, None, call, inner, outer, options)  # aggregate/gapfill/aggregate
    if any(isinstance(n, exp.Anonymous) and n.name.upper().replace("_", "") == "GAPFILL" for n in query.walk()):
        raise _bad("GAPFILL must be a select item of the query or of its FROM subquery (Pinot's gapfill shapes)")
    return None


def _plan(source: exp.Select, position: int | None, call: exp.Anonymous, gapfill_select: exp.Select | None,
          post: exp.Select | None, options: dict[str, str]) -> GapfillQuery:
    """``source``: the single-stage query (its GAPFILL item at ``position`` replaced by the time expression);
    ``gapfill_select``: the SELECT over the source answer holding GAPFILL, when it is not ``source``; ``post``:
    the aggregation over the gapfilled rows."""
    source = source.copy()
    holder = gapfill_select or source
    limit_select = holder
    time_expr = call.expressions[0] if call.expressions else None
    if time_expr is None:
        raise _bad("GAPFILL takes (timeExpression, format, start, end, bucketSize, FILL(...), TIMESERIESON(...))")
    if position is not None:  # the source computes the time expression where GAPFILL was
        item = source.expressions[position]
        name = item.alias if isinstance(item, exp.Alias) else pinot_column_name(time_expr)
        source.expressions[position] = exp.alias_(time_expr.copy(), name, quoted=True)
        time_column = name
    else:
        if not isinstance(time_expr, exp.Column):
            raise _bad("GAPFILL over a subquery takes a column of it as its time expression")
        time_column = time_expr.name
    projection = None
    if gapfill_select is not None:
        _check_gapfill_select(gapfill_select, time_column)
        projection = tuple(_projected(item, call) for item in gapfill_select.expressions)
    spec = _gapfill_spec(call, time_column, _limit(limit_select))
    post_sql = None
    if post is not None:
        outer = post.copy()
        outer.set("from_" if "from_" in outer.args else "from",
                  exp.From(this=exp.to_table(GAPFILLED_RELATION)))
        if not outer.args.get("order") and outer.args.get("group"):
            outer = outer.order_by(exp.column(spec.time_column, quoted=True)) \
                if _groups_by(outer, spec.time_column) else outer
        post_sql = outer.sql(dialect=DIALECT)
    return GapfillQuery(source.sql(dialect=DIALECT), spec, projection, post_sql, tuple(options.items()))


_GAPFILL_SELECT_ARGS = {"expressions", "from", "from_", "limit", "order"}  # what a SELECT over the source may hold


def _check_gapfill_select(select: exp.Select, time_column: str) -> None:
    """The GAPFILL select over a subquery (aggregate/gapfill shapes) holds its items, a LIMIT and at most an
    ORDER BY of the time column ascending (the order the gapfilled rows come in). Pinot applies a WHERE (and any
    ORDER BY) there to the gapfilled rows; those are refused (150) rather than dropped."""
    for key, value in select.args.items():
        if value and key not in _GAPFILL_SELECT_ARGS:
            clause = "WHERE" if key == "where" else key.rstrip("_").upper()
            raise _bad(f"{clause} in the GAPFILL select over a subquery is not supported (Pinot applies it to the "
                       f"gapfilled rows): put it in the subquery, or in a query over the GAPFILL select")
    order = select.args.get("order")
    for key in order.expressions if order is not None else ():
        target = key.this
        if isinstance(target, exp.Literal) and target.name.isdigit() and 1 <= int(target.name) <= len(
                select.expressions):
            target = select.expressions[int(target.name) - 1]
        elif isinstance(target, exp.Column) and not target.table:  # an alias of an item: that item
            target = next((item for item in select.expressions if isinstance(item, exp.Alias)
                           and item.alias.lower() == target.name.lower()), target)
        target = target.this if isinstance(target, exp.Alias) else target
        if isinstance(target, exp.Anonymous) and target.name.upper().replace("_", "") == "GAPFILL":
            target = target.expressions[0]
        if key.args.get("desc") or not (isinstance(target, exp.Column) and target.name.lower() == time_column.lower()):
            raise _bad("ORDER BY in the GAPFILL select over a subquery may only be its time column, ascending (the "
                       "gapfilled rows' order); put another order in a query over the GAPFILL select")


def _groups_by(select: exp.Select, column: str) -> bool:
    """Whether ``select`` groups by ``column`` (by name, alias or position): its rows then come in time order."""
    items = select.expressions
    for key in select.args["group"].expressions:
        if isinstance(key, exp.Literal) and key.name.isdigit() and 1 <= int(key.name) <= len(items):
            key = items[int(key.name) - 1]
        key = key.this if isinstance(key, exp.Alias) else key
        if isinstance(key, exp.Column) and key.name.lower() == column.lower():
            return True
    return False


def _projected(item: exp.Expression, call: exp.Anonymous) -> tuple[str, str]:
    """A select item over the source answer: (source column, output name)."""
    alias = item.alias if isinstance(item, exp.Alias) else None
    inner = item.this if isinstance(item, exp.Alias) else item
    if inner is call:
        inner = call.expressions[0]
    if not isinstance(inner, exp.Column):
        raise _bad(f"a GAPFILL query's select items over its subquery must be its columns, got "
                   f"{inner.sql(dialect=DIALECT)[:80]}")
    return inner.name, alias or inner.name


def _limit(select: exp.Select) -> int:
    node = select.args.get("limit")
    if node is None:
        return DEFAULT_LIMIT
    value = node.expression if node.expression is not None else node.this
    if not isinstance(value, exp.Literal) or value.is_string or not value.name.isdigit():
        raise _bad("LIMIT must be a non-negative integer")
    return int(value.name)


def _literal_text(node: exp.Expression, what: str) -> str:
    if isinstance(node, exp.Literal):
        return node.name
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name
    raise _bad(f"GAPFILL's {what} must be a literal, got {node.sql(dialect=DIALECT)[:80]}")


def _gapfill_spec(call: exp.Anonymous, time_column: str, limit: int) -> Gapfill:
    args = list(call.expressions)
    literals = [a for a in args[1:] if not isinstance(a, exp.Anonymous)]
    functions = [a for a in args[1:] if isinstance(a, exp.Anonymous)]
    if len(literals) not in (4, 5) or args[1:len(literals) + 1] != literals:
        raise _bad("GAPFILL takes (timeExpression, 'format', 'start', 'end', 'bucketSize'[, 'aggregationBucketSize'], "
                   "FILL(...)..., TIMESERIESON(...))")
    try:
        time_format = parse_datetime_format(_literal_text(literals[0], "format"))
        bucket = _granularity_ms(_literal_text(literals[3], "bucket size"))
        window = _granularity_ms(_literal_text(literals[4], "aggregation bucket size")) if len(literals) == 5 else bucket
    except ValueError as exc:
        raise _bad(f"GAPFILL: {exc}") from None
    if window % bucket or window < bucket:
        raise _bad("GAPFILL's aggregation bucket size must be a multiple of its bucket size")
    granularity_size = parse_granularity(_literal_text(literals[3], "bucket size"))[0]
    start, end = (_to_millis([_literal_text(n, what)], time_format)[0]
                  for n, what in ((literals[1], "start"), (literals[2], "end")))
    if start is None or end is None:
        raise _bad("GAPFILL's start and end must be times in its format")
    start, end = start // granularity_size * granularity_size, end // granularity_size * granularity_size
    if end <= start:
        raise _bad("GAPFILL's end must be after its start")
    if (end - start) // bucket > MAX_BUCKETS:
        raise _bad(f"GAPFILL would make {(end - start) // bucket} buckets; at most {MAX_BUCKETS}")
    fills: list[tuple[str, bool]] = []
    series: tuple[str, ...] | None = None
    for function in functions:
        name = function.name.upper()
        if name == "FILL":
            fills.append(_fill(function))
        elif name == "TIMESERIESON":
            if series is not None or not function.expressions or \
                    not all(isinstance(c, exp.Column) for c in function.expressions):
                raise _bad("GAPFILL takes one TIMESERIESON(column, ...) of columns")
            series = tuple(c.name for c in function.expressions)
        else:
            raise _bad(f"GAPFILL does not take {function.name}(...): only FILL(...) and TIMESERIESON(...)")
    if series is None:
        raise _bad("GAPFILL requires TIMESERIESON(column, ...) naming the columns of a time series")
    return Gapfill(time_column, time_format, start, end, bucket, window, tuple(fills), series, limit)


def _fill(function: exp.Anonymous) -> tuple[str, bool]:
    args = function.expressions
    if len(args) != 2 or not isinstance(args[0], exp.Column) or not (isinstance(args[1], exp.Literal)
                                                                      and args[1].is_string):
        raise _bad("FILL takes a column and 'FILL_PREVIOUS_VALUE' or 'FILL_DEFAULT_VALUE'")
    kind = args[1].name.upper()
    if kind not in _FILL_TYPES:
        raise _bad(f"FILL's type must be 'FILL_PREVIOUS_VALUE' or 'FILL_DEFAULT_VALUE', got {args[1].name[:40]!r}")
    return args[0].name, kind == "FILL_PREVIOUS_VALUE"


def _granularity_ms(text: str) -> int:
    """A bucket size in whole millis (ValueError below one: the buckets are millis apart, as Pinot's)."""
    size, unit = parse_granularity(text)
    millis = size * TIME_UNIT_MS[unit]
    if millis < 1 or millis != int(millis):
        raise ValueError(f"a bucket size must be a whole number of milliseconds, at least 1, got {text[:40]!r}")
    return int(millis)


def _to_millis(values: Sequence[Any], time_format: DateTimeFormat, arrow_type: pa.DataType = pa.string()) \
        -> list[int | None]:
    """Times as epoch millis, read in ``time_format`` (or as TIMESTAMPs, whatever the format, for a TIMESTAMP
    column)."""
    column = pa.table({"t": pa.array(values, arrow_type)})
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        sql = "SELECT epoch_ms(CAST(t AS TIMESTAMP)) FROM __times"
    elif time_format.kind is TimeFormatKind.SIMPLE_DATE_FORMAT:
        pattern = strftime_of(time_format.pattern or "", "GAPFILL").replace("'", "''")
        sql = f"SELECT epoch_ms(strptime(CAST(t AS VARCHAR), '{pattern}')) FROM __times"
    elif time_format.kind is TimeFormatKind.TIMESTAMP:
        sql = "SELECT epoch_ms(CAST(t AS TIMESTAMP)) FROM __times"
    else:
        sql = f"SELECT CAST(CAST(t AS DOUBLE) * {time_format.millis_per_value!r} AS BIGINT) FROM __times"
    try:
        return run_sql(sql, "__times", column).column(0).to_pylist()
    except QueryError as exc:
        raise _bad(f"GAPFILL: a time is not in the format {time_format.kind.value}: {exc.message}") from None


def _from_millis(millis: list[int], time_format: DateTimeFormat, arrow_type: pa.DataType) -> list[Any]:
    """Bucket times written as the time column holds them."""
    if pa.types.is_timestamp(arrow_type):
        return [dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=m) for m in millis]
    if time_format.kind is TimeFormatKind.SIMPLE_DATE_FORMAT:
        pattern = strftime_of(time_format.pattern or "", "GAPFILL").replace("'", "''")
        table = pa.table({"t": pa.array(millis, pa.int64())})
        return run_sql(f"SELECT strftime(make_timestamp(t * 1000), '{pattern}') FROM __times", "__times",
                       table).column(0).to_pylist()
    if time_format.kind is TimeFormatKind.TIMESTAMP:
        return [str(dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=m)) for m in millis]
    values = [int(m // time_format.millis_per_value) for m in millis]
    if pa.types.is_floating(arrow_type):
        return [float(v) for v in values]
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return [str(v) for v in values]
    return values


def _default(arrow_type: pa.DataType) -> Any:
    """Pinot's default of a column type: 0, false, '', the epoch, an empty array."""
    if pa.types.is_boolean(arrow_type):
        return False
    if pa.types.is_integer(arrow_type):
        return 0
    if pa.types.is_floating(arrow_type):
        return 0.0
    if pa.types.is_decimal(arrow_type):
        return decimal.Decimal(0)
    if pa.types.is_timestamp(arrow_type):
        return dt.datetime(1970, 1, 1)
    if pa.types.is_date(arrow_type):
        return dt.date(1970, 1, 1)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return b""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return []
    return ""


def _index(columns: Sequence[str], name: str, what: str) -> int:
    if name in columns:
        return list(columns).index(name)
    folded = [i for i, c in enumerate(columns) if c.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise QueryError(QueryErrorCode.UNKNOWN_COLUMN, f"{what} '{name}' is not a column of the gapfilled query "
                                                    f"({', '.join(columns)})")


def fill_gaps(answer: pa.Table, spec: Gapfill) -> tuple[pa.Table, list[int]]:
    """The gapfilled rows of ``answer`` (Pinot's ``GapfillProcessor``), and each row's bucket index."""
    columns = answer.column_names
    time_at = _index(columns, spec.time_column, "GAPFILL's time column")
    series_at = [_index(columns, s, "TIMESERIESON column") for s in spec.series]
    fills = {_index(columns, name, "FILL column"): previous for name, previous in spec.fills}
    types = [f.type for f in answer.schema]
    rows = [list(r) for r in zip(*(c.to_pylist() for c in answer.columns))] if columns else []
    times = _to_millis(answer.column(time_at).to_pylist(), spec.time_format, types[time_at])
    buckets = spec.buckets
    keys: dict[tuple[Any, ...], None] = {}
    previous: dict[tuple[Any, ...], tuple[int, list[Any]]] = {}
    bucketed: list[list[tuple[int, list[Any]]]] = [[] for _ in range(buckets)]
    for row, time in zip(rows, times):
        if time is None:
            continue
        index = int((time - spec.start_ms) / spec.bucket_ms)  # toward zero, as Java's int division
        if index >= buckets:
            continue
        key = tuple(row[i] for i in series_at)
        keys.setdefault(key, None)
        if time < spec.start_ms:
            if key not in previous or time > previous[key][0]:
                previous[key] = (time, row)
        else:
            bucketed[index].append((time, row))
    out: list[list[Any]] = []
    out_buckets: list[int] = []
    formatted = _from_millis([spec.start_ms + b * spec.bucket_ms for b in range(buckets)], spec.time_format,
                             types[time_at]) if rows else []
    for bucket in range(buckets):
        if len(out) >= spec.limit:
            break
        at = spec.start_ms + bucket * spec.bucket_ms
        missing = dict(keys)
        for time, row in bucketed[bucket]:
            if time != at:
                continue
            key = tuple(row[i] for i in series_at)
            if len(out) < spec.limit:
                out.append(row)
                out_buckets.append(bucket)
            missing.pop(key, None)
            previous[key] = (time, row)
        for key in missing:
            if len(out) >= spec.limit:
                break
            filled = [_default(t) for t in types]
            filled[time_at] = formatted[bucket]
            for i, value in zip(series_at, key):
                filled[i] = value
            for i, from_previous in fills.items():
                if from_previous and key in previous:
                    filled[i] = previous[key][1][i]
            out.append(filled)
            out_buckets.append(bucket)
    if spec.window_ms != spec.bucket_ms:  # each aggregation window's rows take its first bucket's time
        per = spec.window_ms // spec.bucket_ms
        for row, bucket in zip(out, out_buckets):
            row[time_at] = formatted[bucket // per * per]
    table = pa.Table.from_arrays([pa.array([r[i] for r in out], t) for i, t in enumerate(types)], names=columns)
    return table, out_buckets


def finish(query: GapfillQuery, answer: pa.Table) -> tuple[pa.Table, tuple[str, ...]]:
    """The answer of a GAPFILL query from its source query's answer (named as that query names its columns), and
    its column names."""
    filled, _ = fill_gaps(answer, query.gapfill)
    if query.projection is not None:
        columns = [filled.column(_index(filled.column_names, source, "column")) for source, _ in query.projection]
        filled = pa.Table.from_arrays(columns, names=[name for _, name in query.projection])
    if query.post_sql is None:
        return filled, tuple(filled.column_names)
    schema = filled.schema
    info = TableInfo(GAPFILLED_RELATION, tuple(schema.names),
                     frozenset(f.name for f in schema if pa.types.is_timestamp(f.type)),
                     number_columns=frozenset(f.name for f in schema if pa.types.is_integer(f.type)
                                              or pa.types.is_floating(f.type)))
    plan = plan_sql(query.post_sql, lambda name: info if name.lower() == GAPFILLED_RELATION else None)
    partial = run_server_step(plan, [filled], schema)
    return merge_partials(plan, [partial], schema), plan.column_names
