"""Pinot's aggregations with several arguments and typed answers, as steps the planner splits over servers.

Each call becomes an ``AggregateCall`` carrying a ``MergeSpec``: the SQL each server computes per group, the
broker's merge of those partials, and the same aggregate in one step for a query one server answers whole. Both
routes end in the same scalar step, so they give one answer with one Arrow type. NULLs are skipped, as in Pinot's
null-handling mode (the rest of the planner's rule); Pinot without it would read the columns' default values.

- ``LASTWITHTIME(x, t, 'TYPE')`` / ``FIRSTWITHTIME``: the value of ``x`` on the row with the largest (smallest)
  time, as TYPE (BOOLEAN, INT, LONG, FLOAT, DOUBLE, STRING). Partial: the largest (smallest) ``{t, v}`` struct.
  Rows that tie on time are ordered by their value: LASTWITHTIME answers the largest of them, FIRSTWITHTIME the
  smallest. Pinot keeps whichever row it scanned last, so its answer among ties depends on segment and thread
  order; this rule gives every replica and every split of the rows the same answer.
- ``EXPR_MIN(p, m1, m2, ...)`` / ``EXPR_MAX``: ``p`` on the row whose measures ``(m1, m2, ...)`` are smallest
  (largest), compared in order; rows with a NULL measure are skipped. Partial: the smallest (largest)
  ``{m1, ..., p}`` struct, so among rows that tie on every measure the answer is their smallest (largest) ``p``,
  NULL only if every one is NULL. Pinot answers every tied row, each as a row of its own, and only with its broker
  rewriters configured and no alias; here each group answers one value.
- ``MODE(x[, 'MIN'|'MAX'|'AVG'])``: the most frequent value, as DOUBLE; the reducer picks among values tied on
  frequency (MIN by default). Partial: each server's value counts (DuckDB's ``histogram``, a MAP); merged by
  summing the counts per value in a grouped sum over the maps' entries (linear: a lookup of each value in every
  map made it quadratic in distinct values).
- ``HISTOGRAM(x, ARRAY[e0, ..., en])`` and ``HISTOGRAM(x, lower, upper, n)``: counts per bin as a DOUBLE array,
  bins ``[e_i, e_i+1)`` with the last one closed (``[e_n-1, e_n]``); values outside are not counted; with no rows
  every count is 0. Partial: each server's counts per bin index (a MAP), summed per bin.
- ``ARRAY_AGG(x, 'TYPE'[, distinct])``: the values (distinct ones with ``true``) as a TYPE array, in no
  particular order (Pinot's order is its scan order); no value gives an empty array.

The ``...WITH_TIME`` time argument is read as Pinot reads it: a TIMESTAMP as epoch millis (``TIME_ARGUMENTS``,
used by the translation), a fraction truncated toward zero.
"""

from __future__ import annotations

import math

import sqlglot
from sqlglot import exp

from cuvee.query.aggregate_call import DIALECT, AggKind, AggregateCall, MergeSpec
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.java_casts import as_pinot_type

MAX_HISTOGRAM_BINS = 1000  # bins of one HISTOGRAM (each is a CASE branch or a list slot per group)

# Pinot's data type names -> DuckDB's, for LASTWITHTIME/FIRSTWITHTIME's third argument
_WITH_TIME_TYPES = {"BOOLEAN": "BOOLEAN", "INT": "INTEGER", "LONG": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE",
                    "STRING": "VARCHAR"}
# ... and ARRAY_AGG's second
_ARRAY_TYPES = {**_WITH_TIME_TYPES, "TIMESTAMP": "TIMESTAMP", "BYTES": "BLOB"}
_REDUCERS = ("MIN", "MAX", "AVG")

