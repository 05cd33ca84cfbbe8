"""Java's conversions between Pinot's stored types, as DuckDB expressions. Pure tree building.

Pinot moves a value from one type to another with Java's casts (``ArrayCopyUtils``): a DOUBLE to an INT or LONG
drops the fraction toward zero, NaN is 0 and out-of-range values saturate; a LONG to an INT keeps the low 32 bits;
a STRING is parsed (``Double.valueOf(s).intValue()``, ``new BigDecimal(s).longValue()``); a TIMESTAMP is its LONG
of epoch millis. DuckDB's casts round instead, fail on overflow, and do not cast a TIMESTAMP to a number, so a
value read as Pinot would read it (LOOKUP's join values, ``intDiv``'s answer) goes through ``as_pinot_type``.

The type of an arbitrary expression is not known while planning, so ``as_pinot_type`` dispatches on DuckDB's
``typeof`` at bind time: every branch is written with ``TRY_CAST`` so that it binds whatever the type, and only the
matching branch's value is used (NULL where Pinot's parse would throw).
"""

from __future__ import annotations

from sqlglot import exp

_DOUBLE = exp.DataType.build("DOUBLE")
_BOUNDS = {"INTEGER": (-(2 ** 31), 2 ** 31 - 1), "BIGINT": (-(2 ** 63), 2 ** 63 - 1)}


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _cast(node: exp.Expression, to: str, safe: bool = False) -> exp.Expression:
    return (exp.TryCast if safe else exp.Cast)(this=node, to=exp.DataType.build(to))


def _typed(text: str, to: str) -> exp.Expression:
    """A constant DuckDB writes no literal for as ``to`` (the smallest BIGINT, say): cast from its text."""
    return _cast(exp.Literal.string(text), to)


def java_integral(value: exp.Expression, target: str = "BIGINT") -> exp.Expression:
    """Java's ``(long) d`` / ``(int) d`` of a DOUBLE: toward zero, NaN is 0, out of range saturates (DuckDB's cast
    would round, or fail)."""
    low, high = _BOUNDS[target]
    return exp.Case(ifs=[
        exp.If(this=_call("isnan", value), true=_cast(exp.Literal.number(0), target)),  # first: NaN orders above all
        exp.If(this=exp.GTE(this=value.copy(), expression=_typed(str(high + 1), "DOUBLE")),
               true=_typed(str(high), target)),
        exp.If(this=exp.LTE(this=value.copy(), expression=_typed(str(low), "DOUBLE")),
               true=_typed(str(low), target))],
        default=_cast(_call("trunc", value.copy()), target))


def _low_32_bits(value: exp.Expression) -> exp.Expression:
    """Java's ``(int) l`` of a LONG: the low 32 bits, two's complement (DuckDB's cast fails out of range)."""
    shifted = exp.Add(this=_cast(value, "HUGEINT"), expression=exp.Literal.number(2 ** 31))
    wrapped = exp.Mod(this=exp.paren(exp.Add(this=exp.paren(exp.Mod(this=exp.paren(shifted),
                                                                      expression=exp.Literal.number(2 ** 32))),
                                             expression=exp.Literal.number(2 ** 32))),
                      expression=exp.Literal.number(2 ** 32))
    return _cast(exp.Sub(this=exp.paren(wrapped), expression=exp.Literal.number(2 ** 31)), "INTEGER")


def _type_is(value: exp.Expression, *names: str, prefix: str | None = None) -> exp.Expression:
    kind = _call("typeof", value.copy())
    tests: list[exp.Expression] = [exp.In(this=kind, expressions=[exp.Literal.string(n) for n in names])] \
        if names else []
    if prefix is not None:
        tests.append(exp.Like(this=kind.copy(), expression=exp.Literal.string(prefix + "%")))
    return exp.or_(*tests)


def _epoch_millis(value: exp.Expression) -> exp.Expression:
    return _call("epoch_ms", _cast(value, "TIMESTAMP", safe=True))


def as_pinot_type(value: exp.Expression, target: str) -> exp.Expression:
    """``value`` read as Pinot reads a value for a column of DuckDB type ``target`` (INTEGER, BIGINT, FLOAT,
    DOUBLE, TIMESTAMP — a TIMESTAMP is read as its LONG millis —, or anything else: a plain TRY_CAST). NULL where
    Pinot would fail to parse (a STRING that is no number)."""
    if target == "TIMESTAMP":
        target = "BIGINT"
    if target in ("FLOAT", "DOUBLE"):
        return exp.Case(ifs=[exp.If(this=_type_is(value, prefix="TIMESTAMP"),
                                    true=_cast(_epoch_millis(value), target))],
                        default=_cast(value.copy(), target, safe=True))
    if target not in _BOUNDS:
        return _cast(value, target, safe=True)
    as_double = _cast(value.copy(), "DOUBLE", safe=True)
    if target == "INTEGER":  # Double.valueOf(s).intValue(); a LONG (or a TIMESTAMP's millis) keeps its low bits
        text = java_integral(_cast(value.copy(), "DOUBLE", safe=True), target)
        millis = _low_32_bits(_epoch_millis(value))
        whole = exp.Case(ifs=[exp.If(this=_type_is(value, "BIGINT", "HUGEINT", "UBIGINT", "UINTEGER"),
                                     true=_low_32_bits(_cast(value.copy(), "HUGEINT", safe=True)))],
                         default=_cast(value.copy(), target, safe=True))
    else:  # new BigDecimal(s).longValue(): the exact decimal, truncated
        decimal = _cast(_call("trunc", _cast(value.copy(), "DECIMAL(38, 10)", safe=True)), target, safe=True)
        text = _call("coalesce", decimal, java_integral(_cast(value.copy(), "DOUBLE", safe=True), target))
        millis = _epoch_millis(value)
        whole = _cast(value.copy(), target, safe=True)
    return exp.Case(ifs=[
        exp.If(this=_type_is(value, prefix="TIMESTAMP"), true=millis),
        exp.If(this=_type_is(value, "FLOAT", "DOUBLE", prefix="DECIMAL"), true=java_integral(as_double, target)),
        exp.If(this=_type_is(value, "VARCHAR"), true=text)],
        default=whole)
