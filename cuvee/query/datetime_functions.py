"""Pinot's date-time scalar functions as DuckDB expressions: dateTrunc, dateTimeConvert, toDateTime, fromDateTime,
timeConvert, the toEpoch…/fromEpoch… families, the two-argument ``round`` and ``CAST(… AS TIMESTAMP)``.

Pinot hands a TIMESTAMP value to functions and arithmetic as a LONG of epoch millis; DuckDB keeps a TIMESTAMP. So
``TimeTypes.millis`` reads a TIMESTAMP operand as ``epoch_ms(x)`` wherever Pinot would see millis, and a LONG cast
to TIMESTAMP becomes ``epoch_ms(x)`` (DuckDB has no BIGINT → TIMESTAMP cast). Time zones are converted with
DuckDB's ``timezone()`` (a fixed offset like '+05:30' by shifting): a wall-clock TIMESTAMP in the zone is truncated
or formatted, then read back as an instant.
Pure tree building: no I/O beyond looking a zone name up in the system's time-zone database.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from cuvee.config.datetime_format import (DateTimeFormat, TimeFormatKind, java_to_strftime, parse_datetime_format,
                                          parse_granularity, strftime_pattern)
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.time_zones import offset_seconds, zone_id

# Java TimeUnit names → nanoseconds, so conversions between any two are exact integer ratios.
_UNIT_NANOS: dict[str, int] = {"NANOSECONDS": 1, "MICROSECONDS": 1_000, "MILLISECONDS": 1_000_000,
                               "SECONDS": 1_000_000_000, "MINUTES": 60_000_000_000, "HOURS": 3_600_000_000_000,
                               "DAYS": 86_400_000_000_000}
_TRUNC_UNITS = ("MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")
_EPOCH_UNITS = {"SECONDS": 1000, "MINUTES": 60_000, "HOURS": 3_600_000, "DAYS": 86_400_000}
_TO_EPOCH = re.compile(r"^TOEPOCH(SECONDS|MINUTES|HOURS|DAYS)(ROUNDED|BUCKET)?$")
_FROM_EPOCH = re.compile(r"^FROMEPOCH(SECONDS|MINUTES|HOURS|DAYS)(BUCKET)?$")
_NUMERIC_TYPES = {exp.DataType.Type.BIGINT, exp.DataType.Type.INT, exp.DataType.Type.SMALLINT,
                  exp.DataType.Type.TINYINT, exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT,
                  exp.DataType.Type.DECIMAL, exp.DataType.Type.INT128}
_TIMESTAMP_TYPES = {exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.DATETIME,
                    exp.DataType.Type.TIMESTAMP_MS, exp.DataType.Type.TIMESTAMPNTZ}
_PLAIN_TIMESTAMPS = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPNTZ)


def sql_error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


def call(name: str, *args: exp.Expression) -> exp.Expression:
    """A DuckDB function call, written as named (no sqlglot re-interpretation of the name)."""
    return exp.Anonymous(this=name, expressions=list(args))


def bigint(node: exp.Expression) -> exp.Cast:
    """``node`` typed BIGINT: Pinot's LONG answers, recognisable as numbers by ``TimeTypes.is_number``."""
    return exp.Cast(this=node, to=exp.DataType.build("BIGINT"))


def long_value(node: exp.Expression) -> exp.Expression:
    """``node`` as the Java ``long`` Pinot's time functions take: a fraction dropped toward zero, and BIGINT before
    any multiplication (an INT column times a unit ratio would overflow DuckDB's INT32)."""
    bare = node
    while isinstance(bare, exp.Paren):
        bare = bare.this
    if isinstance(bare, exp.Cast) and bare.to.this is exp.DataType.Type.BIGINT:
        return bare
    return bigint(call("trunc", node))


def number(value: int) -> exp.Literal:
    return exp.Literal.number(value)


