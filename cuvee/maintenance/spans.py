"""A table half's committed segments as the planners see them (pure): served (in the ideal state, not hidden by
lineage), committed (never a consuming segment), with their time range in epoch milliseconds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from cuvee.cluster.records import SegmentRecord
from cuvee.maintenance.merge_plan import SegmentSpan
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName


def committed_spans(records: Mapping[str, SegmentRecord], ideal: Mapping[str, object], hidden: Set[str],
                    step_ms: float | None) -> list[SegmentSpan]:
    """``step_ms``: milliseconds per unit of the time column (``cluster.time_boundary.millis_per_value``); None
    when the column is not an epoch column: then no segment has a usable range. A REALTIME table's latest stream
    (LLC) segment of each partition is left out even once committed: its end offset is where the partition goes
    on (the controller refuses to replace it)."""
    latest = _latest_per_partition(ideal)
    out = []
    for name in sorted(ideal):
        record = records.get(name)
        if name in hidden or record is None or record.is_consuming or name in latest:
            continue
        start = end = None
        if step_ms is not None and record.time_min is not None and record.time_max is not None:
            start, end = int(record.time_min * step_ms), int(record.time_max * step_ms)
        out.append(SegmentSpan(name, start, end, record.total_docs))
    return out


def _latest_per_partition(names: Iterable[str]) -> set[str]:
    newest: dict[tuple[str, int], LLCSegmentName] = {}
    for name in names:
        try:
            llc = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
        key = (llc.table, llc.partition)
        if key not in newest or llc.sequence > newest[key].sequence:
            newest[key] = llc
    return {llc.name for llc in newest.values()}
