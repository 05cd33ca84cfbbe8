"""A hybrid table's time boundary (Pinot's rule), and the time column's unit it is computed in. Pure.

The broker sends ``time <= boundary`` to the OFFLINE half and ``time > boundary`` to the REALTIME half, so a row
present in both halves is counted once. The boundary is the largest end time of the offline segments being
served, minus one day (minus one hour when the table is pushed HOURLY and its time unit is finer than a day): the
offline data of the last day may still be incomplete, the realtime half answers for it. Values are in the time
column's own unit (epoch values of ``size × unit``), as stored in segment metadata.

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


def compute_time_boundary(end_times: Iterable[int | None], step_ms: float, push_frequency: str | None) -> int | None:
    """Pinot's boundary over the served offline segments' end times (None where unknown); None if none is known."""
    ends = [t for t in end_times if t is not None]
    if not ends:
        return None
    offset_ms = HOUR_MS if (push_frequency or "").upper() == "HOURLY" and step_ms < DAY_MS else DAY_MS
    return max(ends) - max(1, round(offset_ms / step_ms))


def to_millis(value: int, step_ms: float) -> int:
    """An epoch value of the time column in milliseconds."""
    return int(value * step_ms)


def hybrid_halves(boundary: int | None, column: str | None,
                  realtime_has_segments: bool) -> dict[TableType, TimeFilter | None]:
    """Which halves a read of a hybrid table covers, each with the filter on its
    rows (None: all of them). Degenerate cases keep "exactly once" without a filter: no boundary yet (no served
    offline segment with an end time) → the realtime half alone; a realtime half without segments → the offline
    half alone. The broker and the Spark reader both split by this rule."""
    if boundary is None or column is None:
        return {TableType.REALTIME: None}
    if not realtime_has_segments:
        return {TableType.OFFLINE: None}
    return {TableType.OFFLINE: TimeFilter(column, OFFLINE_OP, boundary),
            TableType.REALTIME: TimeFilter(column, REALTIME_OP, boundary)}
