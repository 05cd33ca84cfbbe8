"""The retention plan: only committed, expired segments with a known end time; never consuming ones, segments a
live push is adding, or a realtime partition's latest; lineage leftovers after their grace; stale pushes reverted."""

from __future__ import annotations

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.cluster.retention import RetentionSnapshot, plan_retention
from cuvee.cluster.time_boundary import DAY_MS
from cuvee.lineage.model import LineageEntry, LineageState, SegmentLineage

NOW = 100 * DAY_MS


def rec(name: str, status: SegmentStatus, end_day: float | None, partition: int | None = None,
        sequence: int | None = None) -> SegmentRecord:
    return SegmentRecord(segment_name=name, status=status, creation_time_ms=0, partition=partition,
                         sequence=sequence, time_min=0 if end_day is not None else None,
                         time_max=int(end_day * DAY_MS) if end_day is not None else None)


def snapshot(records: list[SegmentRecord], *, realtime: bool = False, retention_days: int | None = 30,
             lineage: SegmentLineage | None = None, step_ms: float | None = 1.0) -> RetentionSnapshot:
    return RetentionSnapshot("t_X", realtime, retention_days * DAY_MS if retention_days else None, step_ms,
                             {r.segment_name: r for r in records}, {r.segment_name: {"s": "ONLINE"} for r in records},
                             lineage)


def plan(snap: RetentionSnapshot, **kw: int):  # type: ignore[no-untyped-def]
    return plan_retention(snap, NOW, lineage_grace_ms=kw.get("grace", DAY_MS), in_progress_timeout_ms=kw.get("stale", DAY_MS))


def test_only_committed_segments_past_retention_with_an_end_time() -> None:
    records = [rec("old", SegmentStatus.UPLOADED, 60), rec("edge", SegmentStatus.UPLOADED, 70),
               rec("new", SegmentStatus.UPLOADED, 99), rec("unknown", SegmentStatus.UPLOADED, None),
               rec("consuming", SegmentStatus.IN_PROGRESS, 1), rec("committing", SegmentStatus.COMMITTING, 1)]
    result = plan(snapshot(records))
    assert result.expired == ("old",)  # "edge" ends exactly at the cutoff: kept
    assert result.unknown_end == 1
    assert plan(snapshot(records, retention_days=None)).empty
    assert plan(snapshot(records, step_ms=None)).expired == ()  # no comparable time column
    in_days = [SegmentRecord(segment_name=n, status=SegmentStatus.UPLOADED, creation_time_ms=0, time_min=0,
                             time_max=end) for n, end in (("d69", 69), ("d70", 70))]  # a time column in days
    assert plan(snapshot(in_days, step_ms=DAY_MS)).expired == ("d69",)


def test_a_realtime_partitions_latest_segment_is_kept() -> None:
    records = [rec("p0_1", SegmentStatus.DONE, 1, 0, 1), rec("p0_2", SegmentStatus.DONE, 2, 0, 2),
               rec("p1_1", SegmentStatus.DONE, 1, 1, 1), rec("p1_2", SegmentStatus.IN_PROGRESS, None, 1, 2)]
    assert plan(snapshot(records, realtime=True)).expired == ("p0_1", "p1_1")


def test_segments_outside_the_ideal_state_are_never_expired() -> None:
    snap = snapshot([rec("old", SegmentStatus.UPLOADED, 1)])
    snap = RetentionSnapshot(snap.table, False, snap.retention_ms, 1.0, snap.records, {}, None)
    assert plan(snap).expired == ()  # a push between its metadata and its ideal state


def test_lineage_leftovers_and_stale_pushes() -> None:
    entries = {
        "done-old": LineageEntry(("a",), ("b",), LineageState.COMPLETED, NOW - 2 * DAY_MS),
        "done-new": LineageEntry(("c",), ("d",), LineageState.COMPLETED, NOW - 1000),
        "reverted": LineageEntry(("e",), ("f",), LineageState.REVERTED, NOW - 1000),
        "stale": LineageEntry((), ("g", "old"), LineageState.IN_PROGRESS, NOW - 2 * DAY_MS),
        "live": LineageEntry(("h",), ("i", "j"), LineageState.IN_PROGRESS, NOW - 1000),
    }
    names = "abcdefghij"
    records = [rec(n, SegmentStatus.UPLOADED, 99) for n in names] + [rec("old", SegmentStatus.UPLOADED, 1)]
    records.append(rec("i", SegmentStatus.UPLOADED, 1))  # expired, but a live push is adding it
    result = plan(snapshot(records, lineage=SegmentLineage("t_X", entries)))
    assert result.replaced == ("a", "f", "g", "old")
    assert result.revert == ("stale",)
    assert result.expired == ()  # "old" goes as a stale push's segment; "i" is being pushed