def string_literal(node: exp.Expression, function: str, what: str) -> str:
    """The text of a string literal argument; anything else is a 150 naming the function and the argument."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise sql_error(f"{function}: {what} must be a string literal, got {node.sql(dialect='duckdb')}")
    return node.name


def int_literal(node: exp.Expression, function: str, what: str) -> int:
    inner, sign = (node.this, -1) if isinstance(node, exp.Neg) else (node, 1)
    if not (isinstance(inner, exp.Literal) and not inner.is_string and inner.name.isdigit()):
        raise sql_error(f"{function}: {what} must be an integer literal, got {node.sql(dialect='duckdb')}")
    return sign * int(inner.name)


def zone_literal(node: exp.Expression, function: str) -> str:
    """A time-zone argument as ``cuvee.query.time_zones`` reads it (an IANA name, a name of UTC, a fixed offset like
    '+05:30' or 'GMT-08:00'); unknown zones are a 150, not DuckDB's error."""
    zone = string_literal(node, function, "the time zone")
    known = zone_id(zone)
    if known is None:
        raise sql_error(f"{function}: unknown time zone {zone!r} (use an IANA name like 'America/Los_Angeles' or an "
                        "offset like '+05:30')")
    return known


def time_unit(node: exp.Expression, function: str, what: str = "the time unit") -> str:
    unit = string_literal(node, function, what).strip().upper()
    if unit not in _UNIT_NANOS:
        raise sql_error(f"{function}: unknown {what} {unit!r}, expected one of {', '.join(_UNIT_NANOS)}")
    return unit


