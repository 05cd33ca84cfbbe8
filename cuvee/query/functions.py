"""Pinot's SQL functions: which calls are aggregations, and how Pinot-only scalar functions map onto DuckDB.

Aggregations are recognised here once so the planner can split each into a per-server partial and a broker-side
final step (see ``rewrite.py``). Pinot names that DuckDB lacks (``DISTINCTCOUNT``, ``PERCENTILE90``,
``TOEPOCHSECONDS``...) are translated; everything else passes through to DuckDB unchanged.
"""

from __future__ import annotations

import re

from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

from cuvee.query.aggregate_call import DIALECT, AggKind, AggregateCall
from cuvee.query.datetime_functions import TimeTypes, strftime_pattern, translate_datetime
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.funnel import classify_funnel
from cuvee.query.json_match import translate_json_match
from cuvee.query.pinot_aggregates import TIME_ARGUMENTS, classify_pinot_aggregate, normalised, numeric_data_argument
from cuvee.query.prescan import is_number_list
from cuvee.query.scalar_functions import translate_node, translate_other
from cuvee.query.sketches import classify_sketch

# Pinot names sqlglot would read as its own functions with other argument lists, dropping or reinterpreting
# arguments (DATETRUNC's 3rd to 5th, JSON_EXTRACT_SCALAR's type and default, STRPOS's instance, SUBSTR's end, the
# time-rounding ROUND(value, toNearest), CONCAT's trailing separator, LOG as ln): read as plain calls and
# translated here with Pinot's meaning.
# Pinot's aggregations MODE(x, 'MAX') and ARRAY_AGG(x, 'INT', true) too (sqlglot reads MODE's second argument as
# a flag and refuses ARRAY_AGG's third).
_PINOT_NAMES = ("DATE_TRUNC", "DATETRUNC", "JSON_EXTRACT_SCALAR", "STRPOS", "SUBSTR", "SPLIT", "TRUNCATE", "LOG",
                "ROUND", "CONCAT", "MODE", "ARRAY_AGG", "ARRAYAGG")


class PinotDuckDB(DuckDB):
    """DuckDB's dialect reading Pinot's function names as plain calls (see ``_PINOT_NAMES``), and SETTINGS as a
    name (FUNNEL_COUNT's ``SETTINGS('set')``; sqlglot keeps the word for ClickHouse's clause)."""

    class Tokenizer(DuckDB.Tokenizer):
        KEYWORDS = {word: token for word, token in DuckDB.Tokenizer.KEYWORDS.items() if word != "SETTINGS"}

    class Parser(DuckDB.Parser):
        FUNCTIONS = {name: builder for name, builder in DuckDB.Parser.FUNCTIONS.items() if name not in _PINOT_NAMES}


READ_DIALECT = PinotDuckDB  # how queries and ingestion expressions are read


