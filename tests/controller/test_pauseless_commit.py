"""Pauseless commits on the lead controller, over HTTP with scripted replicas: the next segment is placed at
commitStart (the committing one fixed at its end offset, COMMITTING), commitEnd completes as usual, an FSM after
a failed commit is pinned to the fixed offset, and a pause at commit start leaves the placing to commitEnd."""

from __future__ import annotations

from pathlib import Path

import httpx

from cuvee.cluster.records import SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, faults
from cuvee.protocol.completion import ResponseStatus, StopReason
from tests.controller.test_controller_completion import Replica, _assert_committed, _next_of
from tests.controller.test_controller_support import (
    post,
    register_servers,
    schema_doc,
    table_doc,
    wait_until,
)

T = "events_REALTIME"
S = ResponseStatus


def _pauseless_setup(leader: Controller, side_store: ClusterStore, log_dir: Path) -> tuple[str, list[str]]:
    register_servers(side_store, 2)
    post(leader.url, "/schemas", schema_doc())
    doc = table_doc(log_dir, replicas=2, rows=200)
    doc["ingestionConfig"] = {"streamIngestionConfig": {"pauselessConsumptionEnabled": True}}
    assert post(leader.url, "/tables", doc).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    segment = min(ideal.record.segments)  # partition 0's first segment
    return segment, sorted(ideal.record.segments[segment])


def test_commit_start_places_the_next_segment_and_commit_end_completes(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _pauseless_setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100).status is S.COMMIT
    assert b.consumed(90).status is S.CATCH_UP
    assert a.commit_start(100).status is S.COMMIT_CONTINUE

    # Before commitEnd: the segment is COMMITTING at 100, the next one consumes from 100 on the same replicas.
    record = side_store.segment(T, segment).record
    assert (record.status, record.end_offset) == (SegmentStatus.COMMITTING, 100)
    [nxt] = _next_of(side_store, segment)
    assert side_store.segment(T, nxt).record.start_offset == 100
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    assert ideal.record.segments[segment] == {r: SegmentState.CONSUMING for r in replicas}
    assert ideal.record.segments[nxt] == {r: SegmentState.CONSUMING for r in replicas}
    # 200 rows / 4 partitions consuming on the busiest server: the committing segment is not a fifth one
    assert side_store.segment(T, nxt).record.row_threshold == 50

    assert a.commit_end(100).status is S.COMMIT_SUCCESS
    assert _assert_committed(side_store, segment, replicas, 100) == nxt  # the same successor, not a second one
    assert b.consumed(100).status is S.KEEP


def test_after_a_failed_commit_the_next_committer_must_end_at_the_fixed_offset(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _pauseless_setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100, StopReason.TIME_LIMIT).status is S.HOLD
    assert b.consumed(100, StopReason.TIME_LIMIT).status in (S.COMMIT, S.HOLD)
    committer, other = (a, b) if a.consumed(100, StopReason.TIME_LIMIT).status is S.COMMIT else (b, a)
    assert committer.commit_start(100).status is S.COMMIT_CONTINUE
    faults.FAULTS.add(faults.COMMIT_BEFORE_STEP1)
    assert committer.commit_end(100).status is S.FAILED  # the committer dies, say, and the FSM is dropped

    # The other replica went on to 130 (a time limit) before hearing anything: it cannot commit there, the next
    # segment already starts at 100. It waits; the old committer, back at 100, commits; the other is discarded.
    assert other.consumed(130, StopReason.TIME_LIMIT).status is S.HOLD
    behind = committer.consumed(80, StopReason.TIME_LIMIT)
    assert (behind.status, behind.offset) == (S.CATCH_UP, 100)
    assert committer.consumed(100, StopReason.TIME_LIMIT).status is S.COMMIT
    assert committer.commit_start(100).status is S.COMMIT_CONTINUE
    assert committer.commit_end(100).status is S.COMMIT_SUCCESS
    assert other.consumed(130, StopReason.TIME_LIMIT).status is S.DISCARD
    assert side_store.segment(T, segment).record.end_offset == 100
    assert len(_next_of(side_store, segment)) == 1


def test_a_paused_table_gets_no_next_segment_at_commit_start_and_resume_places_one_after_commit(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _pauseless_setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100).status is S.COMMIT
    assert httpx.post(f"{leader.url}/tables/events/pauseConsumption", timeout=30).status_code == 200
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    assert side_store.segment(T, segment).record.status is SegmentStatus.COMMITTING
    ideal = side_store.ideal_state(T)
    assert ideal is not None and all(n == segment or not n.startswith(segment.split("__")[0] + "__0__")
                                     for n in ideal.record.segments)  # partition 0: no successor while paused
    assert a.commit_end(100).status is S.COMMIT_SUCCESS
    assert b.consumed(100).status is S.KEEP
    assert httpx.post(f"{leader.url}/tables/events/resumeConsumption", timeout=30).status_code == 200
    wait_until(lambda: len(_next_of(side_store, segment)) == 1, message="resume placed no next segment")
    [nxt] = _next_of(side_store, segment)
    ideal = side_store.ideal_state(T)
    assert ideal is not None and ideal.record.segments[nxt] == {r: SegmentState.CONSUMING for r in replicas}


def test_a_controller_dropped_after_fixing_the_end_offset_leaves_commit_end_to_place_the_next_segment(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _pauseless_setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100).status is S.COMMIT
    faults.FAULTS.add(faults.COMMIT_START_AFTER_PIN)
    assert a.commit_start(100).status is S.COMMIT_CONTINUE  # the commit start is best effort
    assert faults.FIRED == [faults.COMMIT_START_AFTER_PIN]
    assert side_store.segment(T, segment).record.status is SegmentStatus.COMMITTING
    assert _next_of(side_store, segment) == []
    assert a.commit_end(100).status is S.COMMIT_SUCCESS
    _assert_committed(side_store, segment, replicas, 100)
    assert b.consumed(100).status is S.KEEP
