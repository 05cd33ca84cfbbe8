"""The completion protocol over real HTTP, driven by scripted replicas: commit, KEEP/DISCARD, NOT_LEADER and
failover, replicas stopping, paused tables, and faults between commit steps followed by a re-run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuvee.cluster.records import InstanceInfo, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, faults
from cuvee.controller.commit import SegmentCommitter
from cuvee.controller.completion_types import CommitSegmentMetadata
from cuvee.protocol.completion import (
    Response,
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    SegmentStoppedConsuming,
    StopReason,
)
from cuvee.protocol.completion_http import SEGMENT_CONSUMED, completion_path
from cuvee.protocol.segment_name import LLCSegmentName
from tests.controller.test_controller_support import (
    post,
    register_servers,
    schema_doc,
    table_doc,
    wait_until,
)

T = "events_REALTIME"
S = ResponseStatus


class Replica:
    """A scripted server speaking the protocol over HTTP for one segment."""

    def __init__(self, instance: str, segment: str, url: str):
        self.instance, self.segment, self.url = instance, LLCSegmentName.parse(segment), url

    def send(self, request: Any) -> Response:
        reply = httpx.post(self.url + completion_path(request.kind), json=request.to_dict(), timeout=30)
        assert reply.status_code == 200, reply.text
        return Response.from_dict(reply.json())

    def consumed(self, offset: int, reason: StopReason = StopReason.ROW_LIMIT) -> Response:
        return self.send(SegmentConsumed(self.segment, self.instance, offset, offset, reason))

    def commit_start(self, offset: int) -> Response:
        return self.send(SegmentCommitStart(self.segment, self.instance, offset))

    def commit_end(self, offset: int) -> Response:
        end = SegmentCommitEnd(self.segment, self.instance, offset, f"file:///deep/{self.segment}", 77, offset, 4096,
                               build_time_ms=5)
        return self.send(end)

    def stopped(self, offset: int) -> Response:
        return self.send(SegmentStoppedConsuming(self.segment, self.instance, offset, "disk full"))


def _setup(leader: Controller, side_store: ClusterStore, log_dir: Path) -> tuple[str, list[str]]:
    """A 2-replica table on 2 servers; returns partition 0's segment and its replicas."""
    register_servers(side_store, 2)
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2, rows=200)).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    segment = next(n for n in ideal.record.segments if LLCSegmentName.parse(n).partition == 0)
    return segment, sorted(ideal.record.segments[segment])


def _commit_happy(url: str, segment: str, replicas: list[str], offset: int = 100) -> None:
    a, b = Replica(replicas[0], segment, url), Replica(replicas[1], segment, url)
    first = a.consumed(offset)
    assert (first.status, first.offset) == (S.COMMIT, offset) and first.build_time_seconds
    assert b.consumed(offset).status is S.HOLD
    assert a.commit_start(offset).status is S.COMMIT_CONTINUE
    assert a.commit_end(offset).status is S.COMMIT_SUCCESS
    assert b.consumed(offset).status is S.KEEP


def _next_of(side_store: ClusterStore, segment: str) -> list[str]:
    current = LLCSegmentName.parse(segment)
    return [n for n in side_store.segment_names(T)
            if (LLCSegmentName.parse(n).partition, LLCSegmentName.parse(n).sequence)
            == (current.partition, current.sequence + 1)]


def _assert_committed(side_store: ClusterStore, segment: str, replicas: list[str], end: int) -> str:
    done = side_store.segment(T, segment).record
    assert (done.status, done.end_offset, done.crc, done.total_docs) == (SegmentStatus.DONE, end, 77, end)
    assert done.download_uri == f"file:///deep/{segment}"
    [nxt] = _next_of(side_store, segment)
    record = side_store.segment(T, nxt).record
    assert (record.status, record.start_offset, record.sequence) == (SegmentStatus.IN_PROGRESS, end, 1)
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    assert ideal.record.segments[segment] == {r: SegmentState.ONLINE for r in replicas}
    assert ideal.record.segments[nxt] == {r: SegmentState.CONSUMING for r in replicas}
    return nxt


def test_two_replicas_commit_keep_and_next_segment(leader: Controller, side_store: ClusterStore,
                                                   log_dir: Path) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    _commit_happy(leader.url, segment, replicas)
    nxt = _assert_committed(side_store, segment, replicas, 100)
    assert side_store.segment(T, nxt).record.row_threshold == 50  # 200 rows / 4 consuming on the busiest server
    # The next segment runs the protocol too; the behind replica catches up, then is told DISCARD if it differs.
    a, b = Replica(replicas[0], nxt, leader.url), Replica(replicas[1], nxt, leader.url)
    assert a.consumed(150, StopReason.TIME_LIMIT).status is S.HOLD  # time limit: wait for the other replica
    assert b.consumed(140, StopReason.TIME_LIMIT).status is S.CATCH_UP
    won = a.consumed(150, StopReason.TIME_LIMIT)
    assert (won.status, won.offset) == (S.COMMIT, 150)
    assert a.commit_start(150).status is S.COMMIT_CONTINUE
    assert a.commit_end(150).status is S.COMMIT_SUCCESS
    assert b.consumed(145).status is S.DISCARD
    assert side_store.segment(T, nxt).record.end_offset == 150