# Pinot aggregation names (upper case) served by one kind. DISTINCTCOUNTSMARTHLL and DISTINCTCOUNTULL are answered
# exactly (an exact count is a valid estimate); the sketches built here are in ``cuvee.query.sketches``.
_ANONYMOUS_AGGREGATES: dict[str, AggKind] = {
    "DISTINCTCOUNT": AggKind.DISTINCT_COUNT,
    "SEGMENTPARTITIONEDDISTINCTCOUNT": AggKind.DISTINCT_COUNT,
    "DISTINCTCOUNTBITMAP": AggKind.DISTINCT_COUNT,
    "DISTINCTCOUNTSMARTHLL": AggKind.DISTINCT_COUNT_HLL,
    "DISTINCTCOUNTULL": AggKind.DISTINCT_COUNT_HLL,
    "DISTINCTSUM": AggKind.DISTINCT_SUM,
    "DISTINCTAVG": AggKind.DISTINCT_AVG,
    "MINMAXRANGE": AggKind.MIN_MAX_RANGE,
    "SUM0": AggKind.SUM,
}
# PERCENTILE(x, p), PERCENTILEEST(x, p), PERCENTILESMARTTDIGEST(x, p) and the PERCENTILE90(x) forms, answered
# exactly (PERCENTILETDIGEST and PERCENTILEKLL build sketches: ``cuvee.query.sketches``).
_PERCENTILE = re.compile(r"^(PERCENTILE(?:EST|SMARTTDIGEST)?)(\d+(?:\.\d+)?)?$")
_BUILTIN_AGGREGATES: dict[type[exp.Expression], AggKind] = {
    exp.Sum: AggKind.SUM,
    exp.Min: AggKind.MIN,
    exp.Max: AggKind.MAX,
    exp.Avg: AggKind.AVG,
}
_DISTINCT_VARIANTS = {AggKind.SUM: AggKind.DISTINCT_SUM, AggKind.AVG: AggKind.DISTINCT_AVG}
_UNSUPPORTED_FUNCTIONS = {"TEXT_MATCH", "VECTOR_SIMILARITY", "GAPFILL", "IN_SUBQUERY",
                          "IN_ID_SET", "IDSET",
                          # DuckDB's own introspection: a server's settings and paths are not the caller's to read
                          "CURRENT_SETTING", "GETENV", "CURRENT_QUERY", "CURRENT_DATABASE", "CURRENT_CATALOG",
                          "CURRENT_SCHEMAS", "IN_SEARCH_PATH", "TXID_CURRENT", "GETVARIABLE"}
# the same, as sqlglot parses them into nodes of their own
_INTROSPECTION = (exp.CurrentDatabase, exp.CurrentCatalog, exp.CurrentSchema, exp.CurrentSchemas, exp.CurrentUser,
                  exp.SessionUser, exp.CurrentVersion)


def _sql_error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


def _unsupported(upper: str) -> QueryError:
    if upper == "GAPFILL":  # the gapfill route (cuvee.query.gapfill) takes it out of the queries it answers
        return _sql_error("GAPFILL is answered only as a select item in Pinot's gapfill query shapes, and not under "
                          "EXPLAIN PLAN FOR")
    return _sql_error(f"function {upper} is not supported")


def _single_arg(node: exp.Expression, name: str) -> exp.Expression:
    args = _call_args(node)
    if len(args) != 1:
        raise _sql_error(f"{name.upper()} takes exactly one argument, got {len(args)}")
    return args[0]


def _call_args(node: exp.Expression) -> list[exp.Expression]:
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    args = [node.this] if node.this is not None else []
    return args + list(node.expressions or [])


def _percentile_value(node: exp.Expression, name: str) -> float:
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        raise _sql_error(f"{name.upper()}: the percentile must be between 0 and 100")
    if not isinstance(node, exp.Literal):
        raise _sql_error(f"{name.upper()}: the percentile must be a number literal")
    try:
        value = float(node.this)
    except ValueError:
        raise _sql_error(f"{name.upper()}: the percentile must be a number, got {node.this!r}") from None
    if not 0 <= value <= 100:
        raise _sql_error(f"{name.upper()}: the percentile must be between 0 and 100, got {value:g}")
    return value


