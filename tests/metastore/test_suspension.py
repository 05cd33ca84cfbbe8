"""Session trouble: SUSPENDED drops leadership at once, CONNECTED regains it if the leader node is still ours,
LOST hands it to another candidate. Injected per implementation: a heartbeat fault point for the embedded
store, a stopped server (or a closed session) for ZooKeeper."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from cuvee.metastore import open_metastore
from cuvee.metastore.sqlite import FAULT_STOP_HEARTBEATS, SqliteMetadataStore
from cuvee.metastore.zookeeper import ZooKeeperMetadataStore
from cuvee.spi.metastore import MetadataStore, SessionExpiredError, SessionState, StoreUnavailableError
from cuvee.testing.zookeeper import ZooKeeperServer
from tests.metastore.conftest import SQLITE_FAST
from tests.metastore.helpers import wait_until
from tests.metastore.test_election import Candidate


class StateLog:
    def __init__(self, store: MetadataStore):
        self._lock = threading.Lock()
        self.states: list[SessionState] = []
        store.add_state_listener(self._record)

    def _record(self, state: SessionState) -> None:
        with self._lock:
            self.states.append(state)

    def seen(self) -> list[SessionState]:
        with self._lock:
            return list(self.states)

    def wait_for(self, expected: list[SessionState]) -> None:
        """Listeners are called asynchronously: wait for the expected sequence, then insist on exactly it."""
        wait_until(lambda: len(self.seen()) >= len(expected), message=lambda: f"states {self.seen()}")
        assert self.seen() == expected


def start_leader_and_follower(leader_store: MetadataStore, follower_store: MetadataStore) -> tuple[Candidate, ...]:
    leader = Candidate(leader_store, "leader")
    leader.election.start()
    wait_until(lambda: leader.election.is_leader, message="first candidate leads")
    follower = Candidate(follower_store, "follower")
    follower.election.start()
    return leader, follower


# ---- embedded store ---------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_uri(tmp_path) -> str:  # type: ignore[no-untyped-def]
    options = "&".join(f"{k}={v}" for k, v in SQLITE_FAST.items())
    return f"sqlite://{tmp_path / 'meta.db'}?{options}"


@pytest.fixture
def sqlite_stores(sqlite_uri: str) -> Iterator[list[SqliteMetadataStore]]:
    stores = [open_metastore(sqlite_uri + "&session_timeout=3&suspend_after=0.5") for _ in range(2)]
    yield stores  # type: ignore[misc]
    for store in stores:
        store.close()


def test_sqlite_suspended_leader_steps_down_and_returns(sqlite_stores: list[SqliteMetadataStore]) -> None:
    leader_store, follower_store = sqlite_stores
    states = StateLog(leader_store)
    leader, follower = start_leader_and_follower(leader_store, follower_store)

    leader_store.inject_fault(FAULT_STOP_HEARTBEATS)
    wait_until(lambda: leader_store.state is SessionState.SUSPENDED, message="heartbeats stopped -> SUSPENDED")
    assert not leader.election.is_leader
    wait_until(lambda: leader.history() == [True, False], message=lambda: f"callbacks {leader.history()}")
    assert not follower.election.is_leader  # the session (and its leader node) may still be alive
    assert follower.election.leader_id() == "leader"

    leader_store.clear_fault(FAULT_STOP_HEARTBEATS)
    wait_until(lambda: leader_store.state is SessionState.CONNECTED, message="heartbeats resumed -> CONNECTED")
    wait_until(lambda: leader.election.is_leader, message="the leader node is still ours: lead again")
    wait_until(lambda: leader.history() == [True, False, True], message=lambda: f"callbacks {leader.history()}")
    states.wait_for([SessionState.SUSPENDED, SessionState.CONNECTED])
    assert not follower.election.is_leader


def test_sqlite_expired_session_is_lost_and_leadership_moves(sqlite_uri: str) -> None:
    holder = open_metastore(sqlite_uri + "&session_timeout=1&suspend_after=0.4")
    observer = open_metastore(sqlite_uri)
    try:
        assert isinstance(holder, SqliteMetadataStore)
        states = StateLog(holder)
        holder.create("/live/holder", ephemeral=True)
        leader, follower = start_leader_and_follower(holder, observer)
        holder.inject_fault(FAULT_STOP_HEARTBEATS)
        wait_until(lambda: observer.exists("/live/holder") is None, message="the observer expires the session")
        wait_until(lambda: follower.election.is_leader, message="follower takes over")
        assert leader.history() == [True, False]
        holder.clear_fault(FAULT_STOP_HEARTBEATS)
        wait_until(lambda: holder.state is SessionState.LOST, message="the holder learns its session is gone")
        states.wait_for([SessionState.SUSPENDED, SessionState.LOST])
        with pytest.raises(SessionExpiredError, match="open a new one"):
            holder.create("/live/holder", ephemeral=True)
        assert not leader.election.is_leader
    finally:
        holder.close()
        observer.close()


# ---- ZooKeeper ------------------------------------------------------------------------------------------


@pytest.fixture
def private_zookeeper() -> Iterator[ZooKeeperServer]:
    """A server of our own: these tests stop it, which would disturb the shared one."""
    with ZooKeeperServer() as server:
        yield server


@pytest.mark.zookeeper
def test_zookeeper_outage_suspends_and_leadership_returns(private_zookeeper: ZooKeeperServer) -> None:
    uri = private_zookeeper.zk_uri("/outage", session_timeout=10)
    leader_store, follower_store = open_metastore(uri), open_metastore(uri)
    try:
        states = StateLog(leader_store)
        leader, follower = start_leader_and_follower(leader_store, follower_store)

        private_zookeeper.stop()
        wait_until(lambda: leader_store.state is SessionState.SUSPENDED, message="connection lost -> SUSPENDED")
        assert not leader.election.is_leader
        wait_until(lambda: leader.history() == [True, False], message=lambda: f"callbacks {leader.history()}")
        with pytest.raises(StoreUnavailableError):
            leader_store.get("/outage")

        private_zookeeper.start()
        wait_until(lambda: leader_store.state is not SessionState.SUSPENDED, 15.0, message="reconnected")
        if leader_store.state is SessionState.LOST:
            # ZooKeeper binds its port before loading its data; a reconnect landing in that window waits out
            # kazoo's handshake timeout (= the session timeout) and the restored session expires. Correct, rare.
            # Then the SPI's other promise must hold instead: no leadership, and every call says "session expired".
            assert not leader.election.is_leader
            assert leader.history() == [True, False]
            with pytest.raises(SessionExpiredError):
                leader_store.get("/")
            return
        wait_until(lambda: leader.election.is_leader, 10.0, message="the session survived: lead again")
        wait_until(lambda: leader.history() == [True, False, True], message=lambda: f"callbacks {leader.history()}")
        states.wait_for([SessionState.SUSPENDED, SessionState.CONNECTED])
        assert not follower.election.is_leader
        assert leader.election.leader_id() == "leader"
    finally:
        leader_store.close()
        follower_store.close()


@pytest.mark.zookeeper
def test_zookeeper_expired_session_is_lost_and_leadership_moves(zookeeper: ZooKeeperServer) -> None:
    uri = zookeeper.zk_uri("/expiry", session_timeout=2)
    holder, observer = open_metastore(uri), open_metastore(uri)
    try:
        assert isinstance(holder, ZooKeeperMetadataStore)
        states = StateLog(holder)
        leader, follower = start_leader_and_follower(holder, observer)
        # The classic way to expire a session: a second connection with its id and password closes it.
        intruder = KazooClient(hosts=zookeeper.connect_string, client_id=holder._client.client_id)
        intruder.start(timeout=10)
        intruder.stop()
        intruder.close()
        wait_until(lambda: holder.state is SessionState.LOST, 10.0, message="session expired -> LOST")
        wait_until(lambda: follower.election.is_leader, 10.0, message="follower takes over")
        assert leader.history() == [True, False]
        wait_until(lambda: states.seen()[-1:] == [SessionState.LOST], message=lambda: f"states {states.seen()}")
        with pytest.raises(SessionExpiredError, match="open a new one"):
            holder.get("/")
    finally:
        holder.close()
        observer.close()
