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


def test_a_bad_replica_answer_skips_the_segment_with_a_short_reason_and_no_server_text(monkeypatch) -> None:
    import base64

    import httpx
    from pyroaring import BitMap

    from cuvee.maintenance import compaction_job
    from cuvee.maintenance.compaction_job import _message, ask_replicas, replica_answer

    segment = seg(docs=10)
    good = {"crc": segment.crc, "totalDocs": 10, "bitmap": base64.b64encode(BitMap([1, 2]).serialize()).decode()}
    assert replica_answer("s1", 200, good) == ReplicaAnswer("s1", segment.crc, 10, (1, 2))
    secret = "Server_10.0.0.5_8098: Traceback (most recent call last)"
    bad = {"a list": [1, 2], "no fields": {"crc": 1}, "a bool crc": {**good, "crc": True},
           "a bad bitmap": {**good, "bitmap": "bm90IGEgYml0bWFw"}, "an error": {"error": secret}}
    for what, body in bad.items():
        status = 500 if what == "an error" else 200
        answers = {"s1": replica_answer("s1", 200, good), "s2": replica_answer("s2", status, body)}
        assert answers["s2"].error, what
        decision = decide(UpsertCompactionConfig(), segment, answers)
        message = _message([decision], [])
        assert decision.action is Action.SKIP and "replica 2/2" in decision.reason, what
        assert "s2" not in message and "Server_" not in message and "Traceback" not in message, what

    replies = iter([httpx.Response(200, json=good), httpx.Response(200, json=[1, 2])])
    monkeypatch.setattr(compaction_job.httpx, "get", lambda *args, **kwargs: next(replies))
    asked = ask_replicas("t_REALTIME", segment, {"s1": "http://s1", "s2": "http://s2"})  # no AttributeError
    assert asked["s1"].kept == (1, 2) and asked["s2"].error.startswith("malformed")
    assert decide(UpsertCompactionConfig(), segment, asked).action is Action.SKIP