def classify_aggregate(node: exp.Expression) -> AggregateCall | None:
    """The aggregation ``node`` calls, or None when it is not an aggregation; unsupported aggregations raise 150."""
    if isinstance(node, exp.Count):
        inner = node.this
        if isinstance(inner, exp.Distinct):
            if len(inner.expressions) != 1:
                raise _sql_error("COUNT(DISTINCT ...) takes exactly one expression")
            return AggregateCall(AggKind.DISTINCT_COUNT, "distinctcount", inner.expressions[0])
        if inner is None or isinstance(inner, exp.Star):
            return AggregateCall(AggKind.COUNT, "count", None)
        return AggregateCall(AggKind.COUNT, "count", inner)
    kind = _BUILTIN_AGGREGATES.get(type(node))
    if kind is not None:
        arg = _single_arg(node, kind.value)
        if isinstance(arg, exp.Distinct):  # SUM(DISTINCT x): distinct across servers, not within each
            if len(arg.expressions) != 1:
                raise _sql_error(f"{kind.value.upper()}(DISTINCT ...) takes exactly one expression")
            arg = arg.expressions[0]
            kind = _DISTINCT_VARIANTS.get(kind, kind)
        return AggregateCall(kind, kind.value, arg)
    if isinstance(node, _INTROSPECTION):
        raise _sql_error(f"function {node.sql(dialect='duckdb').split('(')[0].upper()} is not supported")
    if isinstance(node, exp.Anonymous):
        upper = node.name.upper()
        if upper in _UNSUPPORTED_FUNCTIONS:
            raise _unsupported(upper)
        # calls that carry their own MergeSpec
        pinot = classify_pinot_aggregate(node) or classify_funnel(node) or classify_sketch(node)
        if pinot is not None:
            return pinot
        if upper.endswith("MV") and len(upper) > 2:
            return _multi_value_call(node, upper)
        kind = _ANONYMOUS_AGGREGATES.get(upper)
        if kind is not None:
            return AggregateCall(kind, upper.lower(), _single_arg(node, upper))
        match = _PERCENTILE.match(upper)
        if match is not None:
            return _percentile_call(node, match.group(1).lower(), match.group(2))
        return None
    if isinstance(node, exp.AggFunc):
        raise _sql_error(f"aggregation {node.sql(dialect='duckdb')} is not supported")
    return None


# Pinot's ...MV aggregations over every value of a multi-value column: COUNTMV, SUMMV, MINMV, MAXMV, AVGMV,
# MINMAXRANGEMV, DISTINCTCOUNTMV (and its sketch and bitmap variants), DISTINCTSUMMV, DISTINCTAVGMV, PERCENTILEMV.
_MULTI_VALUE_BASES: dict[str, AggKind] = {"COUNT": AggKind.COUNT, "SUM": AggKind.SUM, "MIN": AggKind.MIN,
                                          "MAX": AggKind.MAX, "AVG": AggKind.AVG}


def _multi_value_call(node: exp.Anonymous, upper: str) -> AggregateCall | None:
    base = upper[:-2]
    kind = _MULTI_VALUE_BASES.get(base) or _ANONYMOUS_AGGREGATES.get(base)
    if kind is not None:
        return AggregateCall(kind, upper.lower(), _single_arg(node, upper), multi_value=True)
    match = _PERCENTILE.match(base)
    if match is not None:
        call = _percentile_call(node, upper.lower(), match.group(2))
        return AggregateCall(call.kind, upper.lower(), call.arg, call.percentile, multi_value=True)
    return None


def _percentile_call(node: exp.Anonymous, name: str, suffix: str | None) -> AggregateCall:
    args = list(node.expressions)
    if suffix is not None:
        if len(args) != 1:
            raise _sql_error(f"{node.name.upper()} takes exactly one argument")
        return AggregateCall(AggKind.PERCENTILE, name, args[0], _percentile_value(exp.Literal.number(suffix), name))
    if len(args) != 2:
        raise _sql_error(f"{name.upper()} takes two arguments: a column and a percentile")
    return AggregateCall(AggKind.PERCENTILE, name, args[0], _percentile_value(args[1], name))


def pinot_column_name(expr: exp.Expression) -> str:
    """Pinot's result column name for an unaliased select item: the column name, ``count(*)``, ``sum(x)``, or the
    expression as written (Pinot would write ``plus(a,'1')`` where we write ``a + 1``)."""
    if isinstance(expr, exp.Column):
        return expr.name
    plain = expr.copy()
    for identifier in plain.find_all(exp.Identifier):
        identifier.set("quoted", False)
    call = classify_aggregate(plain)
    if call is None:
        return plain.sql(dialect=DIALECT)
    if call.arg is None:
        return f"{call.name}(*)"
    if call.spec is not None:  # Pinot's name for the function (LAST_WITH_TIME is lastwithtime), the arguments
        label, args = call.name, list(plain.expressions)  # as written
    elif isinstance(plain, exp.Anonymous):
        label, args = plain.name.lower(), list(plain.expressions)
    else:
        label, args = call.name, [call.arg]
    return f"{label}({', '.join(a.sql(dialect=DIALECT) for a in args)})"


