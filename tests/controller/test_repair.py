"""The leader's repair task: the pure plan, and a real controller on sqlite with an embedded-log topic, the
servers played through ClusterStore (states written directly) and the protocol spoken by scripted replicas."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, faults
from cuvee.controller.repair import (
    CreateSuccessor,
    FinishCommit,
    RecreateConsuming,
    RestartCommitting,
    plan_repairs,
)
from cuvee.protocol.completion import ResponseStatus
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.stream.log import LogAdmin
from cuvee.stream.log.topic import TopicSettings
from tests.controller.test_controller_completion import Replica, _assert_committed, _next_of
from tests.controller.test_controller_support import (
    TOPIC,
    controller_config,
    get,
    post,
    produce,
    register_servers,
    schema_doc,
    table_doc,
    wait_until,
)

T = "events_REALTIME"
ON, OFF, CONS = SegmentState.ONLINE, SegmentState.OFFLINE, SegmentState.CONSUMING
MAX_MS = 30_000  # controller_config's max_segment_completion_seconds


# ---- the pure plan ----


def _seg(partition: int, seq: int) -> str:
    return LLCSegmentName.create("events", partition, seq, 1_700_000_000_000).name


def _rec(name: str, status: SegmentStatus, *, start: int = 0, end: int | None = None,
         commit_ms: int | None = None) -> SegmentRecord:
    llc = LLCSegmentName.parse(name)
    return SegmentRecord(name, status, 0, llc.partition, llc.sequence, start_offset=start, end_offset=end,
                         row_threshold=100, commit_time_ms=commit_ms)


def test_plan_finishes_old_half_done_commits_only() -> None:
    s0, s1 = _seg(0, 0), _seg(1, 0)
    ideal = IdealState(T, {s0: {"a": CONS, "b": CONS}, s1: {"a": CONS}})
    records = {s0: _rec(s0, SegmentStatus.DONE, end=50, commit_ms=1_000), s1: _rec(s1, SegmentStatus.IN_PROGRESS)}
    assert plan_repairs(ideal, records, 1_000 + MAX_MS, MAX_MS) == []  # young: the committer may still finish
    assert plan_repairs(ideal, records, 1_001 + MAX_MS, MAX_MS) == [FinishCommit(s0)]
    paused = dataclasses.replace(ideal, paused=True)
    assert plan_repairs(paused, records, 1_001 + MAX_MS, MAX_MS) == [FinishCommit(s0)]


def test_plan_recreates_all_offline_and_adds_missing_successors() -> None:
    p0, p1, p2, p3 = _seg(0, 3), _seg(1, 0), _seg(2, 0), _seg(3, 1)
    ideal = IdealState(T, {
        p0: {"a": OFF, "b": OFF},  # every consumer gave up
        p1: {"a": OFF, "b": CONS},  # one still consumes
        p2: {"a": ON, "b": ON},  # committed, no successor
        p3: {"a": CONS},
        _seg(3, 0): {"a": ON},
    })
    records = {p0: _rec(p0, SegmentStatus.IN_PROGRESS, start=40), p1: _rec(p1, SegmentStatus.IN_PROGRESS),
               p2: _rec(p2, SegmentStatus.DONE, end=70, commit_ms=5), p3: _rec(p3, SegmentStatus.IN_PROGRESS),
               _seg(3, 0): _rec(_seg(3, 0), SegmentStatus.DONE, end=9, commit_ms=5)}
    assert plan_repairs(ideal, records, 10, MAX_MS) == [RecreateConsuming(0, p0, 40), CreateSuccessor(2, p2, 70)]
    assert plan_repairs(dataclasses.replace(ideal, paused=True), records, 10, MAX_MS) == []


def test_plan_restarts_a_stalled_committing_segment_whose_replicas_all_gave_up() -> None:
    old, nxt, young, alive = _seg(0, 3), _seg(0, 4), _seg(1, 2), _seg(2, 2)
    ideal = IdealState(T, {
        old: {"a": OFF, "b": OFF}, nxt: {"a": CONS, "b": CONS},  # pauseless: the successor consumes meanwhile
        young: {"a": OFF}, _seg(1, 3): {"a": CONS},
        alive: {"a": OFF, "b": CONS}, _seg(2, 3): {"b": CONS},
    })
    records = {old: _rec(old, SegmentStatus.COMMITTING, start=10, end=60, commit_ms=1_000),
               nxt: _rec(nxt, SegmentStatus.IN_PROGRESS, start=60),
               young: _rec(young, SegmentStatus.COMMITTING, end=5, commit_ms=1_000 + MAX_MS),
               _seg(1, 3): _rec(_seg(1, 3), SegmentStatus.IN_PROGRESS, start=5),
               alive: _rec(alive, SegmentStatus.COMMITTING, end=7, commit_ms=1_000),
               _seg(2, 3): _rec(_seg(2, 3), SegmentStatus.IN_PROGRESS, start=7)}
    assert plan_repairs(ideal, records, 1_001 + MAX_MS, MAX_MS) == [RestartCommitting(0, old)]
    assert plan_repairs(dataclasses.replace(ideal, paused=True), records, 1_001 + MAX_MS, MAX_MS) == []


# ---- against a real controller ----


class Clock:
    """Wall time plus a skew the test moves forward (the controller's injectable clock)."""

    def __init__(self) -> None:
        self.skew_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.skew_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_controller(meta_uri: str, clock: Clock) -> Iterator[Callable[..., Controller]]:
    started: list[Controller] = []

    def make(**overrides: Any) -> Controller:
        controller = Controller(controller_config(meta_uri, **overrides), clock_ms=clock).start()
        started.append(controller)
        return controller

    yield make
    for controller in reversed(started):
        controller.stop()


@pytest.fixture
def leader(make_controller: Callable[..., Controller]) -> Controller:
    controller = make_controller()
    wait_until(lambda: controller.is_leader, message="controller never became leader")
    return controller


def _table(leader: Controller, side_store: ClusterStore, log_dir: Path, servers: int = 2) -> dict[int, str]:
    register_servers(side_store, servers)
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2, rows=200)).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    return {LLCSegmentName.parse(n).partition: n for n in ideal.record.segments}