# The argument Pinot reads as a time in epoch millis, by normalised function name (``functions.translate_scalar``
# turns a TIMESTAMP there into its millis).
TIME_ARGUMENTS = {"LASTWITHTIME": 1, "FIRSTWITHTIME": 1, "FUNNELMAXSTEP": 0, "FUNNELMATCHSTEP": 0,
                  "FUNNELCOMPLETECOUNT": 0, "FUNNELSTEPDURATIONSTATS": 0}
# The value argument and its data type argument, by normalised function name: a value collected as a number
# (``_NUMBER_TYPES``) is read as Pinot reads it, a TIMESTAMP as epoch millis (``numeric_data_argument``).
_DATA_ARGUMENTS = {"LASTWITHTIME": (0, 2), "FIRSTWITHTIME": (0, 2), "ARRAYAGG": (0, 1)}
_NUMBER_TYPES = ("INT", "LONG", "FLOAT", "DOUBLE")


def numeric_data_argument(key: str, args: list[exp.Expression]) -> int | None:
    """The position of the value ``key``'s call collects as a number (its data type literal is INT, LONG, FLOAT
    or DOUBLE), or None: the translation reads a TIMESTAMP there as epoch millis."""
    positions = _DATA_ARGUMENTS.get(key)
    if positions is None or len(args) <= positions[1]:
        return None
    kind = args[positions[1]]
    if isinstance(kind, exp.Literal) and kind.is_string and kind.name.strip().upper() in _NUMBER_TYPES:
        return positions[0]
    return None


def as_type(x: str, duck: str) -> str:
    """``x`` converted to a data type argument's DuckDB type as Pinot converts it: to INT or LONG truncated toward
    zero, NaN as 0, out of range saturated, a LONG to INT as its low 32 bits (Java's casts: ``java_casts``; DuckDB's
CAST rounds or fails), to FLOAT or DOUBLE only from a number (a DOUBLE beyond FLOAT's range fails, where Java
gives Infinity). A string given a number type
    does not bind, so the broker's check refuses it (700) before any server is asked, as Pinot fails on it."""
    if duck in ("INTEGER", "BIGINT"):  # Java's casts (NaN 0, saturating, a LONG's low 32 bits); ``+ 0`` keeps a
        # string from binding, as before
        return as_pinot_type(sqlglot.parse_one(f"({x} + 0)", read=DIALECT), duck).sql(dialect=DIALECT)
    if duck in ("FLOAT", "DOUBLE"):
        return f"CAST({x} + 0 AS {duck})"
    return f"CAST({x} AS {duck})"


def bad(message: str) -> QueryError:
    """A query Pinot would refuse (150, SQLParsingError): a wrong argument count, type or literal."""
    return QueryError(QueryErrorCode.SQL_PARSING, message)


def sql(node: exp.Expression) -> str:
    """``node`` as the servers' DuckDB SQL, parenthesised so that it can stand inside any template."""
    return f"({node.sql(dialect=DIALECT)})"


def string_literal(node: exp.Expression, what: str) -> str:
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise bad(f"{what} must be a string literal, got {node.sql(dialect=DIALECT)[:80]}")
    return node.name


def number_literal(node: exp.Expression, what: str) -> float:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if not isinstance(inner, exp.Literal) or inner.is_string:
        raise bad(f"{what} must be a number literal, got {node.sql(dialect=DIALECT)[:80]}")
    try:
        value = float(inner.this)
    except ValueError:
        raise bad(f"{what} must be a number, got {inner.this[:80]!r}") from None
    if not math.isfinite(value):
        raise bad(f"{what} must be a finite number")
    return -value if negative else value


def int_literal(node: exp.Expression, what: str) -> int:
    value = number_literal(node, what)
    if value != int(value):
        raise bad(f"{what} must be an integer, got {value:g}")
    return int(value)


def double(value: float) -> str:
    """A DOUBLE constant exactly (a bare ``0.1`` would be a DECIMAL in DuckDB)."""
    return f"CAST('{value!r}' AS DOUBLE)"