_OPERATORS: dict[str, type[exp.Binary]] = {
    "PLUS": exp.Add, "ADD": exp.Add, "MINUS": exp.Sub, "SUB": exp.Sub, "TIMES": exp.Mul, "MULT": exp.Mul,
    "DIVIDE": exp.Div, "DIV": exp.Div, "MOD": exp.Mod,
}


def _now_millis() -> exp.Expression:
    return exp.Cast(this=exp.func("epoch_ms", exp.CurrentTimestamp(), dialect=DIALECT), to=exp.DataType.build("BIGINT"))


_ISO_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


def _iso_duration_millis(text: str) -> int:
    """An ISO-8601 duration of days, hours, minutes and seconds (``P1DT2H``, ``PT30M``, ``PT1.5S``) in millis."""
    match = _ISO_DURATION.match(text.strip())
    if match is None or text.strip().upper() in ("P", "PT"):
        raise _sql_error(f"{text!r} is not an ISO-8601 duration like 'PT1H' or 'P1DT12H'")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)


_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)


def _is_number(node: exp.Expression) -> bool:
    if is_number_list(node):  # a long IN-list of numbers, set aside before parsing
        return True
    inner = node.this if isinstance(node, exp.Neg) else node
    return isinstance(inner, exp.Literal) and not inner.is_string


def translate_scalar(node: exp.Expression, timestamp_columns: frozenset[str] = frozenset(),
                     string_times: dict[str, str] | None = None,
                     number_columns: frozenset[str] = frozenset()) -> exp.Expression:
    """``node`` with Pinot's scalar functions (date-time, string, JSON, math; PLUS/MINUS/...) as DuckDB forms.

    In Pinot a TIMESTAMP column is a LONG of epoch millis to functions, arithmetic and comparisons; DuckDB sees a
    TIMESTAMP. So a TIMESTAMP compared with a number, added to one, or passed to a function that takes millis is
    read as ``epoch_ms(col)``, and ``CAST(long AS TIMESTAMP)`` reads the LONG as millis (``number_columns``: the
    columns known numeric). A STRING date-time column (``string_times``: column → its Java date pattern) given to
    EXTRACT or DATE_TRUNC is read with its pattern. The tree is rewritten bottom-up, so a translated call's
    arguments are already translated (``ROUND(DATE_TRUNC('minute', CAST(col AS TIMESTAMP)), 300000)``).
    """
    types = TimeTypes(timestamp_columns, number_columns, string_times or {})
    root = node.copy()
    nodes = list(root.walk(bfs=False))
    for sub in reversed(nodes):  # children before their parents
        parent, key, index = sub.parent, sub.arg_key, sub.index  # before a translation wraps sub in a new node
        new = _translate_one(sub, types)
        if new is sub:
            continue
        if parent is None:
            root = new
        else:
            parent.set(key, new, index)
    return root


_ARITHMETIC = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod)


