"""The ZooKeeper metadata store, through kazoo.

Every call is made asynchronously and awaited with ``request_timeout``, so a caller never hangs on a dead
server; kazoo errors become the SPI's. Session expiry (kazoo's LOST) is final for this client, as the SPI says:
ephemeral nodes are gone, so the caller must close it and open a new one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from cuvee.errors import UserError
from cuvee.metastore.base import StoreBase
from cuvee.metastore.paths import check_deletable, check_path, join
from cuvee.spi.metastore import (
    ANY_VERSION,
    CheckVersion,
    Create,
    Delete,
    MetadataStoreError,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionState,
    SetData,
    StoreUnavailableError,
    Subscription,
    TransactionFailedError,
    VersionConflictError,
    WatchEvent,
    WatchEventType,
)

log = logging.getLogger(__name__)

_RECURSIVE_DELETE_ATTEMPTS = 5
_STATES = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED}


@dataclass(frozen=True)
class ZooKeeperOptions:
    """Timings in seconds, settable as URI query parameters (``zk://h:2181/cuvee?session_timeout=6``)."""

    session_timeout: float = 10.0
    connect_timeout: float = 15.0
    request_timeout: float = 10.0
    reconnect_max_delay: float = 1.0

    def __post_init__(self) -> None:
        for name in ("session_timeout", "connect_timeout", "request_timeout", "reconnect_max_delay"):
            if getattr(self, name) <= 0:
                raise UserError(f"zookeeper metastore option {name} must be > 0, got {getattr(self, name)}")


def translate(exc: Exception, path: str) -> MetadataStoreError:
    """A kazoo failure as the SPI error a caller can handle, with a message an operator can act on."""
    if isinstance(exc, MetadataStoreError):
        return exc
    if isinstance(exc, kz.NoNodeError):
        return NoNodeError(f"no metadata node at {path} (or a parent is missing)")
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(f"metadata node {path} already exists")
    if isinstance(exc, kz.BadVersionError):
        return VersionConflictError(
            f"version conflict on {path}: the node's version is not the expected one "
            "(someone else wrote first; re-read and retry)"
        )
    if isinstance(exc, kz.NotEmptyError):
        return NotEmptyError(f"cannot delete {path}: it has children (use recursive delete)")
    if isinstance(exc, kz.NoChildrenForEphemeralsError):
        return MetadataStoreError(f"cannot create {path}: its parent is ephemeral and cannot have children")
    if isinstance(exc, kz.SessionExpiredError):  # includes ConnectionClosedError
        return SessionExpiredError(f"ZooKeeper session expired or closed while accessing {path}")
    if isinstance(exc, (kz.ConnectionLoss, kz.ConnectionDropped, kz.OperationTimeoutError, KazooTimeoutError)):
        return StoreUnavailableError(f"ZooKeeper unreachable while accessing {path}: {type(exc).__name__}")
    return MetadataStoreError(f"ZooKeeper error on {path}: {type(exc).__name__} {exc}")


def _node(path: str, data: bytes, stat: Any) -> Node:
    return Node(path=path, data=bytes(data), version=stat.version, ephemeral=stat.ephemeralOwner != 0)


class _KazooSubscription(Subscription):
    """kazoo watchers stop when their function returns False; cancel() makes ours do that at the next event."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def _call_safely(callback: Callable[[WatchEvent], None], event: WatchEvent) -> None:
    try:
        callback(event)
    except Exception:  # kazoo would retry a TypeError with other arguments, and log the rest obscurely
        log.exception("watch callback for %s failed on %s", event.path, event)


class ZooKeeperMetadataStore(StoreBase):
    def __init__(self, hosts: str, chroot: str, options: ZooKeeperOptions | None = None):
        super().__init__()
        self._options = options or ZooKeeperOptions()
        self._hosts = hosts
        self._closed = False
        self._lost = False
        self._state = SessionState.CONNECTED
        self._state_lock = threading.Lock()
        self._session_id = "(connecting)"
        if chroot not in ("", "/"):
            self._ensure_chroot(chroot)
        self._client = self._new_client(hosts + ("" if chroot == "/" else chroot))
        self._client.add_listener(self._on_kazoo_state)
        self._start(self._client)
        self._session_id = format(self._client.client_id[0], "x")

    def _new_client(self, hosts: str) -> KazooClient:
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=self._options.reconnect_max_delay)
        return KazooClient(hosts=hosts, timeout=self._options.session_timeout, connection_retry=retry)

    def _start(self, client: KazooClient) -> None:
        try:
            client.start(timeout=self._options.connect_timeout)
        except KazooTimeoutError as exc:
            raise StoreUnavailableError(
                f"cannot connect to ZooKeeper at {self._hosts} within {self._options.connect_timeout}s"
            ) from exc

    def _ensure_chroot(self, chroot: str) -> None:
        client = self._new_client(self._hosts)
        self._start(client)
        try:
            client.ensure_path(chroot)
        except kz.KazooException as exc:
            raise translate(exc, chroot) from exc
        finally:
            client.stop()
            client.close()

    # ---- session state -----------------------------------------------------------------------------------

    def _on_kazoo_state(self, kazoo_state: str) -> None:
        """Runs on kazoo's connection thread: record and hand off, never block."""
        with self._state_lock:
            if self._closed or self._lost:
                return
            state = _STATES.get(kazoo_state, SessionState.LOST)
            self._lost = state is SessionState.LOST
            if state is self._state:
                return
            self._state = state
        self._publish_state(state)

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def session_timeout_seconds(self) -> float:
        return self._options.session_timeout

    @property
    def state(self) -> SessionState:
        return self._state

    def _usable(self) -> None:
        if self._closed:
            raise SessionExpiredError(f"metadata store client {self._session_id} is closed")
        if self._lost:
            raise SessionExpiredError(
                f"ZooKeeper session {self._session_id} expired; close this client and open a new one"
            )
        if self._state is not SessionState.CONNECTED:
            raise StoreUnavailableError(f"not connected to ZooKeeper at {self._hosts} (session {self._state.value})")

    def _await(self, path: str, start: Callable[[], Any]) -> Any:
        """Start one kazoo async call and wait for it, with every failure translated."""
        self._usable()
        try:
            return start().get(timeout=self._options.request_timeout)
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise translate(exc, path) from exc

    # ---- MetadataStore -----------------------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True) -> Node:
        check_path(path)
        self._await(path, lambda: self._client.create_async(path, data, ephemeral=ephemeral, makepath=make_parents))
        return Node(path=path, data=bytes(data), version=0, ephemeral=ephemeral)

    def get(self, path: str) -> Node:
        check_path(path)
        data, stat = self._await(path, lambda: self._client.get_async(path))
        return _node(path, data, stat)

    def exists(self, path: str) -> Node | None:
        try:
            return self.get(path)
        except NoNodeError:
            return None

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Node:
        check_path(path)
        stat = self._await(path, lambda: self._client.set_async(path, data, expected_version))
        return _node(path, data, stat)

    def delete(self, path: str, expected_version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        check_deletable(path)
        if not recursive:
            self._await(path, lambda: self._client.delete_async(path, expected_version))
            return
        for attempt in range(_RECURSIVE_DELETE_ATTEMPTS):
            ops: list[Op] = [Delete(p) for p in self._subtree_bottom_up(path)]
            ops.append(Delete(path, expected_version))
            try:
                self.transaction(ops)
                return
            except TransactionFailedError as failure:
                if failure.failed_op == len(ops) - 1 and not isinstance(failure.cause, NotEmptyError):
                    raise failure.cause from failure
                log.info("recursive delete of %s raced with a writer (attempt %d); retrying", path, attempt + 1)
        raise MetadataStoreError(f"cannot delete {path} recursively: its subtree keeps changing")

    def _subtree_bottom_up(self, path: str) -> list[str]:
        found: list[str] = []
        for name in self.children(path):
            child = join(path, name)
            found.extend(self._subtree_bottom_up(child))
            found.append(child)
        return found

    def children(self, path: str) -> list[str]:
        check_path(path)
        return sorted(self._await(path, lambda: self._client.get_children_async(path)))

    def transaction(self, ops: Sequence[Op]) -> list[Node | None]:
        request = self._client.transaction()
        for op in ops:
            if isinstance(op, Create):
                request.create(check_path(op.path), bytes(op.data), ephemeral=op.ephemeral)
            elif isinstance(op, SetData):
                request.set_data(check_path(op.path), bytes(op.data), op.expected_version)
            elif isinstance(op, Delete):
                request.delete(check_deletable(op.path), op.expected_version)
            elif isinstance(op, CheckVersion):
                request.check(check_path(op.path), op.version)
            else:
                raise MetadataStoreError(f"unknown transaction op {op!r}")
        if not ops:
            return []
        results = self._await(ops[0].path, request.commit_async)
        for index, (op, result) in enumerate(zip(ops, results)):
            if isinstance(result, Exception) and not isinstance(result, (kz.RolledBackError, kz.RuntimeInconsistency)):
                raise TransactionFailedError(index, translate(result, op.path))
        return [self._tx_result(op, result) for op, result in zip(ops, results)]

    @staticmethod
    def _tx_result(op: Op, result: Any) -> Node | None:
        if isinstance(op, Create):
            return Node(path=op.path, data=bytes(op.data), version=0, ephemeral=op.ephemeral)
        if isinstance(op, SetData):
            return _node(op.path, op.data, result)
        return None

    def watch(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        check_path(path)
        self._usable()
        subscription = _KazooSubscription()
        existed: list[bool] = []  # empty until kazoo's initial call, which reports the present and is not an event

        def on_data(_data: bytes | None, stat: Any, _event: Any = None) -> bool | None:
            if subscription.cancelled or self._closed:
                return False
            exists = stat is not None
            if not existed:
                existed.append(exists)
                return None
            if exists and not existed[0]:
                event_type = WatchEventType.CREATED
            elif existed[0] and not exists:
                event_type = WatchEventType.DELETED
            else:
                event_type = WatchEventType.CHANGED
            existed[0] = exists
            _call_safely(callback, WatchEvent(event_type, path))
            return None

        try:
            DataWatch(self._client, path, on_data)
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise translate(exc, path) from exc
        return subscription

    def watch_children(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        self.get(path)  # kazoo silently drops a children watch on a missing node: say so instead
        subscription = _KazooSubscription()
        primed: list[bool] = []

        def on_children(_children: list[str], _event: Any = None) -> bool | None:
            if subscription.cancelled or self._closed:
                return False
            if not primed:
                primed.append(True)
                return None
            _call_safely(callback, WatchEvent(WatchEventType.CHILDREN, path))
            return None

        try:
            ChildrenWatch(self._client, path, on_children, send_event=True)
        except (kz.KazooException, KazooTimeoutError) as exc:
            raise translate(exc, path) from exc
        return subscription

    def close(self) -> None:
        if self._closed:
            return
        self._close_base()
        with self._state_lock:
            self._closed = True
        try:
            self._client.stop()
        finally:
            self._client.close()
