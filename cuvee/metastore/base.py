"""What both metadata stores share: ordered delivery of session-state changes and the elections they host."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from cuvee.spi.metastore import LeaderElection, MetadataStore, SessionState

log = logging.getLogger(__name__)

_STOP = object()


class CallbackQueue:
    """Runs submitted callbacks one at a time, in order, on a daemon thread.

    Callbacks are user code: running them here keeps the thread that detected a change (kazoo's connection
    thread, our heartbeat or poller thread) from being blocked or killed by them.
    """

    def __init__(self, name: str):
        self._name = name
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, callback: Callable[..., object], *args: object) -> None:
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put((callback, args))

    def close(self, timeout: float = 5.0) -> None:
        """Run what is queued, then stop. Safe to call from inside a callback (it then does not wait)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        if thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            callback, args = item  # type: ignore[misc]
            try:
                callback(*args)
            except Exception:  # a listener's bug must not stop later notifications
                log.exception("%s: callback %r failed", self._name, callback)


class StoreBase(MetadataStore):
    """State listeners and election bookkeeping; subclasses call ``_publish_state`` on every transition."""

    election_retry_interval = 1.0
    """Seconds between an election's fallback re-checks; watches wake it sooner."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[SessionState], None]] = []
        self._listener_calls = CallbackQueue("metastore-state-listeners")
        self._elections: list[LeaderElection] = []
        self._base_lock = threading.Lock()

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        with self._base_lock:
            self._listeners.append(listener)

    def _publish_state(self, state: SessionState) -> None:
        log.info("metadata store session %s is now %s", self.session_id, state.value)
        with self._base_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            self._listener_calls.submit(listener, state)

    def election(self, path: str, identifier: str, on_change: Callable[[bool], None] | None = None) -> LeaderElection:
        from cuvee.metastore.election import Election

        election = Election(self, path, identifier, on_change, retry_interval=self.election_retry_interval)
        with self._base_lock:
            self._elections.append(election)
        return election

    def _close_base(self) -> None:
        """Resign every election (so on_change(False) is delivered), then stop notifying listeners."""
        with self._base_lock:
            elections = list(self._elections)
            self._elections.clear()
        for election in elections:
            election.resign()
        self._listener_calls.close()