def _translate_one(sub: exp.Expression, types: TimeTypes) -> exp.Expression:
    """One node's translation; its children are translated already."""
    if isinstance(sub, exp.RegexpExtract) and sub.args.get("parameters") is not None:
        # Pinot's regexp_extract(value, regexp, group, default): the default when nothing matches (sqlglot
        # reads the 4th argument as regex flags; DuckDB would answer '')
        default = sub.args["parameters"]
        plain = exp.RegexpExtract(this=sub.this, expression=sub.expression,
                                  group=sub.args.get("group") or exp.Literal.number(0))
        return exp.func("coalesce", exp.func("nullif", plain, exp.Literal.string(""), dialect=DIALECT),
                        default, dialect=DIALECT)
    if isinstance(sub, exp.Extract) and isinstance(sub.expression, exp.Column) and \
            sub.expression.name in types.string_times:
        return exp.Extract(this=sub.this, expression=types.parsed(sub.expression))
    if isinstance(sub, exp.Cast) and sub.to.this in (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ):
        return types.cast_to_timestamp(sub)
    if isinstance(sub, _COMPARISONS) and types.timestamps:
        operands = [sub.this, sub.args.get("expression"), sub.args.get("low"), sub.args.get("high"),
                    *sub.args.get("expressions", [])]
        others = [o for o in operands[1:] if o is not None]
        if others and all(_is_number(o) for o in others):
            sub.set("this", types.millis(sub.this))
        return sub
    if isinstance(sub, _ARITHMETIC):
        return _millis_arithmetic(sub, types)
    if not isinstance(sub, exp.Anonymous):
        return translate_node(sub) or sub
    upper = sub.name.upper()
    args = list(sub.expressions)
    if upper == "JSON_MATCH":  # Pinot's filter on its JSON index, evaluated over the JSON text
        return translate_json_match(args)
    if upper in _UNSUPPORTED_FUNCTIONS:
        raise _unsupported(upper)
    if upper == "LOOKUP":  # its arguments are translated; the call itself by cuvee.query.lookup, with the tables
        return sub
    time_argument = TIME_ARGUMENTS.get(normalised(upper))
    data_argument = numeric_data_argument(normalised(upper), args)
    if data_argument is not None:  # a TIMESTAMP collected as a number is its epoch millis, as in Pinot
        args[data_argument] = types.millis(args[data_argument])
    if time_argument is not None and len(args) > time_argument:  # an aggregation reading a time as Pinot does
        args[time_argument] = types.millis(args[time_argument])
    if data_argument is not None or (time_argument is not None and len(args) > time_argument):
        sub.set("expressions", args)
        return sub
    if upper in _OPERATORS:
        if len(args) != 2:
            raise _sql_error(f"{upper} takes 2 arguments, got {len(args)}")
        return exp.paren(_millis_arithmetic(_OPERATORS[upper](this=exp.paren(args[0]), expression=exp.paren(args[1])),
                                            types))
    if upper in ("ARRAYLENGTH", "CARDINALITY"):  # a multi-value column's number of values
        if len(args) != 1:
            raise _sql_error(f"{upper} takes one argument, a multi-value column")
        return exp.func("len", args[0], dialect=DIALECT)
    if upper == "NOW":  # Pinot: the current time in epoch millis (a LONG)
        if args:
            raise _sql_error("NOW takes no argument")
        return _now_millis()
    if upper == "AGO":  # Pinot: now minus an ISO-8601 duration ('PT1H', 'P1D'), in epoch millis
        if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            raise _sql_error("AGO takes one ISO-8601 duration literal, e.g. ago('PT1H')")
        return exp.paren(exp.Sub(this=_now_millis(), expression=exp.Literal.number(
            _iso_duration_millis(args[0].name))))
    translated = translate_datetime(upper, args, types)
    if translated is None:
        translated = translate_other(upper, args)
    return sub if translated is None else translated


def _millis_arithmetic(node: exp.Binary, types: TimeTypes) -> exp.Expression:
    """Arithmetic with a TIMESTAMP operand is on its epoch millis, as in Pinot (``ts + 1000``, ``ts - other``);
    an INTERVAL operand keeps DuckDB's timestamp arithmetic."""
    operands = (node.this, node.expression)
    if any(isinstance(o, exp.Interval) for o in operands) or not any(types.is_timestamp(o) for o in operands):
        return node
    node.set("this", types.millis(node.this))
    node.set("expression", types.millis(node.expression))
    return node