def test_protocol_errors_are_400(leader: Controller) -> None:
    bad = httpx.post(leader.url + SEGMENT_CONSUMED, json={"segment": "nope", "instance": "s", "offset": 1})
    assert bad.status_code == 400 and bad.json()["code"] == 400 and "segment" in bad.json()["error"]
    wrong = httpx.post(leader.url + SEGMENT_CONSUMED, json={"type": "segmentCommitStart"})
    assert wrong.status_code == 400 and "own path" in wrong.json()["error"]
    unknown = Replica("s", "events__0__0__20260101T0000Z", leader.url).consumed(5)
    assert unknown.status is S.FAILED  # no metadata for the segment


def test_standby_answers_not_leader_and_takes_over(
    start_controller: Callable[..., Controller], side_store: ClusterStore, log_dir: Path
) -> None:
    first = start_controller()
    wait_until(lambda: first.is_leader)
    standby = start_controller()
    segment, replicas = _setup(first, side_store, log_dir)
    reply = Replica(replicas[0], segment, standby.url).consumed(100)
    assert (reply.status, reply.leader_url) == (S.NOT_LEADER, first.url)
    write = post(standby.url, "/schemas", schema_doc("other"))
    assert write.status_code == 503 and write.json()["leaderUrl"] == first.url
    assert post(standby.url, "/tables/events/pauseConsumption").status_code == 503
    assert httpx.get(standby.url + "/tables/events").status_code == 200  # standbys serve reads

    # The leader picks a committer, then dies; the standby takes over and the protocol starts over there.
    assert Replica(replicas[0], segment, first.url).consumed(100).status is S.COMMIT
    first.stop()
    wait_until(lambda: standby.is_leader, message="standby never took over")
    _commit_happy(standby.url, segment, replicas)
    _assert_committed(side_store, segment, replicas, 100)


def test_replica_that_stops_consuming_is_marked_offline(leader: Controller, side_store: ClusterStore,
                                                        log_dir: Path) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    assert Replica(replicas[1], segment, leader.url).stopped(40).status is S.PROCESSED
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    assert ideal.record.segments[segment] == {replicas[0]: SegmentState.CONSUMING, replicas[1]: SegmentState.OFFLINE}


def test_paused_table_commits_without_next_segment_until_resumed(leader: Controller, side_store: ClusterStore,
                                                                 log_dir: Path) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    paused = post(leader.url, "/tables/events/pauseConsumption")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert httpx.get(leader.url + "/tables/events/pauseStatus").json()["paused"] is True
    _commit_happy(leader.url, segment, replicas, offset=60)
    assert _next_of(side_store, segment) == []
    ideal = side_store.ideal_state(T)
    assert ideal is not None and ideal.record.paused
    assert ideal.record.segments[segment] == {r: SegmentState.ONLINE for r in replicas}
    resumed = post(leader.url, "/tables/events/resumeConsumption").json()
    assert resumed["paused"] is False and len(resumed["createdSegments"]) == 1
    _assert_committed(side_store, segment, replicas, 60)
    assert post(leader.url, "/tables/events/resumeConsumption").json()["createdSegments"] == []