def convert_units(value: exp.Expression, source: str, target: str) -> exp.Expression:
    """Java's ``TimeUnit.convert`` of a ``long``: multiply into a finer unit, divide (toward zero) into a coarser
    one; the value is widened to BIGINT first, so an INT column of days converts to millis without overflow."""
    ratio_up, ratio_down = _UNIT_NANOS[source], _UNIT_NANOS[target]
    if ratio_up == ratio_down:
        return value
    if ratio_up > ratio_down:
        return bigint(exp.Mul(this=long_value(value), expression=number(ratio_up // ratio_down)))
    return bigint(exp.IntDiv(this=long_value(value), expression=number(ratio_down // ratio_up)))


def instant(millis: exp.Expression, zone: str) -> exp.Expression:
    """The wall-clock TIMESTAMP that epoch ``millis`` (or a UTC TIMESTAMP) shows in ``zone``."""
    moment = millis if isinstance(millis, _UtcTime) else call("epoch_ms", bigint(millis))
    if isinstance(moment, _UtcTime):
        moment = moment.this
    if zone == "UTC":
        return moment
    shift = offset_seconds(zone)
    if shift is not None:  # a fixed offset: the wall clock is the instant shifted
        return exp.Add(this=moment, expression=_seconds(shift))
    return call("timezone", exp.Literal.string(zone), call("timezone", exp.Literal.string("UTC"), moment))


def _seconds(count: int) -> exp.Interval:
    return exp.Interval(this=exp.Literal.string(str(count)), unit=exp.Var(this="SECOND"))


def wall_millis(wall: exp.Expression, zone: str) -> exp.Expression:
    """Epoch millis of a wall-clock TIMESTAMP read in ``zone`` (the inverse of ``instant``)."""
    shift = offset_seconds(zone)
    if shift is not None:
        wall = exp.Sub(this=wall, expression=_seconds(shift))
    elif zone != "UTC":
        wall = call("timezone", exp.Literal.string(zone), wall)
    return call("epoch_ms", wall)


def strftime_of(java: str, function: str) -> str:
    """``java`` as a strftime pattern, or a 150 naming ``function`` when it has fields we cannot translate."""
    pattern = strftime_pattern(java)
    if pattern is None:
        raise sql_error(f"{function}: the date pattern {java!r} has fields this translation cannot read or write "
                        "(time-zone letters, week fields, …)")
    return pattern


class _UtcTime(exp.Expression):
    """A marker around a TIMESTAMP already in UTC, so ``instant`` does not convert it to millis and back; never
    written out (``instant`` unwraps it)."""


@dataclass(frozen=True)
class TimeTypes:
    """What the translation knows about the types of a query's columns (their Pinot types, by name)."""

    timestamps: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()
    string_times: Mapping[str, str] = field(default_factory=dict)

    def is_timestamp(self, node: exp.Expression) -> bool:
        """Whether DuckDB sees ``node`` as a TIMESTAMP that Pinot would see as epoch millis."""
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column):
            return node.name in self.timestamps
        if isinstance(node, exp.Cast):
            return node.to.this in _TIMESTAMP_TYPES
        return isinstance(node, exp.CurrentTimestamp)

    def is_number(self, node: exp.Expression) -> bool:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, exp.Column):
            return node.name in self.numbers
        if isinstance(node, exp.Cast):
            return node.to.this in _NUMERIC_TYPES
        if isinstance(node, exp.Literal):
            return not node.is_string
        if isinstance(node, exp.Neg):
            return self.is_number(node.this)
        return isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.IntDiv, exp.Mod))

    def millis(self, node: exp.Expression) -> exp.Expression:
        """``node`` as Pinot hands it to functions: a TIMESTAMP (or a STRING date-time column) as epoch millis."""
        bare = node
        while isinstance(bare, exp.Paren):
            bare = bare.this
        if isinstance(bare, exp.Cast) and isinstance(bare.this, exp.Anonymous) and \
                bare.this.name.lower() == "epoch_ms" and bare.to.this in _PLAIN_TIMESTAMPS:
            return bare.this.expressions[0]  # CAST(epoch_ms(x) AS TIMESTAMP), our LONG → TIMESTAMP: x itself
        if self.is_timestamp(bare):
            return call("epoch_ms", bare)
        if isinstance(bare, exp.Column) and bare.name in self.string_times:
            return call("epoch_ms", self.parsed(bare))
        return node

    def moment(self, node: exp.Expression) -> exp.Expression:
        """``node`` for ``instant``: a TIMESTAMP or STRING date-time column as it is, anything else as millis."""
        if self.is_timestamp(node):
            return _UtcTime(this=node)
        if isinstance(node, exp.Column) and node.name in self.string_times:
            return _UtcTime(this=self.parsed(node))
        return node

    def parsed(self, column: exp.Column) -> exp.Expression:
        """A STRING date-time column read with its schema pattern (a wall-clock TIMESTAMP, UTC)."""
        return call("strptime", column, exp.Literal.string(java_to_strftime(self.string_times[column.name])))

    def cast_to_timestamp(self, node: exp.Cast) -> exp.Expression:
        """Pinot's ``CAST(x AS TIMESTAMP)``: a number is epoch millis; a TIMESTAMP stays; a string is parsed."""
        inner = node.this
        if self.is_timestamp(inner):
            return node
        if self.is_number(inner):
            return exp.Cast(this=call("epoch_ms", bigint(inner)), to=exp.DataType.build("TIMESTAMP"))
        if isinstance(inner, exp.Column) and inner.name in self.string_times:
            return exp.Cast(this=self.parsed(inner), to=exp.DataType.build("TIMESTAMP"))
        return node


def date_trunc(args: list[exp.Expression], types: TimeTypes, name: str) -> exp.Expression:
    """``dateTrunc(unit, value[, inputUnit[, zone[, outputUnit]]])``: LONG, in outputUnit (default inputUnit)."""
    if not 2 <= len(args) <= 5:
        raise sql_error(f"{name} takes 2 to 5 arguments (unit, timeValue[, inputTimeUnit[, timeZone[, "
                        f"outputTimeUnit]]]), got {len(args)}")
    unit = string_literal(args[0], name, "the unit").strip().upper()
    if unit not in _TRUNC_UNITS:
        raise sql_error(f"{name}: unknown unit {unit.lower()!r}, expected one of "
                        f"{', '.join(u.lower() for u in _TRUNC_UNITS)}")
    input_unit = time_unit(args[2], name, "input time unit") if len(args) > 2 else "MILLISECONDS"
    zone = zone_literal(args[3], name) if len(args) > 3 else "UTC"
    output_unit = time_unit(args[4], name, "output time unit") if len(args) > 4 else input_unit
    value = types.moment(args[1])
    millis = value if value is not args[1] else convert_units(args[1], input_unit, "MILLISECONDS")
    truncated = call("date_trunc", exp.Literal.string(unit.lower()), instant(millis, zone))
    return convert_units(bigint(wall_millis(truncated, zone)), "MILLISECONDS", output_unit)


def _split_zone(fmt: DateTimeFormat, text: str) -> tuple[str | None, str]:
    """A SIMPLE_DATE_FORMAT's Java pattern and its zone: ``pattern tz(Zone)`` (colon form) or ``SDF|pattern|Zone``."""
    pattern = fmt.pattern or ""
    zone = "UTC"
    match = re.search(r"\s*tz\(([^)]*)\)\s*$", pattern)
    if match:
        pattern, zone = pattern[:match.start()], match.group(1).strip()
    elif "|" in text and len(text.split("|")) == 3:
        zone = text.split("|")[2].strip()
    return pattern, zone


def _format(node: exp.Expression, function: str, what: str) -> tuple[DateTimeFormat, str, str]:
    text = string_literal(node, function, what)
    try:
        fmt = parse_datetime_format(text)
    except ValueError as e:
        raise sql_error(f"{function}: bad {what}: {e}") from None
    pattern, zone = _split_zone(fmt, text) if fmt.kind is TimeFormatKind.SIMPLE_DATE_FORMAT else ("", "UTC")
    if zone != "UTC":
        zone = zone_literal(exp.Literal.string(zone), function)
    return fmt, pattern, zone


def date_time_convert(args: list[exp.Expression], types: TimeTypes) -> exp.Expression:
    """``dateTimeConvert(value, inputFormat, outputFormat, granularity)``: the value read in inputFormat, bucketed
    to the granularity (in the output's zone for a date format) and written in outputFormat."""
    name = "DATETIMECONVERT"
    if len(args) != 4:
        raise sql_error(f"{name} takes 4 arguments (value, inputFormat, outputFormat, outputGranularity), "
                        f"got {len(args)}")
    source, source_pattern, source_zone = _format(args[1], name, "input format")
    target, target_pattern, target_zone = _format(args[2], name, "output format")
    try:
        size, unit = parse_granularity(string_literal(args[3], name, "the output granularity"))
    except ValueError as e:
        raise sql_error(f"{name}: bad output granularity: {e}") from None
    bucket = size * _UNIT_NANOS[unit] // _UNIT_NANOS["MILLISECONDS"]
    if bucket < 1:
        raise sql_error(f"{name}: the output granularity must be at least a millisecond")

    value = args[0]
    if source.kind is TimeFormatKind.SIMPLE_DATE_FORMAT:
        wall = call("strptime", value, exp.Literal.string(strftime_of(source_pattern, name)))
        millis: exp.Expression = bigint(wall_millis(wall, source_zone))
    elif source.kind is TimeFormatKind.TIMESTAMP or types.is_timestamp(value):
        millis = types.millis(value)
    else:
        whole = bigint(call("trunc", value))  # Java reads a LONG: a DOUBLE loses its fraction, toward zero
        millis = convert_units(bigint(exp.Mul(this=whole, expression=number(source.size))), source.unit,
                               "MILLISECONDS")

    def floor_to_bucket(ms: exp.Expression) -> exp.Expression:  # ms - (ms mod bucket), the calendar's floor
        if bucket == 1:
            return ms
        remainder = exp.Mod(this=exp.paren(exp.Add(this=exp.paren(exp.Mod(this=exp.paren(ms), expression=number(
            bucket))), expression=number(bucket))), expression=number(bucket))
        return bigint(exp.Sub(this=exp.paren(ms.copy()), expression=exp.paren(remainder)))

    if target.kind is TimeFormatKind.SIMPLE_DATE_FORMAT:
        local = call("epoch_ms", instant(millis, target_zone))  # the zone's wall clock, as if it were UTC
        wall = call("epoch_ms", floor_to_bucket(local))
        return call("strftime", wall, exp.Literal.string(strftime_of(target_pattern, name)))
    bucketed = floor_to_bucket(millis)
    if target.kind is TimeFormatKind.TIMESTAMP:
        return exp.Cast(this=call("epoch_ms", bucketed), to=exp.DataType.build("TIMESTAMP"))
    step = bigint(exp.IntDiv(this=exp.paren(convert_units(bucketed, "MILLISECONDS", target.unit)),
                             expression=number(target.size))) if target.size != 1 else \
        convert_units(bucketed, "MILLISECONDS", target.unit)
    return step


def _to_date_time(args: list[exp.Expression], types: TimeTypes, name: str) -> exp.Expression:
    if len(args) not in (2, 3):
        raise sql_error(f"{name} takes 2 or 3 arguments (millis, pattern[, timeZone]), got {len(args)}")
    pattern = strftime_of(string_literal(args[1], name, "the date pattern"), name)
    zone = zone_literal(args[2], name) if len(args) == 3 else "UTC"
    return call("strftime", instant(types.moment(args[0]), zone), exp.Literal.string(pattern))


def _from_date_time(args: list[exp.Expression], name: str) -> exp.Expression:
    if len(args) not in (2, 3):
        raise sql_error(f"{name} takes 2 or 3 arguments (text, pattern[, timeZone]), got {len(args)}")
    pattern = strftime_of(string_literal(args[1], name, "the date pattern"), name)
    zone = zone_literal(args[2], name) if len(args) == 3 else "UTC"
    return bigint(wall_millis(call("strptime", args[0], exp.Literal.string(pattern)), zone))


def _time_convert(args: list[exp.Expression], types: TimeTypes, name: str) -> exp.Expression:
    if len(args) != 3:
        raise sql_error(f"{name} takes 3 arguments (value, fromUnit, toUnit), got {len(args)}")
    source, target = time_unit(args[1], name, "from unit"), time_unit(args[2], name, "to unit")
    return convert_units(types.millis(args[0]), source, target)


def _round(args: list[exp.Expression], types: TimeTypes) -> exp.Expression | None:
    """Two-argument ``round(value, toNearest)`` is Pinot's time rounding, ``(value / toNearest) * toNearest`` in
    LONG arithmetic (decimal rounding is ``roundDecimal``); one argument stays DuckDB's."""
    if len(args) != 2:
        return None
    value = bigint(call("trunc", types.millis(args[0])))
    return bigint(exp.Mul(this=exp.paren(exp.IntDiv(this=value, expression=exp.paren(args[1]))),
                          expression=exp.paren(args[1])))


def _epoch(upper: str, args: list[exp.Expression], types: TimeTypes) -> exp.Expression | None:
    """toEpoch{Seconds,…}[Rounded|Bucket](millis[, n]) and fromEpoch{Seconds,…}[Bucket](value[, n])."""
    to, back = _TO_EPOCH.match(upper), _FROM_EPOCH.match(upper)
    match = to or back
    if match is None:
        return None
    variant = match.group(2)
    wanted = 2 if variant else 1
    if len(args) != wanted:
        raise sql_error(f"{upper} takes {wanted} argument(s), got {len(args)}")
    unit_ms = number(_EPOCH_UNITS[match.group(1)])
    if back is not None:
        value = long_value(args[0]) if not variant else exp.Mul(this=long_value(args[0]),
                                                                  expression=long_value(args[1]))
        return bigint(exp.Mul(this=exp.paren(value), expression=unit_ms))
    value = exp.IntDiv(this=exp.paren(types.millis(args[0])), expression=unit_ms)
    if variant == "BUCKET":
        return bigint(exp.IntDiv(this=value, expression=exp.paren(args[1])))
    if variant == "ROUNDED":
        return bigint(exp.Mul(this=exp.paren(exp.IntDiv(this=value, expression=exp.paren(args[1]))),
                              expression=exp.paren(args[1])))
    return bigint(value)


_HANDLERS: dict[str, Callable[[list[exp.Expression], TimeTypes, str], exp.Expression]] = {
    "DATETRUNC": date_trunc,
    "DATE_TRUNC": date_trunc,
    "DATETIMECONVERT": lambda args, types, _: date_time_convert(args, types),
    "TODATETIME": _to_date_time,
    "FROMDATETIME": lambda args, _, name: _from_date_time(args, name),
    "TIMECONVERT": _time_convert,
}


def translate_datetime(upper: str, args: list[exp.Expression], types: TimeTypes) -> exp.Expression | None:
    """The DuckDB form of Pinot date-time function ``upper`` (an upper-case name), or None if it is not one."""
    handler = _HANDLERS.get(upper)
    if handler is not None:
        return handler(args, types, upper)
    if upper == "ROUND":
        return _round(args, types)
    return _epoch(upper, args, types)
