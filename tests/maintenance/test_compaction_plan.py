"""The UpsertCompactionTask planner (pure): buffer, thresholds, all-invalid segments emptied, replicas that
disagree or serve another copy skip the segment; candidates from records and the ideal state."""

from __future__ import annotations

import dataclasses

from cuvee.cluster.records import SegmentRecord, SegmentState, SegmentStatus
from cuvee.maintenance.compaction_plan import (Action, CompactionCandidate, ReplicaAnswer, candidates, decide,
                                               table_segments)
from cuvee.maintenance.config import UpsertCompactionConfig

DAY = 86_400_000
NOW = 100 * DAY


def seg(name: str = "t__0__1__20261126T0000Z", *, partition: int = 0, sequence: int = 1, end_ms: int | None = 0,
        docs: int = 10, crc: int = 7, replicas: tuple[str, ...] = ("s1", "s2")) -> CompactionCandidate:
    return CompactionCandidate(name, partition, sequence, end_ms, docs, crc, replicas)


def agree(segment: CompactionCandidate, kept: tuple[int, ...]) -> dict[str, ReplicaAnswer]:
    return {r: ReplicaAnswer(r, segment.crc, segment.total_docs, kept) for r in segment.replicas}


def test_only_segments_ended_a_buffer_ago_are_candidates() -> None:
    config = UpsertCompactionConfig(buffer_ms=DAY)
    old = seg("old", end_ms=NOW - 2 * DAY, sequence=3)
    older = seg("older", end_ms=NOW - 3 * DAY, sequence=2)
    recent = seg("recent", end_ms=NOW - DAY // 2, sequence=4)
    timeless = seg("timeless", end_ms=None, sequence=5)
    empty = seg("empty", end_ms=0, docs=0, sequence=1)
    other = seg("other", end_ms=0, partition=1, sequence=0)
    got = candidates(config, [recent, old, timeless, empty, other, older], NOW)
    assert [s.name for s in got] == ["older", "old", "other"]  # by partition, then sequence


def test_thresholds_percent_and_count_both_needed() -> None:
    segment = seg(docs=10)
    kept = (0, 1, 2, 3, 4, 5, 6)  # 3 invalid: 30%
    assert decide(UpsertCompactionConfig(0, 30.0, 3), segment, agree(segment, kept)).action is Action.COMPACT
    low_percent = decide(UpsertCompactionConfig(0, 31.0, 0), segment, agree(segment, kept))
    assert low_percent.action is Action.SKIP and "below the thresholds" in low_percent.reason
    assert decide(UpsertCompactionConfig(0, 0.0, 4), segment, agree(segment, kept)).action is Action.SKIP
    decision = decide(UpsertCompactionConfig(), segment, agree(segment, kept))
    assert (decision.action, decision.kept, decision.invalid) == (Action.COMPACT, kept, 3)


def test_a_segment_with_no_invalid_doc_is_left() -> None:
    segment = seg(docs=3)
    decision = decide(UpsertCompactionConfig(), segment, agree(segment, (0, 1, 2)))
    assert (decision.action, decision.reason) == (Action.SKIP, "no invalid doc")


def test_all_invalid_is_emptied() -> None:
    segment = seg(docs=4)
    decision = decide(UpsertCompactionConfig(0, 99.0, 4), segment, agree(segment, ()))
    assert (decision.action, decision.kept, decision.invalid) == (Action.EMPTY, (), 4)


def test_candidates_from_records_and_ideal_state() -> None:
    done = SegmentRecord("t__0__0__20261126T0000Z", SegmentStatus.DONE, 0, partition=0, sequence=0, total_docs=5,
                         crc=9, time_max=10)
    moving = dataclasses.replace(done, segment_name="t__0__1__20261126T0000Z", sequence=1)
    consuming = SegmentRecord("t__0__2__20261126T0000Z", SegmentStatus.IN_PROGRESS, 0, partition=0, sequence=2)
    ideal = {done.segment_name: {"s1": "ONLINE", "s2": SegmentState.ONLINE},
             moving.segment_name: {"s1": "ONLINE", "s3": "OFFLINE"},
             consuming.segment_name: {"s1": "CONSUMING"}, "pushed_segment": {"s1": "ONLINE"}}
    records = {r.segment_name: r for r in (done, moving, consuming)}
    got = table_segments(records, ideal, 1.0)
    assert [(c.name, c.replicas, c.end_ms, c.crc) for c in got] == [
        (done.segment_name, ("s1", "s2"), 10, 9), (moving.segment_name, (), 10, 9)]


def test_replicas_that_disagree_skip_the_segment() -> None:
    segment = seg(docs=10)
    answers = agree(segment, (1, 2))
    answers["s2"] = ReplicaAnswer("s2", segment.crc, 10, (1, 2, 3))
    decision = decide(UpsertCompactionConfig(), segment, answers)
    assert decision.action is Action.SKIP and "disagree" in decision.reason


def test_a_missing_failed_or_other_copy_replica_skips_the_segment() -> None:
    segment = seg(docs=10)
    missing = agree(segment, (1,))
    del missing["s2"]
    assert "did not answer" in decide(UpsertCompactionConfig(), segment, missing).reason
    failed = {**agree(segment, (1,)), "s2": ReplicaAnswer("s2", error="HTTP 503")}
    assert "HTTP 503" in decide(UpsertCompactionConfig(), segment, failed).reason
    other = {**agree(segment, (1,)), "s2": ReplicaAnswer("s2", 8, 10, (1,))}
    assert "CRC 8" in decide(UpsertCompactionConfig(), segment, other).reason
    shorter = {**agree(segment, (1,)), "s2": ReplicaAnswer("s2", 7, 9, (1,))}
    assert "9 docs" in decide(UpsertCompactionConfig(), segment, shorter).reason
    outside = agree(segment, (1, 10))
    assert "outside" in decide(UpsertCompactionConfig(), segment, outside).reason
    nobody = seg(replicas=())
    assert decide(UpsertCompactionConfig(), nobody, {}).action is Action.SKIP
