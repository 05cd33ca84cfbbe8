"""Transient failures do not leave a replica unserved: ERROR replicas are retried with backoff on a fake clock
(planner and whole server), a current-state write that fails is written again, and an exception escaping a
transition chain is logged and counted."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cuvee.cluster.records import CurrentState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.segment.archive import pack
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.current_state import CurrentStates
from cuvee.server.handlers import SegmentTransitions
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.server import Server
from cuvee.server.transitions import NO_FAILURES, ErrorBackoff, RetryState, plan_transitions
from cuvee.spi.deepstore import DeepStore
from tests.server.server_helpers import (
    TABLE, ScriptedConsuming, build, commit_segment, server_config, set_ideal, wait_until,
)
from tests.server.test_consuming_support import FakeClock

S = SegmentState
SEG = "events__0__0__20260101T0000Z"
RETRY = 30.0  # error_retry_initial_seconds: only the fake clock ever gets there


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def start(servers: list[Server], tmp: Path, clock: FakeClock,
          factory: Callable[[str, SegmentRecord], ScriptedConsuming] | None = None, **overrides: object) -> Server:
    overrides.setdefault("error_retry_initial_seconds", RETRY)
    overrides.setdefault("error_retry_max_seconds", 8 * RETRY)
    server = Server(server_config(tmp, "s1", **overrides), extra_routers=(),
                    make_consuming=factory or (lambda t, r: ScriptedConsuming(t, r, {})), clock=clock)
    servers.append(server)
    return server.start()


def state_of(store: ClusterStore, segment: str = SEG) -> S | None:
    current = store.current_state("s1", TABLE)
    return current.segments.get(segment) if current else None


def in_progress(store: ClusterStore) -> None:
    store.put(store.paths.segment(TABLE, SEG),
              SegmentRecord(SEG, SegmentStatus.IN_PROGRESS, 1, partition=0, sequence=0, start_offset=0,
                            row_threshold=20))


def failures(server: Server) -> int:
    """SEG's failures in a row as the follower counts them (0: none). The follower records them after the
    transition's end, a moment after the store shows ERROR: tests wait for both before moving the clock."""
    follower = server._follower
    assert follower is not None
    state = follower.retry_state(TABLE, SEG)
    return 0 if state is None else state.failures


def passes(server: Server, n: int = 2) -> None:
    """Let the follower re-plan ``n`` more times (the fake clock standing still)."""
    follower = server._follower
    assert follower is not None
    seen = follower.reconciles
    server.wake()
    wait_until(lambda: follower.reconciles >= seen + n)


# ---- the pure planner --------------------------------------------------------------------------------------


def test_the_planner_retries_an_unchanged_target_only_when_due() -> None:
    def plan(now: float, due: dict[str, float] | None) -> list[list[tuple[S, S]]]:
        chains = plan_transitions({SEG: S.ONLINE}, {SEG: S.ERROR}, {SEG: S.ONLINE}, now=now, retry_due=due)
        return [[(t.from_state, t.to_state) for t in chain] for chain in chains]

    assert plan(10.0, None) == []  # no retry scheduled
    assert plan(10.0, {SEG: 10.5}) == []  # not yet
    assert plan(10.5, {SEG: 10.5}) == [[(S.ERROR, S.OFFLINE), (S.OFFLINE, S.ONLINE)]]  # release, then try again


def test_error_backoff_doubles_per_failure_in_a_row_up_to_the_cap() -> None:
    backoff = ErrorBackoff(5.0, 30.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [5.0, 10.0, 20.0, 30.0, 30.0]
    first = NO_FAILURES.after_failure(100.0, backoff)
    assert first == RetryState(1, 105.0)
    assert first.after_failure(105.0, backoff) == RetryState(2, 115.0)


# ---- the server: transient failures end ONLINE/CONSUMING without a restart ---------------------------------


def test_a_consumer_that_fails_to_start_once_is_retried_with_backoff(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    """A metadata blip in OFFLINE→CONSUMING: ERROR; not retried before the backoff; then CONSUMING."""
    made: list[ScriptedConsuming] = []

    def factory(table: str, record: SegmentRecord) -> ScriptedConsuming:
        if not made and not getattr(factory, "failed", False):
            factory.failed = True  # type: ignore[attr-defined]
            raise ConnectionError("fault: metadata store blip")
        made.append(ScriptedConsuming(table, record, {}))
        return made[-1]

    clock = FakeClock()
    in_progress(store)
    server = start(servers, tmp_path, clock, factory)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store) is S.ERROR and failures(server) == 1)
    passes(server)
    assert state_of(store) is S.ERROR and made == []  # no hot retry

    clock.advance(RETRY)
    server.wake()
    wait_until(lambda: state_of(store) is S.CONSUMING)
    assert [c.calls for c in made] == [["start"]]
    assert isinstance(server.registry.get(TABLE, SEG), ConsumingView)
    wait_until(lambda: server._follower.retry_state(TABLE, SEG) is None)  # type: ignore[union-attr]  # success resets