def _all_offline(store: ClusterStore, segment: str) -> None:
    store.update_ideal_state(T, lambda ideal: ideal.with_segments_in(segment, ideal.instances_of(segment), OFF))


def _versions(store: ClusterStore) -> dict[str, int]:
    paths = [store.paths.ideal_state(T), *(store.paths.segment(T, s) for s in store.segment_names(T))]
    return {p: store.metastore.get(p).version for p in paths}


def _ideal(store: ClusterStore) -> IdealState:
    found = store.ideal_state(T)
    assert found is not None
    return found.record


def test_half_done_commit_is_finished_once_old_enough(leader: Controller, side_store: ClusterStore,
                                                      log_dir: Path, clock: Clock) -> None:
    segment = _table(leader, side_store, log_dir)[0]
    replicas = sorted(_ideal(side_store).segments[segment])
    a = Replica(replicas[0], segment, leader.url)
    faults.FAULTS.add(faults.COMMIT_AFTER_STEP1)
    assert a.consumed(100).status is ResponseStatus.COMMIT
    assert a.commit_start(100).status is ResponseStatus.COMMIT_CONTINUE
    assert a.commit_end(100).status is ResponseStatus.FAILED
    assert side_store.segment(T, segment).record.status is SegmentStatus.DONE
    assert _next_of(side_store, segment) == []

    assert leader.repair.run_once() == []  # younger than max_segment_completion_seconds: left alone
    assert _ideal(side_store).segments[segment] == {r: CONS for r in replicas}
    clock.skew_ms = MAX_MS + 1_000
    assert leader.repair.run_once() == [FinishCommit(segment)]
    nxt = _assert_committed(side_store, segment, replicas, 100)
    assert side_store.segment(T, nxt).record.start_offset == 100

    before = _versions(side_store)
    assert leader.repair.run_once() == []
    assert _versions(side_store) == before
    status = get(leader.url, "/tables/events/repairStatus").json()
    assert status["commitsFinished"] == 1 and status["failures"] == 0 and status["leader"] is True


