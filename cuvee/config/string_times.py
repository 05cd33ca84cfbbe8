"""A time column held as formatted strings (``SIMPLE_DATE_FORMAT``, e.g. ClickBench's ``EventTime``
``1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss``): its values as instants, and instants back in its format.

A hybrid table splits at a time boundary. Pinot computes it in epoch milliseconds (segment start/end times of a
date-string column are stored in millis, ``DateTimeFormatSpec.fromFormatToMillis``) and renders it in the column's
own format for the filter each half gets (``fromMillisToFormat``); we do the same. Comparing the stored strings is
only right where the format sorts as time: fixed-width fields, most significant first (``yyyy-MM-dd HH:mm:ss``,
``yyyyMMdd``). Any other pattern (``dd/MM/yyyy``, ``M/d/yyyy``, ``MMM dd yyyy``) is compared by parsing each value.

The Java pattern is read by ``cuvee.config.datetime_format.strftime_pattern`` (the one translation the SQL
functions also use); patterns it cannot translate (zones, week fields) and zoned formats (``tz(...)``) are not
string time columns here: such a table gets no computed boundary, as before; so are two-digit years (``yy``:
DuckDB's century pivot is not Java's). Values are UTC wall times.
Parsing and rendering run in DuckDB (vectorised; the same ``strptime``/``strftime`` a server's predicate uses, so
the broker's boundary text and a server's parse of it always agree).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.datetime_format import TimeFormatKind, parse_datetime_format, strftime_pattern
from cuvee.config.schema import DataType, Schema

MAX_PATTERN_CHARS = 64  # a date pattern from the wire; ClickBench's is 19
# The instants a pattern's four-digit year can write (0001-01-01 .. 9999-12-31 23:59:59.999 UTC): a boundary outside
# cannot be rendered (DuckDB refuses) or renders with a fifth digit that no longer sorts as time.
MIN_MILLIS, MAX_MILLIS = -62_135_596_800_000, 253_402_300_799_999
# the fields, most significant first, of patterns whose strings sort as their instants (each at its fixed width)
_SORTED_FIELDS = ("yyyy", "MM", "dd", "HH", "mm", "ss", "SSS")
_PRINTABLE = re.compile(r"[ -~]+")  # printable ASCII only


@dataclass(frozen=True)
class StringTimes:
    """A Java date pattern a string time column is written in; ``strftime`` is its DuckDB spelling."""

    pattern: str
    strftime: str

    @property
    def sorts_as_time(self) -> bool:
        return sorts_as_time(self.pattern)

    def sql_literal(self) -> str:
        """The strftime pattern as a SQL string literal."""
        return "'" + self.strftime.replace("'", "''") + "'"


def string_times(pattern: str) -> StringTimes:
    """A pattern's ``StringTimes``; ValueError when it is too long, not printable ASCII, or has fields the
    translation cannot read (zones, week fields, ...)."""
    if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_PATTERN_CHARS or not _PRINTABLE.fullmatch(pattern):
        raise ValueError(f"a date pattern must be 1 to {MAX_PATTERN_CHARS} printable ASCII characters")
    if any(len(run) != 4 for run in re.findall(r"y+", re.sub(r"'[^']*'", "", pattern))):
        # DuckDB's %y pivots at 69 (68 is 2068, 69 is 1969), Java's a century around now (1950-2049 in Pinot's
        # tests): the instants, so the halves, would differ from Pinot's
        raise ValueError(f"the date pattern {pattern!r} has a year of other than four digits (yyyy)")
    translated = strftime_pattern(pattern)
    if translated is None:
        raise ValueError(f"the date pattern {pattern!r} has fields that cannot be read (zones, week fields, ...)")
    return StringTimes(pattern, translated)


def column_string_times(schema: Schema, column: str | None) -> StringTimes | None:
    """The pattern of ``column`` when it is a STRING column with an unzoned SIMPLE_DATE_FORMAT format we can read;
    None otherwise (an epoch or TIMESTAMP column, no time column, a zoned or untranslatable pattern)."""
    if column is None or not schema.has_column(column):
        return None
    spec = schema.column(column)
    if spec.data_type is not DataType.STRING or not spec.format:
        return None
    try:
        fmt = parse_datetime_format(spec.format)
    except ValueError:
        return None
    if fmt.kind is not TimeFormatKind.SIMPLE_DATE_FORMAT or not fmt.pattern or "tz(" in fmt.pattern or \
            len(spec.format.split("|")) > 2:
        return None
    try:
        return string_times(fmt.pattern)
    except ValueError:
        return None


def column_unit_ms(schema: Schema, column: str) -> float:
    """Milliseconds of the format's unit (86,400,000 for ``1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd``): Pinot's HOURLY
    rule subtracts an hour only from columns whose unit is finer than a day."""
    return parse_datetime_format(schema.column(column).format or "").millis_per_value


def sorts_as_time(pattern: str) -> bool:
    """True when the pattern's strings order as their instants: its fields are a leading run of
    ``yyyy MM dd HH mm ss SSS`` at exactly those widths, in that order (quoted text and separators are constant)."""
    unquoted = re.sub(r"'[^']*'", "", pattern)
    fields = tuple(m.group(0) for m in re.finditer(r"([A-Za-z])\1*", unquoted))
    return 0 < len(fields) and fields == _SORTED_FIELDS[:len(fields)]


def in_range(millis: int) -> bool:
    """True when ``millis`` is an instant a date string can hold (years 0001 to 9999)."""
    return MIN_MILLIS <= millis <= MAX_MILLIS


def clamp_millis(millis: int) -> int:
    """``millis`` moved into the years 0001 to 9999: a boundary beyond them splits the stored strings (all inside)
    as the range's end does."""
    return min(max(millis, MIN_MILLIS), MAX_MILLIS)


