"""Leader election over the metadata store SPI alone, so both stores share one implementation.

The leader is whoever holds the ephemeral node ``<path>/leader``; its data names the leader's identifier and
session. Candidates watch that node and try to create it whenever it disappears. Leadership is dropped the
moment the session leaves CONNECTED (a suspended session may already be expired on the other side, and another
candidate may lead), and re-claimed on reconnection only if the node is still ours.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable

from cuvee.metastore.base import CallbackQueue
from cuvee.metastore.paths import check_path, join
from cuvee.spi.metastore import (
    LeaderElection,
    MetadataStore,
    MetadataStoreError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    SessionState,
    Subscription,
    VersionConflictError,
    WatchEvent,
)

log = logging.getLogger(__name__)

LEADER_NODE = "leader"


def leader_payload(identifier: str, session_id: str) -> bytes:
    return json.dumps({"id": identifier, "session": session_id}, sort_keys=True).encode()


def leader_identifier(data: bytes) -> str:
    """The identifier stored in a leader node (tolerates a bare string written by hand)."""
    try:
        return str(json.loads(data)["id"])
    except (ValueError, KeyError, TypeError):
        return data.decode(errors="replace")


class Election(LeaderElection):
    def __init__(
        self,
        store: MetadataStore,
        path: str,
        identifier: str,
        on_change: Callable[[bool], None] | None = None,
        *,
        retry_interval: float = 1.0,
    ):
        self._store = store
        self._node_path = join(check_path(path), LEADER_NODE)
        self._identifier = identifier
        self._on_change = on_change
        self._retry_interval = retry_interval
        self._lock = threading.Lock()
        self._leader = False
        self._stopping = False
        self._gave_up = False  # the session expired: campaigning is pointless until a new store is opened
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._subscription: Subscription | None = None
        self._notifications = CallbackQueue(f"election-{identifier}")

    # ---- LeaderElection ----------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stopping:
                raise MetadataStoreError(f"election {self._node_path} for {self._identifier!r} was already started")
            self._thread = threading.Thread(
                target=self._campaign_loop, name=f"election-{self._identifier}", daemon=True
            )
        self._store.add_state_listener(self._on_state)
        self._subscription = self._store.watch(self._node_path, self._on_leader_node_event)
        self._thread.start()

    @property
    def is_leader(self) -> bool:
        return self._leader and self._store.state is SessionState.CONNECTED

    def leader_id(self) -> str | None:
        node = self._store.exists(self._node_path)
        return None if node is None else leader_identifier(node.data)

    def resign(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._subscription is not None:
            self._subscription.cancel()
        if thread is not None:
            self._release_node()
        self._set_leader(False)
        self._notifications.close()

    # ---- internals ---------------------------------------------------------------------------------------

    @property
    def _payload(self) -> bytes:
        return leader_payload(self._identifier, self._store.session_id)

    def _on_state(self, state: SessionState) -> None:
        if state is not SessionState.CONNECTED:
            self._set_leader(False)
        self._wake.set()

    def _on_leader_node_event(self, _event: WatchEvent) -> None:
        self._wake.set()

    def _campaign_loop(self) -> None:
        while not self._stopping and not self._gave_up:
            self._campaign_once()
            self._wake.wait(self._retry_interval)
            self._wake.clear()

    def _campaign_once(self) -> None:
        if self._store.state is not SessionState.CONNECTED:
            self._set_leader(False)
            return
        try:
            node = self._store.exists(self._node_path)
            if node is None:
                try:
                    node = self._store.create(self._node_path, self._payload, ephemeral=True)
                except NodeExistsError:
                    node = self._store.exists(self._node_path)
            self._set_leader(node is not None and node.data == self._payload)
        except SessionExpiredError:
            log.warning("election %s: session expired, %r stops campaigning", self._node_path, self._identifier)
            self._set_leader(False)
            self._gave_up = True
        except MetadataStoreError as exc:
            log.warning("election %s: %r cannot campaign now: %s", self._node_path, self._identifier, exc)
            self._set_leader(False)

    def _set_leader(self, leader: bool) -> None:
        with self._lock:
            if leader and (self._stopping or self._store.state is not SessionState.CONNECTED):
                leader = False
            if leader == self._leader:
                return
            self._leader = leader
            log.info("election %s: %r %s", self._node_path, self._identifier, "leads" if leader else "follows")
            if self._on_change is not None:
                self._notifications.submit(self._on_change, leader)

    def _release_node(self) -> None:
        """Delete the leader node if (and only if) it is still ours, so a follower can take over at once."""
        try:
            node = self._store.exists(self._node_path)
            if node is not None and node.data == self._payload:
                self._store.delete(self._node_path, node.version)
        except (NoNodeError, VersionConflictError):
            pass
        except MetadataStoreError as exc:
            log.warning("election %s: could not release leadership node: %s", self._node_path, exc)
