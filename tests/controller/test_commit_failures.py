"""Commit failures and races on the controller side: a metadata-store error mid-commit, resume/pause racing a
commit between its paused read and step 3, the stop reasons kept per FSM, and the external view writer's stop."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cuvee.cluster.assignment import complete_in_ideal_state
from cuvee.cluster.records import SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, ControllerConfig, faults
from cuvee.controller.commit import SegmentCommitter
from cuvee.controller.completion_types import CommitSegmentMetadata
from cuvee.controller.external_view_task import ExternalViewTask
from cuvee.protocol.completion import ResponseStatus, StopReason
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.spi.metastore import StoreUnavailableError
from tests.controller.test_controller_completion import (
    Replica,
    _assert_committed,
    _commit_happy,
    _next_of,
    _setup,
)
from tests.controller.test_controller_support import post

T = "events_REALTIME"
S = ResponseStatus


def _fail_once(store: ClusterStore, method: str) -> list[str]:
    """Make ``store.<method>`` raise StoreUnavailableError on its next call only; returns the calls seen."""
    real = getattr(store, method)
    calls: list[str] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(method)
        if len(calls) == 1:
            raise StoreUnavailableError(f"injected: {method} lost the connection")
        return real(*args, **kwargs)

    setattr(store, method, flaky)
    return calls


def _consuming_by_partition(store: ClusterStore) -> dict[int, list[str]]:
    ideal = store.ideal_state(T)
    assert ideal is not None
    found: dict[int, list[str]] = {}
    for name, replicas in ideal.record.segments.items():
        if SegmentState.CONSUMING in replicas.values():
            found.setdefault(LLCSegmentName.parse(name).partition, []).append(name)
    return found


def test_store_error_in_step_2_fails_the_commit_and_a_retry_completes_it_once(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    a, b = Replica(replicas[0], segment, leader.url), Replica(replicas[1], segment, leader.url)
    calls = _fail_once(leader.completion.committer.store, "create_segment")
    assert a.consumed(100).status is S.COMMIT
    assert b.consumed(100).status is S.HOLD
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    assert a.commit_end(100).status is S.FAILED
    assert calls == ["create_segment"]
    assert leader.completion.manager.fsm(LLCSegmentName.parse(segment)) is None  # not wedged in COMMITTING
    assert side_store.segment(T, segment).record.status is SegmentStatus.DONE  # step 1 had landed

    # The replicas ask again: the fresh FSM reads DONE, answers KEEP, and the leader completes steps 2 and 3.
    assert b.consumed(100).status is S.KEEP
    nxt = _assert_committed(side_store, segment, replicas, 100)
    paths = [side_store.paths.ideal_state(T), *(side_store.paths.segment(T, s) for s in side_store.segment_names(T))]
    versions = {p: side_store.metastore.get(p).version for p in paths}
    assert a.consumed(100).status is S.KEEP  # the committer, told FAILED, asks again too
    assert b.consumed(100).status is S.KEEP
    assert {p: side_store.metastore.get(p).version for p in versions} == versions  # nothing written twice
    assert _next_of(side_store, segment) == [nxt]
    assert _consuming_by_partition(side_store)[0] == [nxt]


def test_store_error_in_step_1_fails_the_commit_and_the_election_restarts(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    a = Replica(replicas[0], segment, leader.url)
    _fail_once(leader.completion.committer.store, "update_segment")
    assert a.consumed(100).status is S.COMMIT
    assert a.commit_start(100).status is S.COMMIT_CONTINUE
    assert a.commit_end(100).status is S.FAILED
    assert side_store.segment(T, segment).record.status is SegmentStatus.IN_PROGRESS
    assert leader.completion.manager.fsm(LLCSegmentName.parse(segment)) is None
    _commit_happy(leader.url, segment, replicas)  # a fresh election commits
    _assert_committed(side_store, segment, replicas, 100)


def _action(segment: str, instance: str, end: int, now: int) -> CommitSegmentMetadata:
    name = LLCSegmentName.parse(segment)
    return CommitSegmentMetadata(name, name.next(now), instance, end, f"file:///deep/{segment}", 77, end, 4096, 5,
                                 None, None, 1)


@pytest.mark.parametrize("paused_at_start", [True, False])
def test_pause_flip_between_paused_read_and_step_3_leaves_one_consuming_segment(
    paused_at_start: bool, leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    """The commit reads ``paused`` before step 2; the table is resumed (or paused) before its step 3. Whatever
    the order, each unpaused partition ends with exactly one consuming segment."""
    segment, replicas = _setup(leader, side_store, log_dir)
    if paused_at_start:
        assert post(leader.url, "/tables/events/pauseConsumption").status_code == 200
    flip = "/tables/events/resumeConsumption" if paused_at_start else "/tables/events/pauseConsumption"
    flipped: list[dict[str, Any]] = []
    faults.HOOKS[faults.COMMIT_AFTER_STEP2] = lambda: flipped.append(post(leader.url, flip).json())
    committer = SegmentCommitter(side_store, leader.clock_ms, 30_000)
    assert committer.commit(_action(segment, replicas[0], 100, leader.clock_ms()))
    assert len(flipped) == 1 and faults.FIRED == [faults.COMMIT_AFTER_STEP2]
    if not paused_at_start:  # paused at step 3: no next segment placed until the resume
        assert 0 not in _consuming_by_partition(side_store)
        assert post(leader.url, "/tables/events/resumeConsumption").status_code == 200
    nxt = _assert_committed(side_store, segment, replicas, 100)
    assert _consuming_by_partition(side_store)[0] == [nxt]
    assert post(leader.url, "/tables/events/resumeConsumption").json()["createdSegments"] == []
    assert _consuming_by_partition(side_store)[0] == [nxt]


def test_step_3_never_places_a_second_successor(leader: Controller, side_store: ClusterStore,
                                                log_dir: Path) -> None:
    """Two racing finishers that named the next segment in different minutes: only one lands in the ideal state."""
    segment, replicas = _setup(leader, side_store, log_dir)
    base = leader.clock_ms()
    assert SegmentCommitter(side_store, lambda: base, 30_000).commit(_action(segment, replicas[0], 100, base))
    [first] = _next_of(side_store, segment)
    late = LLCSegmentName.parse(segment).next(base + 3_600_000).name
    side_store.create_segment(T, dataclasses.replace(side_store.segment(T, first).record, segment_name=late))
    side_store.update_ideal_state(T, complete_in_ideal_state(segment, late))
    assert _consuming_by_partition(side_store)[0] == [first]


def _elect(replicas: list[Replica], offset: int, reason: StopReason) -> Replica:
    """Replicas report ``offset`` (all of them, in turn) until one is told COMMIT; returns it."""
    for _ in range(3):
        for replica in replicas:
            if replica.consumed(offset, reason).status is S.COMMIT:
                return replica
    raise AssertionError("no replica was told COMMIT")


def test_stop_reasons_are_dropped_with_their_fsm(leader: Controller, side_store: ClusterStore,
                                                 log_dir: Path) -> None:
    segment, replicas = _setup(leader, side_store, log_dir)
    both = [Replica(r, segment, leader.url) for r in replicas]
    service = leader.completion
    faults.FAULTS.add(faults.COMMIT_BEFORE_STEP1)
    winner = _elect(both, 100, StopReason.FORCE_COMMIT)
    assert service._reasons  # kept while the FSM lives (a forced commit teaches the learner nothing)
    assert winner.commit_start(100).status is S.COMMIT_CONTINUE
    assert winner.commit_end(100).status is S.FAILED  # the FSM aborts and is dropped ...
    assert service.manager.fsm(LLCSegmentName.parse(segment)) is None
    assert not service._reasons  # ... and its stop reasons with it

    winner = _elect(both, 100, StopReason.FORCE_COMMIT)
    assert winner.commit_start(100).status is S.COMMIT_CONTINUE
    assert winner.commit_end(100).status is S.COMMIT_SUCCESS
    assert not service._reasons
    for replica in both:  # answered by FSMs created on the DONE metadata and dropped at once
        assert replica.consumed(100, StopReason.FORCE_COMMIT).status is S.KEEP
    assert not service._reasons


class _HangingStore:
    """Enough of a ClusterStore for the external view writer: ``live_instance_ids`` hangs until released."""

    paths = None

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def live_instance_ids(self) -> list[str]:
        self.entered.set()
        self.release.wait()
        raise StoreUnavailableError("released")


def test_external_view_stop_waits_only_the_configured_time() -> None:
    store = _HangingStore()
    task = ExternalViewTask(store, 0.01, lambda: True, stop_timeout=0.05)  # type: ignore[arg-type]
    task.start()
    assert store.entered.wait(10)
    started = time.monotonic()
    task.stop()
    assert time.monotonic() - started < 5  # not the old hard-coded 10 s
    store.release.set()
    assert task._thread is not None
    task._thread.join(10)
    assert not task._thread.is_alive()


def test_external_view_stop_timeout_is_configuration(start_controller: Callable[..., Controller]) -> None:
    with pytest.raises(ValueError, match="external_view_stop_seconds"):
        ControllerConfig(metadata="sqlite:///x.db", external_view_stop_seconds=0)
    controller = start_controller(external_view_stop_seconds=0.5)
    assert controller.external_view.stop_timeout == 0.5