def _strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The rows' values as one plain string array (a dictionary decoded: it may hold values no row uses)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    return values.cast(pa.string())


def to_millis(values: pa.Array | pa.ChunkedArray, times: StringTimes) -> pa.Array:
    """Each value's instant in epoch milliseconds (int64; null for a null or a value that does not parse). Parses
    each distinct value once."""
    strings = _strings(values)
    distinct = pc.unique(strings)
    con = duckdb.connect()
    try:
        con.register("string_times", pa.table({"v": distinct}))
        parsed = con.execute(f"SELECT epoch_ms(try_strptime(v, {times.sql_literal()})) FROM string_times"
                             ).to_arrow_table().column(0).combine_chunks()
    finally:
        con.close()
    return parsed.take(pc.index_in(strings, value_set=distinct)).cast(pa.int64())


def millis_range(values: pa.Array | pa.ChunkedArray, times: StringTimes) -> tuple[int | None, int | None]:
    """The earliest and latest instant of ``values`` in epoch milliseconds (values that do not parse and nulls are
    skipped; None when none parses). One DuckDB aggregate over the strings: a segment build pays a parse per row,
    not a per-row instant array (``to_millis``) it would only reduce to two numbers."""
    con = duckdb.connect()
    try:
        con.register("string_times", pa.table({"v": _strings(values)}))
        parsed = f"epoch_ms(try_strptime(v, {times.sql_literal()}))"
        row = con.execute(f"SELECT min({parsed}), max({parsed}) FROM string_times").fetchone()
    finally:
        con.close()
    low, high = row if row is not None else (None, None)
    return (None if low is None else int(low)), (None if high is None else int(high))


@lru_cache(maxsize=256)
def render(millis: int, pattern: str) -> str:
    """``millis`` (epoch milliseconds, UTC) written in ``pattern`` (Pinot's ``fromMillisToFormat``)."""
    times = string_times(pattern)
    con = duckdb.connect()
    try:
        row = con.execute(f"SELECT strftime(epoch_ms(?::BIGINT), {times.sql_literal()})", [millis]).fetchone()
    finally:
        con.close()
    assert row is not None and isinstance(row[0], str)
    return row[0]


def render_literal(millis: int, pattern: str) -> str:
    """``render(millis, pattern)`` as a SQL string literal (a pattern's quoted text may hold a quote)."""
    return "'" + render(millis, pattern).replace("'", "''") + "'"


def sql_predicate(quoted_column: str, op: str, millis: int, times: StringTimes) -> str:
    """``column op boundary`` over a string time column: the stored strings against the boundary's text where the
    pattern sorts as time (a plain string compare: zone maps and dictionaries apply), else each value parsed
    (``''``, ``'null'`` — a missing STRING's default — or any other text that does not parse is in the realtime
    half, as Pinot's string compare puts ``'null'``; a NULL is in neither, as on an epoch column). On the string
    path a value that does not parse lands where its text sorts, as in Pinot. ``op`` and ``millis`` are checked by
    the caller (``cuvee.protocol.query.TimeFilter``)."""
    if times.sorts_as_time:
        return f"{quoted_column} {op} {render_literal(int(millis), times.pattern)}"
    compared = f"epoch_ms(try_strptime({quoted_column}, {times.sql_literal()})) {op} {int(millis)}"
    return compared if op == "<=" else f"coalesce({compared}, {quoted_column} IS NOT NULL)"
