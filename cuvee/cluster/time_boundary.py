"""A hybrid table's time boundary (Pinot's rule), and the time column's unit it is computed in. Pure.

The broker sends ``time <= boundary`` to the OFFLINE half and ``time > boundary`` to the REALTIME half, so a row
present in both halves is counted once. The boundary is the largest end time of the offline segments being
served, minus one day (minus one hour when the table is pushed HOURLY and its time unit is finer than a day): the
offline data of the last day may still be incomplete, the realtime half answers for it. Values are in the time
column's own unit (epoch values of ``size × unit``), as stored in segment metadata; for a column of formatted date
strings (``SIMPLE_DATE_FORMAT``) in epoch milliseconds, as Pinot records them, and each half's filter carries the
column's pattern so servers compare in the column's own format (``cuvee.config.string_times``).

"Served" comes from the ideal state, as in Pinot, not from the external view alone: when every server holding the
offline half is down, the boundary stays where it was and the offline half's segments are reported unavailable,
instead of the boundary vanishing and the realtime half silently answering alone for all time. A segment pushed
moments ago and not yet loaded anywhere counts only once ONLINE on a server or ``new_segment_grace_ms`` after its
push (Pinot's new-segment expiration): it neither moves the boundary over rows nobody serves yet nor is reported
unavailable while it is being loaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from cuvee.cluster.records import SegmentState
from cuvee.config.datetime_format import TimeFormatKind, parse_datetime_format
from cuvee.config.schema import DataType, Schema
from cuvee.config.string_times import clamp_millis, column_string_times, column_unit_ms
from cuvee.config.table import TableType
from cuvee.protocol.query import TimeFilter

DAY_MS = 86_400_000
HOUR_MS = 3_600_000
OFFLINE_OP = "<="  # the offline half answers for time <= boundary
REALTIME_OP = ">"
NEW_SEGMENT_GRACE_SECONDS = 300.0  # Pinot's default new-segment expiration


def expected_offline_segments(ideal: Mapping[str, Mapping[str, SegmentState]],
                              view: Mapping[str, Mapping[str, SegmentState]], hidden: Set[str],
                              pushed_at_ms: Mapping[str, int | None], now_ms: int,
                              new_segment_grace_ms: int) -> frozenset[str]:
    """The offline segments that should be answering now: ONLINE in the ideal state, not hidden by lineage, and
    either ONLINE on some server or pushed at least ``new_segment_grace_ms`` ago (unknown push time: at once).
    The time boundary is computed over them; those ONLINE nowhere are unavailable, never silently skipped."""
    expected = set()
    for segment, replicas in ideal.items():
        if segment in hidden or SegmentState.ONLINE not in replicas.values():
            continue
        served = SegmentState.ONLINE in view.get(segment, {}).values()
        pushed = pushed_at_ms.get(segment)
        if served or pushed is None or now_ms - pushed >= new_segment_grace_ms:
            expected.add(segment)
    return frozenset(expected)


def millis_per_value(schema: Schema, column: str | None) -> float | None:
    """Milliseconds per step of the time column's values (1 for TIMESTAMP and millis, 86,400,000 for days); None
    when there is no time column or its values are not epoch numbers (date strings)."""
    if column is None or not schema.has_column(column):
        return None
    spec = schema.column(column)
    if spec.data_type is DataType.TIMESTAMP:
        return 1.0
    if not spec.format:
        return 1.0 if spec.data_type is DataType.LONG else None
    try:
        fmt = parse_datetime_format(spec.format)
    except ValueError:
        return None
    if fmt.kind is TimeFormatKind.TIMESTAMP:
        return 1.0
    return fmt.millis_per_value if fmt.kind is TimeFormatKind.EPOCH else None


def boundary_units(schema: Schema, column: str | None) -> tuple[float, float] | None:
    """``(step_ms, unit_ms)`` for the boundary of a table whose time column is ``column``: milliseconds per value of
    its segments' recorded end times, and of the column's own unit (Pinot's HOURLY rule reads it). Epoch and
    TIMESTAMP columns record their own values (both are ``millis_per_value``); a column of formatted date strings
    records milliseconds (``cuvee.config.string_times``), its unit is the format's. None: no boundary can be
    computed (no such column, or a format we cannot read)."""
    step = millis_per_value(schema, column)
    if step is not None:
        return step, step
    if column is not None and column_string_times(schema, column) is not None:
        return 1.0, column_unit_ms(schema, column)
    return None


def compute_time_boundary(end_times: Iterable[int | None], step_ms: float, push_frequency: str | None,
                          unit_ms: float | None = None) -> int | None:
    """Pinot's boundary over the served offline segments' end times (None where unknown); None if none is known.
    ``unit_ms``: the column's unit when end times are not in it (date strings: millis), else ``step_ms``."""
    ends = [t for t in end_times if t is not None]
    if not ends:
        return None
    unit = step_ms if unit_ms is None else unit_ms
    offset_ms = HOUR_MS if (push_frequency or "").upper() == "HOURLY" and unit < DAY_MS else DAY_MS
    return max(ends) - max(1, round(offset_ms / step_ms))


def to_millis(value: int, step_ms: float) -> int:
    """An epoch value of the time column in milliseconds."""
    return int(value * step_ms)


def hybrid_halves(boundary: int | None, column: str | None, realtime_has_segments: bool,
                  date_pattern: str | None = None) -> dict[TableType, TimeFilter | None]:
    """Which halves a read of a hybrid table covers, each with the filter on its
    rows (None: all of them). Degenerate cases keep "exactly once" without a filter: no boundary yet (no served
    offline segment with an end time) → the realtime half alone; a realtime half without segments → the offline
    half alone. The broker and the Spark reader both split by this rule. ``date_pattern``: the column's Java
    pattern when it holds formatted date strings (``boundary`` is then epoch milliseconds, moved into the years a
    date string can hold, so no boundary — explicit, or computed from a stray year-10000 value — breaks a query)."""
    if boundary is None or column is None:
        return {TableType.REALTIME: None}
    if not realtime_has_segments:
        return {TableType.OFFLINE: None}
    if date_pattern is not None:
        boundary = clamp_millis(boundary)
    return {TableType.OFFLINE: TimeFilter(column, OFFLINE_OP, boundary, date_pattern),
            TableType.REALTIME: TimeFilter(column, REALTIME_OP, boundary, date_pattern)}
