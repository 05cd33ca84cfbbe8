"""What the retention task deletes from one table (name with type) now. Pure: snapshot in, plan out.

* **Expired**: a committed segment (DONE, UPLOADED) in the ideal state whose end time is older than now minus the
  table's retention (``segmentsConfig.retentionTimeUnit``/``retentionTimeValue``). Never a consuming or committing
  segment, never one without a known end time (counted as ``unknown_end``), never one an IN_PROGRESS lineage entry
  is pushing, and for a REALTIME table never a partition's latest segment (repair would otherwise restart the
  partition from the stream's reset offset; it holds the partition's next start).
* **Replaced**: the segmentsFrom of a COMPLETED lineage entry once ``lineage_grace_ms`` has passed since the switch
  (a reader that planned before it finishes); the segmentsTo of a REVERTED entry at once (never served, or served
  and withdrawn).
* **Stale pushes**: IN_PROGRESS lineage entries older than ``in_progress_timeout_ms`` (the pusher died and no
  re-run came to clean up) are reverted; their segmentsTo are deleted with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.cluster.time_boundary import to_millis
from cuvee.lineage.model import LineageState, SegmentLineage

_COMMITTED = (SegmentStatus.DONE, SegmentStatus.UPLOADED)


@dataclass(frozen=True)
class RetentionSnapshot:
    """``retention_ms``: None when the table keeps segments forever; ``step_ms``: milliseconds per time-column
    value (None: no epoch time column, so no end time is comparable)."""

    table: str
    realtime: bool
    retention_ms: int | None
    step_ms: float | None
    records: Mapping[str, SegmentRecord]
    ideal: Mapping[str, Mapping[str, str]]
    lineage: SegmentLineage | None


@dataclass(frozen=True)
class RetentionPlan:
    expired: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    revert: tuple[str, ...] = ()  # lineage entry ids
    unknown_end: int = 0

    @property
    def empty(self) -> bool:
        return not (self.expired or self.replaced or self.revert)


def plan_retention(snapshot: RetentionSnapshot, now_ms: int, *, lineage_grace_ms: int,
                   in_progress_timeout_ms: int) -> RetentionPlan:
    entries = snapshot.lineage.entries if snapshot.lineage is not None else {}
    stale = {eid for eid, e in entries.items()
             if e.state is LineageState.IN_PROGRESS and now_ms - e.timestamp_ms >= in_progress_timeout_ms}
    pushing = {s for eid, e in entries.items() if e.state is LineageState.IN_PROGRESS and eid not in stale
               for s in e.segments_to}
    replaced: set[str] = set()
    for eid, entry in entries.items():
        if entry.state is LineageState.COMPLETED and now_ms - entry.timestamp_ms >= lineage_grace_ms:
            replaced.update(entry.segments_from)
        elif entry.state is LineageState.REVERTED or eid in stale:
            replaced.update(entry.segments_to)
    replaced = (replaced & (set(snapshot.records) | set(snapshot.ideal))) - pushing
    expired, unknown = _expired(snapshot, now_ms, pushing)
    return RetentionPlan(tuple(sorted(set(expired) - replaced)), tuple(sorted(replaced)), tuple(sorted(stale)),
                         unknown)


def _expired(snapshot: RetentionSnapshot, now_ms: int, pushing: set[str]) -> tuple[list[str], int]:
    if snapshot.retention_ms is None:
        return [], 0
    latest = _latest_per_partition(snapshot.records) if snapshot.realtime else set()
    cutoff = now_ms - snapshot.retention_ms
    expired, unknown = [], 0
    for name in sorted(snapshot.ideal):
        record = snapshot.records.get(name)
        if record is None or record.status not in _COMMITTED or name in pushing or name in latest:
            continue
        if record.time_max is None or snapshot.step_ms is None:
            unknown += 1
            continue
        if to_millis(record.time_max, snapshot.step_ms) < cutoff:
            expired.append(name)
    return expired, unknown


def _latest_per_partition(records: Mapping[str, SegmentRecord]) -> set[str]:
    best: dict[int, SegmentRecord] = {}
    for record in records.values():
        if record.partition is None or record.sequence is None:
            continue
        held = best.get(record.partition)
        if held is None or record.sequence > (held.sequence or 0):
            best[record.partition] = record
    return {r.segment_name for r in best.values()}