@pytest.mark.parametrize("point", [faults.COMMIT_AFTER_STEP1, faults.COMMIT_AFTER_STEP2])
def test_fault_between_commit_steps_then_rerun_commits_exactly_once(
    point: str, leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    faults.FAULTS.add(point)
    assert a.consumed(100).status is S.COMMIT
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    assert a.commit_end(100).status is S.FAILED
    assert faults.FIRED == [point]
    assert side_store.segment(T, segment).record.status is SegmentStatus.DONE  # step 1 landed
    ideal = side_store.ideal_state(T)
    assert ideal is not None and ideal.record.segments[segment] == {r: SegmentState.CONSUMING for r in replicas}
    assert len(_next_of(side_store, segment)) == (1 if point == faults.COMMIT_AFTER_STEP2 else 0)
    assert b.consumed(100).status is S.KEEP  # a fresh FSM reads the DONE metadata

    outcome = leader.completion.committer.finish(T, segment)  # what the repair task will do
    nxt = _assert_committed(side_store, segment, replicas, 100)
    assert outcome.next_segment == nxt
    versions = {p: side_store.metastore.get(p).version for p in
                [side_store.paths.ideal_state(T), *(side_store.paths.segment(T, s) for s in side_store.segment_names(T))]}
    leader.completion.committer.finish(T, segment)  # a second re-run changes nothing
    action = CommitSegmentMetadata(LLCSegmentName.parse(segment), LLCSegmentName.parse(nxt), replicas[0], 100,
                                   f"file:///deep/{segment}", 77, 100, 4096, 5, None, None, 99)
    assert leader.completion.committer.commit(action)  # and so does the whole commit, re-run
    after = {p: side_store.metastore.get(p).version for p in versions}
    assert after == versions and len(_next_of(side_store, segment)) == 1


def test_commit_older_than_max_completion_time_leaves_step_3_to_repair(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    calls = iter(range(10))
    base = leader.clock_ms()
    committer = SegmentCommitter(side_store, lambda: base + next(calls) * 60_000, 90_000)
    action = CommitSegmentMetadata(LLCSegmentName.parse(segment), LLCSegmentName.parse(segment).next(base),
                                   replicas[0], 100, "", 77, 100, 4096, 5, None, None, 1)
    assert committer.commit(action) is False  # step 1 at +0, step 3 due at +2 min > 90 s
    ideal = side_store.ideal_state(T)
    assert ideal is not None and ideal.record.segments[segment] == {r: SegmentState.CONSUMING for r in replicas}
    assert side_store.segment(T, segment).record.status is SegmentStatus.DONE


def test_callers_that_are_no_replica_are_refused_and_change_nothing(
        start_controller: Callable[..., Controller], side_store: ClusterStore, log_dir: Path, tmp_path: Path) -> None:
    """A made-up instance, a live server that holds no replica of the segment, an anonymous stop naming nobody real,
    a commitEnd with rows the committer never reported: each FAILED, nothing changed; a commitEnd pointing outside
    the deep store commits without a download URI; the real replicas commit exactly what they reported."""
    deep = tmp_path / "deep"
    leader = start_controller(deep_store=deep.as_uri())
    wait_until(lambda: leader.is_leader)
    segment, replicas = _setup(leader, side_store, log_dir)
    side_store.register_instance(InstanceInfo("Server_2", "127.0.0.1", {}, ("DefaultTenant_REALTIME",)))
    side_store.metastore.create(side_store.paths.live("Server_2"), b"", ephemeral=True)  # live, holds no replica
    before = (side_store.segment(T, segment).record, side_store.ideal_state(T).record)  # type: ignore[union-attr]
    for who in ("Server_9", "Server_2", " " + replicas[0], replicas[0].lower()):
        stranger = Replica(who, segment, leader.url)
        assert stranger.consumed(100).status is S.FAILED
        assert stranger.commit_start(100).status is S.FAILED
        assert stranger.commit_end(100).status is S.FAILED
        assert stranger.stopped(100).status is S.FAILED
    assert (side_store.segment(T, segment).record, side_store.ideal_state(T).record) == before  # type: ignore[union-attr]
    assert leader._completion is not None and leader._completion.refused == 16  # noqa: SLF001

    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100).status is S.COMMIT
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    lie = SegmentCommitEnd(a.segment, a.instance, 100, "", 77, 6_955, 4096)  # rows it never reported
    assert a.send(lie).status is S.FAILED
    assert side_store.segment(T, segment).record.status is SegmentStatus.IN_PROGRESS
    assert a.consumed(100).status is S.COMMIT  # the lie aborted the election; a new one picks a again
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    elsewhere = SegmentCommitEnd(a.segment, a.instance, 100, (tmp_path / "elsewhere").as_uri(), 77, 100, 4096)
    assert a.send(elsewhere).status is S.COMMIT_SUCCESS  # committed, but not with a location it made up
    assert b.consumed(100).status is S.KEEP
    done = side_store.segment(T, segment).record
    assert (done.status, done.end_offset, done.total_docs, done.download_uri) == (SegmentStatus.DONE, 100, 100, "")
    assert leader._completion.relocated == 1  # noqa: SLF001 - peers serve it; repair uploads it where it belongs


def test_a_location_in_the_deep_store_is_kept(start_controller: Callable[..., Controller], side_store: ClusterStore,
                                              log_dir: Path, tmp_path: Path) -> None:
    deep = tmp_path / "deep"
    leader = start_controller(deep_store=deep.as_uri())
    wait_until(lambda: leader.is_leader)
    segment, replicas = _setup(leader, side_store, log_dir)
    a = Replica(replicas[0], segment, leader.url)
    key = deep / T / f"{segment}.tar.zst"
    key.parent.mkdir(parents=True)
    key.write_bytes(b"an archive")
    assert a.consumed(100).status is S.COMMIT
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    assert a.send(SegmentCommitEnd(a.segment, a.instance, 100, key.as_uri(), 77, 100, 4096)).status is S.COMMIT_SUCCESS
    assert side_store.segment(T, segment).record.download_uri == key.as_uri()
