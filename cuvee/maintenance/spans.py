"""A table half's committed segments as the planners see them (pure): served (in the ideal state, not hidden by
lineage), committed (never a consuming segment), with their time range in epoch milliseconds."""

from __future__ import annotations

from collections.abc import Mapping, Set

from cuvee.cluster.records import SegmentRecord
from cuvee.maintenance.merge_plan import SegmentSpan


def committed_spans(records: Mapping[str, SegmentRecord], ideal: Mapping[str, object], hidden: Set[str],
                    step_ms: float | None) -> list[SegmentSpan]:
    """``step_ms``: milliseconds per unit of the time column (``cluster.time_boundary.millis_per_value``); None
    when the column is not an epoch column: then no segment has a usable range."""
    out = []
    for name in sorted(ideal):
        record = records.get(name)
        if name in hidden or record is None or record.is_consuming:
            continue
        start = end = None
        if step_ms is not None and record.time_min is not None and record.time_max is not None:
            start, end = int(record.time_min * step_ms), int(record.time_max * step_ms)
        out.append(SegmentSpan(name, start, end, record.total_docs))
    return out
