"""Leader election: one leader at a time, visible to all, with failover and resignation."""

from __future__ import annotations

import threading

import pytest

from cuvee.spi.metastore import LeaderElection, MetadataStore, MetadataStoreError
from tests.metastore.conftest import Backend
from tests.metastore.helpers import wait_until


class Candidate:
    """A client session campaigning under a name, recording the leadership changes it is told about."""

    def __init__(self, store: MetadataStore, name: str, path: str = "/cluster"):
        self.store = store
        self.name = name
        self._lock = threading.Lock()
        self.changes: list[bool] = []
        self.election: LeaderElection = store.election(path, name, self._on_change)

    def _on_change(self, leader: bool) -> None:
        with self._lock:
            self.changes.append(leader)

    def history(self) -> list[bool]:
        with self._lock:
            return list(self.changes)


def leaders(candidates: list[Candidate]) -> list[str]:
    return [c.name for c in candidates if c.election.is_leader]


def wait_for_single_leader(candidates: list[Candidate]) -> Candidate:
    wait_until(lambda: len(leaders(candidates)) == 1, 10.0, message=lambda: f"leaders: {leaders(candidates)}")
    return next(c for c in candidates if c.election.is_leader)


def test_exactly_one_leader_visible_to_all(backend: Backend) -> None:
    candidates = [Candidate(backend.open(), f"controller-{i}") for i in range(3)]
    for candidate in candidates:
        candidate.election.start()
    leader = wait_for_single_leader(candidates)
    wait_until(lambda: leader.history() == [True], message=lambda: f"callbacks: {leader.history()}")
    for candidate in candidates:
        assert candidate.election.leader_id() == leader.name
    assert all(c.history() == [] for c in candidates if c is not leader)
    assert len(leaders(candidates)) == 1


def test_failover_when_the_leader_closes(backend: Backend) -> None:
    candidates = [Candidate(backend.open(), f"controller-{i}") for i in range(3)]
    for candidate in candidates:
        candidate.election.start()
    first = wait_for_single_leader(candidates)
    first.store.close()
    assert first.history() == [True, False]
    rest = [c for c in candidates if c is not first]
    second = wait_for_single_leader(rest)
    wait_until(lambda: rest[0].election.leader_id() == second.name, message="new leader id visible")
    assert rest[1].election.leader_id() == second.name


def test_resign_hands_over_and_stops_campaigning(backend: Backend) -> None:
    first = Candidate(backend.open(), "a")
    first.election.start()
    wait_until(lambda: first.election.is_leader, message="a leads")
    second = Candidate(backend.open(), "b")
    second.election.start()
    assert second.election.leader_id() == "a"
    first.election.resign()
    assert not first.election.is_leader
    wait_until(lambda: second.election.is_leader, message="b takes over")
    assert first.history() == [True, False]
    assert second.election.leader_id() == "b"
    assert not first.election.is_leader


def test_no_leader_means_no_leader_id(backend: Backend) -> None:
    store = backend.open()
    election = store.election("/empty", "nobody")
    assert election.leader_id() is None
    assert not election.is_leader


def test_an_election_starts_once(backend: Backend) -> None:
    candidate = Candidate(backend.open(), "once")
    candidate.election.start()
    with pytest.raises(MetadataStoreError, match="already started"):
        candidate.election.start()