def test_a_download_that_outlasts_its_attempts_is_retried_once_the_deep_store_is_back(
    tmp_path: Path, store: ClusterStore, deep: DeepStore, servers: list[Server]
) -> None:
    """OFFLINE→ONLINE with no source for longer than download_max_attempts: ERROR, backoff grows, then ONLINE."""
    record = commit_segment(store, None, tmp_path / "work", SEG, 10, upload=False)
    clock = FakeClock()
    server = start(servers, tmp_path, clock, download_max_attempts=1)
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store) is S.ERROR and failures(server) == 1)
    clock.advance(RETRY)
    server.wake()
    wait_until(lambda: failures(server) == 2)
    due = server._follower.retry_state(TABLE, SEG).due  # type: ignore[union-attr]
    assert due == pytest.approx(clock() + 2 * RETRY)  # the second wait is twice the first

    uri = deep.put(pack(tmp_path / "work" / SEG, tmp_path / "a.tar.gz"), f"{TABLE}/{SEG}.tar.gz")  # store is back
    store.update_segment(TABLE, SEG, lambda r: dataclasses.replace(r, download_uri=uri))
    clock.advance(2 * RETRY)
    server.wake()
    wait_until(lambda: state_of(store) is S.ONLINE)
    held = server.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == record.crc


def test_a_commit_whose_go_online_fails_is_released_and_downloaded_on_retry(
    tmp_path: Path, store: ClusterStore, deep: DeepStore, servers: list[Server]
) -> None:
    """CONSUMING→ONLINE where go_online gives up (its bounded download): ERROR; the retry stops the consumer
    (ERROR→OFFLINE) and downloads the committed copy (OFFLINE→ONLINE)."""
    made: list[ScriptedConsuming] = []

    def go_online_fails(record: SegmentRecord) -> ImmutableSegment:
        raise ConnectionError("fault: the committed copy cannot be downloaded")

    def factory(table: str, record: SegmentRecord) -> ScriptedConsuming:
        made.append(ScriptedConsuming(table, record, {SEG: go_online_fails}))
        return made[-1]

    clock = FakeClock()
    in_progress(store)
    server = start(servers, tmp_path, clock, factory)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store) is S.CONSUMING)
    committed = build(tmp_path / "work", SEG, 20)
    uri = deep.put(pack(committed.path, tmp_path / "c.tar.gz"), f"{TABLE}/{SEG}.tar.gz")
    store.update_segment(TABLE, SEG, lambda r: r.committed(end_offset=20, total_docs=20, size_bytes=1,
                                                            crc=committed.crc, download_uri=uri, now_ms=2))
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store) is S.ERROR and failures(server) == 1)  # the retry is due from then
    assert made[0].calls == ["start", "go_online"]

    clock.advance(RETRY)
    server.wake()
    wait_until(lambda: state_of(store) is S.ONLINE)
    assert made[0].calls == ["start", "go_online", "stop"] and len(made) == 1
    held = server.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == committed.crc


# ---- current state written through, even when a write fails ------------------------------------------------


def fail_one_put(monkeypatch: pytest.MonkeyPatch, segment: str) -> list[CurrentState]:
    """ClusterStore.put_current_state raises for the first record holding ``segment``; returns the failed ones."""
    real = ClusterStore.put_current_state
    failed: list[CurrentState] = []

    def put_current_state(self: ClusterStore, state: CurrentState) -> object:
        if not failed and segment in state.segments:
            failed.append(state)
            raise ConnectionError("fault: metadata store unreachable for one write")
        return real(self, state)

    monkeypatch.setattr(ClusterStore, "put_current_state", put_current_state)
    return failed


def test_a_failed_current_state_write_leaves_memory_right_and_is_written_again(store: ClusterStore,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fail_one_put(monkeypatch, SEG)
    states = CurrentStates(store, "s1")
    states.set(TABLE, SEG, S.ONLINE)  # does not raise: the I/O of the transition happened
    assert states.get(TABLE, SEG) is S.ONLINE and states.write_failures == 1 and states.dirty() == [TABLE]
    assert store.current_state("s1", TABLE) is None  # stale until the next flush
    assert states.flush() is True
    assert store.current_state("s1", TABLE).segments == {SEG: S.ONLINE}  # type: ignore[union-attr]
    assert states.dirty() == []


def test_the_server_rewrites_a_current_state_whose_write_failed(
    tmp_path: Path, store: ClusterStore, deep: DeepStore, servers: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    commit_segment(store, deep, tmp_path / "work", SEG, 10)
    failed = fail_one_put(monkeypatch, SEG)
    server = start(servers, tmp_path, FakeClock())
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store) is S.ONLINE)  # written again by a later follower pass
    assert len(failed) == 1 and server.states.write_failures == 1 and server.states.dirty() == []


def test_an_exception_escaping_a_chain_is_logged_and_counted(
    tmp_path: Path, store: ClusterStore, servers: list[Server], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture
) -> None:
    real = SegmentTransitions.run_chain
    raised: list[int] = []

    def run_chain(self: SegmentTransitions, table: str, chain: list) -> bool:
        if not raised:
            raised.append(1)
            raise RuntimeError("fault: a bug in a transition")
        return real(self, table, chain)

    monkeypatch.setattr(SegmentTransitions, "run_chain", run_chain)
    in_progress(store)
    caplog.set_level(logging.ERROR, logger="cuvee.server.follower")
    server = start(servers, tmp_path, FakeClock())
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store) is S.CONSUMING)
    assert server._follower.run_errors == 1  # type: ignore[union-attr]
    assert any("fault: a bug in a transition" in (r.exc_text or "") or r.exc_info for r in caplog.records)