def _numeric(x: str) -> str:
    """``x`` as a DOUBLE, binding only for numbers (``+ 0`` refuses strings and timestamps at the broker's check,
    700, as Pinot refuses a non-numeric column)."""
    return f"CAST({x} + 0 AS DOUBLE)"


def _with_time(node: exp.Anonymous, name: str, last: bool) -> AggregateCall:
    args = list(node.expressions)
    if len(args) != 3:
        raise bad(f"{name.upper()} takes 3 arguments (dataColumn, timeColumn, 'dataType'), got {len(args)}")
    type_name = string_literal(args[2], f"{name.upper()}'s data type").upper()
    duck = _WITH_TIME_TYPES.get(type_name)
    if duck is None:
        raise bad(f"{name.upper()}: unsupported data type {type_name[:40]!r}; one of {', '.join(_WITH_TIME_TYPES)}")
    x, t = sql(args[0]), sql(args[1])
    pair = f"{{'t': CAST(trunc({t}) AS BIGINT), 'v': {as_type(x, duck)}}}"
    pick = "max" if last else "min"
    partial = f"{pick}({pair}) FILTER (WHERE {x} IS NOT NULL AND {t} IS NOT NULL)"
    spec = MergeSpec((partial,), f"{pick}({{p0}})", partial, "struct_extract({a}, 'v')", "struct_extract({p0}, 'v')")
    return AggregateCall(AggKind.LAST_WITH_TIME if last else AggKind.FIRST_WITH_TIME, name, args[0], spec=spec)


def _expr_min_max(node: exp.Anonymous, name: str, largest: bool) -> AggregateCall:
    args = list(node.expressions)
    if len(args) < 2:
        raise bad(f"{name.upper()} takes a projection and at least one measuring expression, got {len(args)} "
                  "argument(s)")
    measures = [sql(a) for a in args[1:]]
    fields = ", ".join(f"'m{i}': {m}" for i, m in enumerate(measures))
    projection = sql(args[0])
    # among rows tied on every measure: a non-NULL projection first ('n' orders them), then the smallest (largest)
    present = f"{projection} IS NOT NULL" if largest else f"{projection} IS NULL"
    row = f"{{{fields}, 'n': {present}, 'p': {projection}}}"
    pick = "max" if largest else "min"
    partial = f"{pick}({row}) FILTER (WHERE {' AND '.join(f'{m} IS NOT NULL' for m in measures)})"
    spec = MergeSpec((partial,), f"{pick}({{p0}})", partial, "struct_extract({a}, 'p')", "struct_extract({p0}, 'p')")
    return AggregateCall(AggKind.EXPR_MAX if largest else AggKind.EXPR_MIN, name, args[0], spec=spec)


# MODE's answer from a list of value -> count MAPs (``{a}``: one per server, or the one-step answer's one): the
# counts summed per value by a grouped sum over the maps' entries (a subquery of the group's row, which DuckDB runs
# as one join and aggregation for every group at once), then the most frequent value, ties decided by the reducer.
_VALUE_COUNTS = ("SELECT __k, sum(__c) AS __n FROM (SELECT unnest(map_keys(__m)) AS __k, unnest(map_values(__m)) AS "
                 "__c FROM (SELECT unnest({a}) AS __m)) GROUP BY __k")
_MODE_PICKS = {
    "MIN": f"(SELECT __k FROM ({_VALUE_COUNTS}) ORDER BY __n DESC, __k ASC LIMIT 1)",
    "MAX": f"(SELECT __k FROM ({_VALUE_COUNTS}) ORDER BY __n DESC, __k DESC LIMIT 1)",
    # the values of the top count gathered per count, not a window over the group (DuckDB ran max() OVER () in a
    # per-group subquery quadratically: 10,000 distinct values took 59 s and 6 GB, 30,000 ran out of memory)
    "AVG": f"(SELECT list_avg(arg_max(__ks, __n)) FROM (SELECT __n, list(__k) AS __ks FROM ({_VALUE_COUNTS}) "
           "GROUP BY __n))",
}


