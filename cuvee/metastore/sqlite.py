"""The embedded metadata store: one SQLite file shared safely by the processes of one machine.

Concurrency comes from SQLite itself: WAL mode (readers never wait for the writer), every write inside
``BEGIN IMMEDIATE`` (writers queue on the file lock instead of failing mid-transaction), and a busy timeout.
Liveness is a ``sessions`` row per client refreshed by a heartbeat thread; any client sweeps sessions whose
heartbeat is older than their timeout, deleting their ephemeral nodes, so a SIGKILLed process's nodes vanish.
A poller thread per client reads the change log to fire watches.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cuvee.errors import UserError
from cuvee.metastore import sqlite_tree as tree
from cuvee.metastore.base import StoreBase
from cuvee.metastore.paths import check_path
from cuvee.metastore.sqlite_watch import ChangeFeed
from cuvee.spi.metastore import (
    ANY_VERSION,
    MetadataStoreError,
    Node,
    Op,
    SessionExpiredError,
    SessionState,
    StoreUnavailableError,
    Subscription,
    TransactionFailedError,
    WatchEvent,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

FAULT_STOP_HEARTBEATS = "sqlite.heartbeat"
"""Fault point: while injected, this client writes no heartbeats (as if the file were unwritable for it)."""
FAULT_POINTS = frozenset({FAULT_STOP_HEARTBEATS})

_CHANGE_BATCH = 10_000


@dataclass(frozen=True)
class SqliteOptions:
    """Timings in seconds, settable as URI query parameters (``sqlite:///x.db?session_timeout=3``)."""

    session_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    poll_interval: float = 0.05
    busy_timeout: float = 5.0
    suspend_after: float = 0.0
    """No successful heartbeat for this long means SUSPENDED; 0 picks a third of the session timeout."""
    changelog_retention: float = 60.0

    def __post_init__(self) -> None:
        for name in ("session_timeout", "heartbeat_interval", "poll_interval", "busy_timeout", "changelog_retention"):
            if getattr(self, name) <= 0:
                raise UserError(f"sqlite metastore option {name} must be > 0, got {getattr(self, name)}")
        if self.suspend_after < 0:
            raise UserError(f"sqlite metastore option suspend_after must be >= 0, got {self.suspend_after}")
        if not self.effective_suspend_after < self.session_timeout:
            raise UserError(
                "sqlite metastore option suspend_after must be below session_timeout, so a client stops leading "
                "before others can expire its session"
            )
        if not self.heartbeat_interval < self.effective_suspend_after:
            raise UserError(
                f"sqlite metastore option heartbeat_interval ({self.heartbeat_interval}s) must be below "
                f"suspend_after ({self.effective_suspend_after}s); lower it or raise session_timeout"
            )

    @property
    def effective_suspend_after(self) -> float:
        return self.suspend_after or self.session_timeout / 3


class SqliteMetadataStore(StoreBase):
    def __init__(self, path: str | Path, options: SqliteOptions | None = None):
        super().__init__()
        self._file = Path(path)
        self._options = options or SqliteOptions()
        if not self._file.parent.is_dir():
            raise UserError(f"cannot open metadata store {self._file}: directory {self._file.parent} does not exist")
        self._session_id = uuid.uuid4().hex
        self._state = SessionState.CONNECTED
        self._state_lock = threading.Lock()
        self._closed = False
        self._faults: set[str] = set()
        self._feed = ChangeFeed()
        self._stop = threading.Event()
        self._op_lock = threading.Lock()
        self._conn = self._connect()
        self._write(self._initialize)
        self._last_heartbeat = time.monotonic()
        self._last_seq = self._read(tree.last_change_seq)
        tag = self._session_id[:8]
        self._threads = [
            threading.Thread(target=self._heartbeat_loop, name=f"metastore-heartbeat-{tag}", daemon=True),
            threading.Thread(target=self._poll_loop, name=f"metastore-poller-{tag}", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # ---- connection and transactions -------------------------------------------------------------------

    def _connect(self, busy_timeout: float | None = None) -> sqlite3.Connection:
        timeout = self._options.busy_timeout if busy_timeout is None else busy_timeout
        try:
            conn = sqlite3.connect(self._file, timeout=timeout, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot open metadata store {self._file}: {exc}") from exc
        return conn

    def _initialize(self, conn: sqlite3.Connection) -> None:
        for statement in tree.SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        tree.register_session(
            conn, self._session_id, self._options.session_timeout, os.getpid(), socket.gethostname(), time.time()
        )

    def _transact(self, conn: sqlite3.Connection, begin: str, body: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn.execute(begin)
        except sqlite3.OperationalError as exc:
            raise StoreUnavailableError(f"metadata store {self._file} is busy or unreadable: {exc}") from exc
        try:
            result = body(conn)
            conn.execute("COMMIT")
            return result
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailableError(f"metadata store {self._file} failed: {exc}") from exc
            raise

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        with self._op_lock:
            return self._transact(self._conn, "BEGIN IMMEDIATE", body)

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        with self._op_lock:
            return self._transact(self._conn, "BEGIN", body)

    def _usable(self) -> None:
        if self._closed:
            raise SessionExpiredError(f"metadata store client {self._session_id} is closed")
        if self._state is SessionState.LOST:
            raise SessionExpiredError(
                f"metadata store session {self._session_id} expired; close this client and open a new one"
            )

    # ---- MetadataStore -----------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def session_timeout_seconds(self) -> float:
        return self._options.session_timeout

    @property
    def state(self) -> SessionState:
        return self._state

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True) -> Node:
        self._usable()
        try:
            return self._write(
                lambda c: tree.create_node(
                    c, self._session_id, path, data, ephemeral=ephemeral, make_parents=make_parents, now=time.time()
                )
            )
        except SessionExpiredError:
            self._set_state(SessionState.LOST)
            raise

    def get(self, path: str) -> Node:
        self._usable()
        check_path(path)
        return self._read(lambda c: tree.require_node(c, path))

    def exists(self, path: str) -> Node | None:
        self._usable()
        check_path(path)
        return self._read(lambda c: tree.read_node(c, path))

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Node:
        self._usable()
        return self._write(lambda c: tree.set_node(c, path, data, expected_version, time.time()))

    def delete(self, path: str, expected_version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        self._usable()
        self._write(lambda c: tree.delete_node(c, path, expected_version, recursive=recursive, now=time.time()))

    def children(self, path: str) -> list[str]:
        self._usable()
        return self._read(lambda c: tree.list_children(c, path))

    def transaction(self, ops: Sequence[Op]) -> list[Node | None]:
        self._usable()
        try:
            return self._write(lambda c: tree.apply_ops(c, self._session_id, ops, time.time()))
        except tree.OpFailed as failure:
            if isinstance(failure.cause, SessionExpiredError):
                self._set_state(SessionState.LOST)
            raise TransactionFailedError(failure.index, failure.cause) from failure.cause

    def watch(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        self._usable()
        return self._feed.subscribe(path, callback, on_children=False, after_seq=self._watch_start(path, False))

    def watch_children(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        self._usable()
        return self._feed.subscribe(path, callback, on_children=True, after_seq=self._watch_start(path, True))

    def _watch_start(self, path: str, must_exist: bool) -> int:
        """The change-log position a new watch starts after (a children watch needs its node, as in ZooKeeper)."""
        check_path(path)

        def read(conn: sqlite3.Connection) -> int:
            if must_exist:
                tree.require_node(conn, path)
            return tree.last_change_seq(conn)

        return self._read(read)

    def close(self) -> None:
        if self._closed:
            return
        self._close_base()
        self._closed = True
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self._feed.clear()
        try:
            self._write(lambda c: tree.end_session(c, self._session_id, time.time()))
        except MetadataStoreError as exc:  # its ephemeral nodes will expire with the session instead
            log.warning("closing metadata store session %s: %s", self._session_id, exc)
        finally:
            self._conn.close()

    # ---- fault points (tests) ---------------------------------------------------------------------------

    def inject_fault(self, name: str) -> None:
        if name not in FAULT_POINTS:
            raise ValueError(f"unknown fault point {name!r}; known: {sorted(FAULT_POINTS)}")
        self._faults.add(name)

    def clear_fault(self, name: str) -> None:
        self._faults.discard(name)

    # ---- background threads ------------------------------------------------------------------------------

    def _set_state(self, state: SessionState, *, unless_heartbeat_since: float | None = None) -> None:
        """Move to ``state``; with ``unless_heartbeat_since``, only if no heartbeat succeeded after that time
        (checked under the lock, so a late SUSPENDED cannot overwrite a fresh CONNECTED)."""
        with self._state_lock:
            if unless_heartbeat_since is not None and self._last_heartbeat > unless_heartbeat_since:
                return
            if self._state is state or self._state is SessionState.LOST or self._closed:
                return  # LOST is final: the session and its ephemeral nodes are gone for good
            self._state = state
        self._publish_state(state)

    def _heartbeat_succeeded(self) -> None:
        with self._state_lock:
            self._last_heartbeat = time.monotonic()
        self._set_state(SessionState.CONNECTED)

    def _heartbeat_loop(self) -> None:
        # A short busy timeout: a heartbeat stuck behind the file lock must not delay noticing SUSPENDED.
        conn = self._connect(busy_timeout=min(self._options.busy_timeout, self._options.heartbeat_interval))
        try:
            while not self._stop.wait(self._options.heartbeat_interval):
                if FAULT_STOP_HEARTBEATS in self._faults:
                    self._suspend_if_heartbeats_stale()
                    continue
                try:
                    alive = self._transact(conn, "BEGIN IMMEDIATE", self._heartbeat_once)
                except MetadataStoreError as exc:
                    log.warning("metadata store heartbeat failed for session %s: %s", self._session_id, exc)
                    self._suspend_if_heartbeats_stale()
                    continue
                if not alive:
                    self._set_state(SessionState.LOST)
                    return
                self._heartbeat_succeeded()
        finally:
            conn.close()

    def _suspend_if_heartbeats_stale(self) -> None:
        """Checked by both threads, so neither a stuck heartbeat nor a slow watch callback hides the problem."""
        deadline = time.monotonic() - self._options.effective_suspend_after
        if self._last_heartbeat < deadline:
            self._set_state(SessionState.SUSPENDED, unless_heartbeat_since=deadline)

    def _heartbeat_once(self, conn: sqlite3.Connection) -> bool:
        now = time.time()
        alive = tree.heartbeat(conn, self._session_id, now)
        if alive:
            for expired in tree.sweep_expired_sessions(conn, now):
                log.info("metadata store session %s expired; its ephemeral nodes were deleted", expired)
            tree.trim_changes(conn, now - self._options.changelog_retention)
        return alive

    def _poll_loop(self) -> None:
        conn = self._connect()
        try:
            while not self._stop.wait(self._options.poll_interval):
                self._suspend_if_heartbeats_stale()
                try:
                    self._poll_once(conn)
                except MetadataStoreError as exc:
                    log.warning("metadata store change poll failed: %s", exc)
        finally:
            conn.close()

    def _poll_once(self, conn: sqlite3.Connection) -> None:
        rows = self._transact(conn, "BEGIN", lambda c: tree.changes_since(c, self._last_seq, _CHANGE_BATCH))
        if not rows:
            return
        if rows[0][0] != self._last_seq + 1:
            log.warning("metadata store change log was trimmed past this client's position; re-syncing watches")
            self._feed.resync(lambda p: self._transact(conn, "BEGIN", lambda c: tree.read_node(c, p)) is not None)
        self._last_seq = rows[-1][0]
        self._feed.deliver(rows)