def test_all_replicas_offline_gets_a_new_consuming_segment_from_the_same_offset(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    produce(log_dir, {1: 30})
    segment = _table(leader, side_store, log_dir, servers=3)[1]
    side_store.update_segment(T, segment, lambda r: dataclasses.replace(r, start_offset=12))  # consumed some
    _all_offline(side_store, segment)
    done = leader.repair.run_once()
    [nxt] = _next_of(side_store, segment)
    assert done == [RecreateConsuming(1, segment, 12)]
    record = side_store.segment(T, nxt).record
    assert (record.status, record.start_offset, record.partition, record.sequence) == (
        SegmentStatus.IN_PROGRESS, 12, 1, 1)
    ideal = _ideal(side_store)
    assert set(ideal.segments[nxt].values()) == {CONS} and len(ideal.segments[nxt]) == 2
    assert set(ideal.segments[nxt]) <= {"Server_0", "Server_1", "Server_2"}
    assert segment not in ideal.segments  # abandoned: it would block the partition's routing
    assert side_store.find_segment(T, segment) is None  # never committed: its metadata goes too

    before = _versions(side_store)
    assert leader.repair.run_once() == []
    assert _versions(side_store) == before
    status = get(leader.url, "/tables/events/repairStatus").json()
    assert (status["segmentsRecreated"], status["dataLossEvents"], status["offsetsLost"]) == (1, 0, 0)


def test_offset_lost_to_retention_restarts_from_earliest_and_counts_the_loss(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    admin = LogAdmin(str(log_dir))
    admin.configure_topic(TOPIC, TopicSettings(segment_bytes=400, retention_bytes=800))
    segment = _table(leader, side_store, log_dir)[2]
    assert side_store.segment(T, segment).record.start_offset == 0
    produce(log_dir, {2: 200})
    earliest = admin.apply_retention(TOPIC)[2]
    assert earliest > 0
    _all_offline(side_store, segment)
    assert leader.repair.run_once() == [RecreateConsuming(2, segment, 0)]
    [nxt] = _next_of(side_store, segment)
    assert side_store.segment(T, nxt).record.start_offset == earliest
    status = get(leader.url, "/tables/events/repairStatus").json()
    assert (status["segmentsRecreated"], status["dataLossEvents"], status["offsetsLost"]) == (1, 1, earliest)


def test_paused_table_gets_nothing_created(leader: Controller, side_store: ClusterStore, log_dir: Path) -> None:
    segments = _table(leader, side_store, log_dir)
    assert post(leader.url, "/tables/events/pauseConsumption").json()["paused"] is True
    _all_offline(side_store, segments[0])
    before = _versions(side_store)
    assert leader.repair.run_once() == []
    assert _versions(side_store) == before and _next_of(side_store, segments[0]) == []


def test_committed_latest_without_successor_gets_one(leader: Controller, side_store: ClusterStore,
                                                     log_dir: Path) -> None:
    segment = _table(leader, side_store, log_dir)[3]
    replicas = sorted(_ideal(side_store).segments[segment])
    assert post(leader.url, "/tables/events/pauseConsumption").json()["paused"] is True
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(80).status is ResponseStatus.COMMIT
    assert a.commit_start(80).status is ResponseStatus.COMMIT_CONTINUE
    assert a.commit_end(80).status is ResponseStatus.COMMIT_SUCCESS
    assert b.consumed(80).status is ResponseStatus.KEEP
    assert _next_of(side_store, segment) == []
    # unpaused without the resume call's follow-up (as if the controller died in between)
    side_store.update_ideal_state(T, lambda ideal: dataclasses.replace(ideal, paused=False))
    assert leader.repair.run_once() == [CreateSuccessor(3, segment, 80)]
    [nxt] = _next_of(side_store, segment)
    assert side_store.segment(T, nxt).record.start_offset == 80
    assert set(_ideal(side_store).segments[nxt].values()) == {CONS}
    before = _versions(side_store)
    assert leader.repair.run_once() == []
    assert _versions(side_store) == before


def test_periodic_task_runs_on_the_leader_only(make_controller: Callable[..., Controller], side_store: ClusterStore,
                                               log_dir: Path) -> None:
    leader = make_controller(repair_interval_seconds=0.2)
    wait_until(lambda: leader.is_leader, message="controller never became leader")
    standby = make_controller(repair_interval_seconds=0.2)
    segment = _table(leader, side_store, log_dir)[0]
    _all_offline(side_store, segment)
    assert standby.repair.run_once() == []  # not the leader: does nothing
    wait_until(lambda: _next_of(side_store, segment), timeout=20, message="repair never recreated the segment")
    assert standby.repair.stats.get(T) is None
    assert get(standby.url, "/tables/events/repairStatus").json()["leader"] is False
    assert get(leader.url, "/tables/nope/repairStatus").status_code == 404


def test_a_stalled_pauseless_commit_is_restarted_on_live_servers(
    leader: Controller, side_store: ClusterStore, log_dir: Path, clock: Clock
) -> None:
    register_servers(side_store, 3)
    post(leader.url, "/schemas", schema_doc())
    doc = table_doc(log_dir, replicas=2, rows=200)
    doc["ingestionConfig"] = {"streamIngestionConfig": {"pauselessConsumptionEnabled": True}}
    assert post(leader.url, "/tables", doc).status_code == 200
    segment = min(_ideal(side_store).segments)
    replicas = sorted(_ideal(side_store).segments[segment])
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    assert a.consumed(100).status is ResponseStatus.COMMIT
    assert a.commit_start(100).status is ResponseStatus.COMMIT_CONTINUE
    assert a.stopped(100).status is ResponseStatus.PROCESSED  # the committer gives up ...
    assert b.stopped(90).status is ResponseStatus.PROCESSED  # ... and so does the other replica
    assert set(_ideal(side_store).segments[segment].values()) == {OFF}
    [nxt] = _next_of(side_store, segment)
    assert set(_ideal(side_store).segments[nxt].values()) == {CONS}  # the partition is consumed meanwhile

    assert leader.repair.run_once() == []  # younger than max_segment_completion_seconds
    clock.skew_ms = MAX_MS + 1_000
    assert leader.repair.run_once() == [RestartCommitting(0, segment)]
    restarted = _ideal(side_store).segments[segment]
    assert set(restarted.values()) == {CONS} and len(restarted) == 2
    record = side_store.segment(T, segment).record
    assert (record.status, record.end_offset) == (SegmentStatus.COMMITTING, 100)
    assert _next_of(side_store, segment) == [nxt]  # no second successor
    assert leader.repair.run_once() == []
    assert get(leader.url, "/tables/events/repairStatus").json()["commitsRestarted"] == 1

    # The restarted replicas consume to 100 and commit there, through a pinned FSM.
    c, d = (Replica(r, segment, leader.url) for r in sorted(restarted))
    if c.consumed(100).status is ResponseStatus.HOLD:  # the FSM the give-ups left is stale: it aborts first
        assert c.consumed(100).status is ResponseStatus.COMMIT
    assert c.commit_start(100).status is ResponseStatus.COMMIT_CONTINUE
    assert c.commit_end(100).status is ResponseStatus.COMMIT_SUCCESS
    assert d.consumed(100).status is ResponseStatus.KEEP
    assert set(_ideal(side_store).segments[segment].values()) == {ON}


def test_segments_repair_and_commits_create_are_built_under_the_schemas_version_then(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """Each consuming segment's record names the schema version current when the controller created it (table
    creation, commit step 2, repair's re-creation), which every replica consumes under."""
    segments = _table(leader, side_store, log_dir)
    assert {side_store.segment(T, s).record.schema_version for s in segments.values()} == {0}
    added = schema_doc()
    added["dimensionFieldSpecs"].append({"name": "device", "dataType": "STRING"})
    assert httpx.put(f"{leader.url}/schemas/events", json=added).status_code == 200
    _all_offline(side_store, segments[1])
    leader.repair.run_once()
    [recreated] = _next_of(side_store, segments[1])
    assert side_store.segment(T, recreated).record.schema_version == 1
    replicas = sorted(_ideal(side_store).segments[segments[0]])
    a = Replica(replicas[0], segments[0], leader.url)
    assert a.consumed(100).status is ResponseStatus.COMMIT
    assert a.commit_start(100).status is ResponseStatus.COMMIT_CONTINUE
    assert a.commit_end(100).status is ResponseStatus.COMMIT_SUCCESS
    [successor] = _next_of(side_store, segments[0])
    assert side_store.segment(T, successor).record.schema_version == 1