def _mode(node: exp.Anonymous, name: str) -> AggregateCall:
    args = list(node.expressions)
    if not 1 <= len(args) <= 2:
        raise bad(f"MODE takes a column and an optional reducer ('MIN', 'MAX' or 'AVG'), got {len(args)} arguments")
    reducer = "MIN"
    if len(args) == 2:
        reducer = string_literal(args[1], "MODE's reducer").upper()
        if reducer not in _REDUCERS:
            raise bad(f"MODE's reducer must be 'MIN', 'MAX' or 'AVG', got {reducer[:40]!r}")
    x = sql(args[0])
    partial = f"histogram({_numeric(x)}) FILTER (WHERE {x} IS NOT NULL)"
    spec = MergeSpec((partial,), "list({p0})", f"[{partial}]", _MODE_PICKS[reducer])
    return AggregateCall(AggKind.MODE, name, args[0], spec=spec)


def _bin_edges(args: list[exp.Expression]) -> tuple[list[float], bool]:
    """The bins' edges, and whether they have equal widths (the 4-argument form)."""
    if len(args) == 2:
        edges_node = args[1]
        if not isinstance(edges_node, exp.Array):
            raise bad("HISTOGRAM's bin edges must be an array of numbers: HISTOGRAM(x, ARRAY[0, 1, 10, 100])")
        edges = [number_literal(e, "a HISTOGRAM bin edge") for e in edges_node.expressions]
        if len(edges) < 2:
            raise bad("HISTOGRAM needs at least 2 bin edges")
        if any(b <= a for a, b in zip(edges, edges[1:])):
            raise bad("HISTOGRAM's bin edges must be strictly increasing")
        if len(edges) - 1 > MAX_HISTOGRAM_BINS:
            raise bad(f"HISTOGRAM takes at most {MAX_HISTOGRAM_BINS} bins, got {len(edges) - 1}")
        return edges, False
    if len(args) != 4:
        raise bad(f"HISTOGRAM takes 2 or 4 arguments: HISTOGRAM(x, ARRAY[0, 1, 10]) or HISTOGRAM(x, lower, upper, "
                  f"numBins), got {len(args)}")
    lower, upper = number_literal(args[1], "HISTOGRAM's lower edge"), number_literal(args[2], "HISTOGRAM's upper edge")
    bins = int_literal(args[3], "HISTOGRAM's number of bins")
    if upper <= lower:
        raise bad(f"HISTOGRAM's upper edge must be greater than its lower edge, got {lower:g} and {upper:g}")
    if not 0 < bins <= MAX_HISTOGRAM_BINS:
        raise bad(f"HISTOGRAM's number of bins must be from 1 to {MAX_HISTOGRAM_BINS}, got {bins}")
    return [lower, upper, float(bins)], True


def _bin_of(value: str, edges: list[float], equal: bool) -> str:
    """The bin index of ``value`` (a DOUBLE), NULL outside the edges (and for NaN): Pinot's ``getBinId``."""
    if equal:
        lower, upper, count = edges[0], edges[1], int(edges[2])
        width = (upper - lower) / count
        inside = f"least(CAST(floor(({value} - {double(lower)}) / {double(width)}) AS BIGINT), {count - 1})"
        last = count - 1
    else:
        lower, upper, last = edges[0], edges[-1], len(edges) - 2
        steps = " ".join(f"WHEN {value} < {double(edge)} THEN {i}" for i, edge in enumerate(edges[1:-1]))
        inside = f"CASE {steps} ELSE {last} END" if steps else "0"
    return (f"CASE WHEN {value} IS NULL OR isnan({value}) OR {value} < {double(lower)} OR {value} > {double(upper)} "
            "THEN NULL "
            f"WHEN {value} = {double(upper)} THEN {last} ELSE {inside} END")


def _histogram(node: exp.Anonymous, name: str) -> AggregateCall:
    args = list(node.expressions)
    edges, equal = _bin_edges(args)
    bins = int(edges[2]) if equal else len(edges) - 1
    index = _bin_of(_numeric(sql(args[0])), edges, equal)
    partial = f"histogram({index}) FILTER (WHERE {index} IS NOT NULL)"

    def counts(maps: str) -> str:  # each bin's count summed over the servers' maps; every 0 when there is none
        zeros = f"list_transform(range({bins}), lambda __i: CAST(0 AS DOUBLE))"
        summed = (f"list_transform(range({bins}), lambda __i: CAST(coalesce(list_sum(list_transform({maps}, "
                  f"lambda __m: coalesce(__m[__i], 0))), 0) AS DOUBLE))")
        return f"coalesce({summed}, {zeros})"

    spec = MergeSpec((partial,), counts("list({p0})"), counts(f"[{partial}]"))
    return AggregateCall(AggKind.HISTOGRAM, name, args[0], spec=spec)


def _distinct_flag(node: exp.Expression) -> bool:
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal) and node.is_string and node.name.lower() in ("true", "false"):
        return node.name.lower() == "true"
    raise bad(f"ARRAY_AGG's third argument must be true or false, got {node.sql(dialect=DIALECT)[:80]}")


def _array_agg(node: exp.Anonymous, name: str) -> AggregateCall:
    args = list(node.expressions)
    if not 2 <= len(args) <= 3:
        raise bad(f"ARRAY_AGG takes 2 or 3 arguments (dataColumn, 'dataType'[, isDistinct]), got {len(args)}")
    type_name = string_literal(args[1], "ARRAY_AGG's data type").upper()
    duck = _ARRAY_TYPES.get(type_name)
    if duck is None:
        raise bad(f"ARRAY_AGG: unsupported data type {type_name[:40]!r}; one of {', '.join(_ARRAY_TYPES)}")
    distinct = len(args) == 3 and _distinct_flag(args[2])
    x = sql(args[0])
    values = f"list({'DISTINCT ' if distinct else ''}{as_type(x, duck)}) FILTER (WHERE {x} IS NOT NULL)"
    empty = f"CAST([] AS {duck}[])"
    merged = "list_distinct(flatten(list({p0})))" if distinct else "flatten(list({p0}))"
    spec = MergeSpec((values,), f"coalesce({merged}, {empty})", f"coalesce({values}, {empty})")
    return AggregateCall(AggKind.ARRAY_AGG, name, args[0], spec=spec)


def normalised(name: str) -> str:
    """Pinot's lookup key for a function name: upper case, underscores ignored (``LAST_WITH_TIME`` is
    ``LASTWITHTIME``)."""
    return name.upper().replace("_", "")


AGGREGATE_NAMES = frozenset({"LASTWITHTIME", "FIRSTWITHTIME", "EXPRMIN", "EXPRMAX", "MODE", "HISTOGRAM",
                             "ARRAYAGG"})  # normalised: those ``classify_pinot_aggregate`` reads


def classify_pinot_aggregate(node: exp.Expression) -> AggregateCall | None:
    """The call of one of this module's aggregations ``node`` makes, or None; bad arguments are 150. Names match
    as Pinot matches them (any case, underscores ignored)."""
    if not isinstance(node, exp.Anonymous):
        return None
    key = normalised(node.name)
    if key in ("LASTWITHTIME", "FIRSTWITHTIME"):
        return _with_time(node, key.lower(), key == "LASTWITHTIME")
    if key in ("EXPRMIN", "EXPRMAX"):
        return _expr_min_max(node, key.lower(), key == "EXPRMAX")
    if key == "MODE":
        return _mode(node, "mode")
    if key == "HISTOGRAM":
        return _histogram(node, "histogram")
    if key == "ARRAYAGG":
        return _array_agg(node, "arrayagg")
    return None
