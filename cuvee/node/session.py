"""A role's metadata-store session that outlives session expiry.

A ``MetadataStore`` client whose session is LOST is dead for good (its ephemeral nodes, watches and elections
are gone; the SPI says: close it and open a new one). ``SessionHolder`` is the one indirection a role's
components use instead of a raw client: it delegates every call to the current client and, when that client
reports LOST, re-establishes the session on a background thread (never on the store's callback thread):

1. close the dead client and open a new one on the same URI, retrying with exponential backoff;
2. run the role's renewal hooks (``on_renewal``): redo what ``start()`` did with the store (registration, the
   ephemeral live node, current states...); a hook that fails makes the attempt fail and start over;
3. move every watch made through the holder to the new client and fire it once (changes made while the session
   was gone were missed, and watch consumers re-read on any event);
4. move every election made through the holder to the new client and campaign again if it had been started.

Listeners added with ``add_state_listener`` hear LOST from the dead client and CONNECTED once the new session
is fully re-established. While the session is being renewed, calls fail with StoreUnavailableError (retry
later), not SessionExpiredError: to the holder's users expiry is a transient outage.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from cuvee.metastore import open_metastore
from cuvee.spi.metastore import (
    ANY_VERSION,
    LeaderElection,
    MetadataStore,
    MetadataStoreError,
    Node,
    NoNodeError,
    Op,
    SessionExpiredError,
    SessionState,
    StoreUnavailableError,
    Subscription,
    WatchEvent,
    WatchEventType,
)

log = logging.getLogger(__name__)

Opener = Callable[[str], MetadataStore]
T = TypeVar("T")


class SessionHolder(MetadataStore):
    """``SessionHolder(uri, retry_initial_seconds=..., retry_max_seconds=...)``; ``on_renewal(hook)``; ``close()``.

    ``current`` is the client in use (tests inject faults into it); ``renewals`` counts re-established sessions.
    """

    def __init__(
        self,
        uri: str,
        *,
        retry_initial_seconds: float = 0.5,
        retry_max_seconds: float = 10.0,
        name: str = "metastore",
        opener: Opener = open_metastore,
    ):
        if retry_initial_seconds <= 0 or retry_max_seconds < retry_initial_seconds:
            raise ValueError("session retry: need 0 < retry_initial_seconds <= retry_max_seconds")
        self._uri = uri
        self._retry_initial = retry_initial_seconds
        self._retry_max = retry_max_seconds
        self._name = name
        self._opener = opener
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._renewing = False
        self._thread: threading.Thread | None = None
        self._listeners: list[Callable[[SessionState], None]] = []
        self._hooks: list[Callable[[], None]] = []
        self._subscriptions: list[_HeldSubscription] = []
        self._elections: list[_HeldElection] = []
        self.renewals = 0
        self._current = opener(uri)
        self._listen(self._current)

    # ---- what roles use ------------------------------------------------------------------------------------

    @property
    def current(self) -> MetadataStore:
        return self._current

    def on_renewal(self, hook: Callable[[], None]) -> None:
        """Run ``hook()`` after each new session is opened, before watches and elections move to it."""
        with self._lock:
            self._hooks.append(hook)

    # ---- MetadataStore: delegation --------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._current.session_id

    @property
    def session_timeout_seconds(self) -> float:
        return self._current.session_timeout_seconds

    @property
    def state(self) -> SessionState:
        return self._current.state

    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True) -> Node:
        return self._call(lambda s: s.create(path, data, ephemeral=ephemeral, make_parents=make_parents))

    def get(self, path: str) -> Node:
        return self._call(lambda s: s.get(path))

    def exists(self, path: str) -> Node | None:
        return self._call(lambda s: s.exists(path))

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Node:
        return self._call(lambda s: s.set(path, data, expected_version))

    def delete(self, path: str, expected_version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        self._call(lambda s: s.delete(path, expected_version, recursive=recursive))

    def children(self, path: str) -> list[str]:
        return self._call(lambda s: s.children(path))

    def transaction(self, ops: Sequence[Op]) -> list[Node | None]:
        return self._call(lambda s: s.transaction(ops))

    def watch(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        return self._subscribe(path, callback, children=False)

    def watch_children(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        return self._subscribe(path, callback, children=True)

    def election(self, path: str, identifier: str, on_change: Callable[[bool], None] | None = None) -> LeaderElection:
        election = _HeldElection(self, path, identifier, on_change)
        with self._lock:
            self._elections.append(election)
        return election

    def close(self) -> None:
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._current.close()

    # ---- internals ------------------------------------------------------------------------------------------

    def _call(self, fn: Callable[[MetadataStore], T]) -> T:
        store = self._current
        try:
            return fn(store)
        except SessionExpiredError as exc:
            if self._closed.is_set():
                raise
            raise StoreUnavailableError(f"metadata store session expired; a new one is being opened: {exc}") from exc

    def _subscribe(self, path: str, callback: Callable[[WatchEvent], None], *, children: bool) -> Subscription:
        held = _HeldSubscription(self, path, callback, children)
        with self._lock:  # under the lock: a renewal cannot move the list between the watch and the append
            held.inner = self._call(held.make)
            self._subscriptions.append(held)
        return held

    def _forget(self, item: object) -> None:
        with self._lock:
            if item in self._subscriptions:
                self._subscriptions.remove(item)  # type: ignore[arg-type]
            if item in self._elections:
                self._elections.remove(item)  # type: ignore[arg-type]

    def _listen(self, store: MetadataStore) -> None:
        store.add_state_listener(lambda state: self._on_state(store, state))

    def _on_state(self, store: MetadataStore, state: SessionState) -> None:
        """On the store's callback thread: forward, and on LOST start the renewal thread (never renew here)."""
        if store is not self._current or self._closed.is_set():
            return  # a dead client's late news
        self._publish(state)
        if state is not SessionState.LOST:
            return
        with self._lock:
            if self._renewing or self._closed.is_set():
                return
            self._renewing = True
            self._thread = threading.Thread(target=self._renew_loop, name=f"{self._name}-session-renewal",
                                             daemon=True)
            self._thread.start()

    def _publish(self, state: SessionState) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(state)
            except Exception:  # a listener's bug must not stop the others
                log.exception("%s: session state listener %r failed", self._name, listener)

    def _renew_loop(self) -> None:
        delay = self._retry_initial
        while True:
            if self._closed.is_set():
                return
            if self._renew_once():
                with self._lock:
                    renewed = self._current.state is not SessionState.LOST  # it may have expired again meanwhile
                    self._renewing = not renewed
                if renewed:
                    break
                continue
            self._closed.wait(delay)
            delay = min(delay * 2, self._retry_max)
        self.renewals += 1
        log.info("%s: metadata store session re-established (%s)", self._name, self._current.session_id)
        self._publish(self._current.state)

    def _renew_once(self) -> bool:
        """Close the dead client, open a new one and move everything onto it; False if any step failed."""
        dead = self._current
        try:
            dead.close()
        except Exception:  # noqa: BLE001 - it is dead anyway
            log.debug("%s: closing the expired metadata store client failed", self._name, exc_info=True)
        try:
            store = self._opener(self._uri)
        except Exception as exc:  # noqa: BLE001 - unreachable store, bad disk...: retry with backoff
            log.warning("%s: cannot open a new metadata store session yet: %s", self._name, exc)
            return False
        with self._lock:
            if self._closed.is_set():
                store.close()
                return False
            self._current = store
            hooks = list(self._hooks)
            # what exists now was made on a dead client; whatever is made from here on is made on the new one
            subscriptions = list(self._subscriptions)
            elections = list(self._elections)
        self._listen(store)
        try:
            for hook in hooks:
                hook()
            for subscription in subscriptions:
                subscription.move_to(store)
            for election in elections:
                election.move_to(store)
        except Exception as exc:  # noqa: BLE001 - the next attempt closes this client and starts over
            log.warning("%s: re-establishing the metadata store session failed (will retry): %s", self._name, exc)
            return False
        return True


class _HeldSubscription(Subscription):
    def __init__(self, holder: SessionHolder, path: str, callback: Callable[[WatchEvent], None], children: bool):
        self._holder = holder
        self.path = path
        self._callback = callback
        self._children = children
        self._cancelled = False
        self.inner: Subscription | None = None

    def make(self, store: MetadataStore) -> Subscription:
        if self._children:
            return store.watch_children(self.path, self._callback)
        return store.watch(self.path, self._callback)

    def move_to(self, store: MetadataStore) -> None:
        if self._cancelled:
            return
        try:
            self.inner = self.make(store)
        except NoNodeError:  # a children watch needs its node: the owner's polling covers it
            log.warning("watch on %s could not be renewed: the node is gone", self.path)
            self.inner = None
        self._callback(WatchEvent(WatchEventType.CHILDREN if self._children else WatchEventType.CHANGED, self.path))

    def cancel(self) -> None:
        self._cancelled = True
        self._holder._forget(self)
        if self.inner is not None:
            try:
                self.inner.cancel()
            except MetadataStoreError:
                pass


class _HeldElection(LeaderElection):
    def __init__(self, holder: SessionHolder, path: str, identifier: str, on_change: Callable[[bool], None] | None):
        self._holder = holder
        self._path = path
        self._identifier = identifier
        self._on_change = on_change
        self._lock = threading.Lock()
        self._started = False
        self._resigned = False
        self._inner = holder.current.election(path, identifier, on_change)

    def start(self) -> None:
        with self._lock:
            self._started = True
            inner = self._inner
        inner.start()

    def move_to(self, store: MetadataStore) -> None:
        """Campaign on the new session (the dead one's election resigned when its client closed)."""
        with self._lock:
            if self._resigned:
                return
            self._inner = store.election(self._path, self._identifier, self._on_change)
            if self._started:
                self._inner.start()

    @property
    def is_leader(self) -> bool:
        return self._inner.is_leader

    def leader_id(self) -> str | None:
        return self._holder._call(lambda _: self._inner.leader_id())  # type: ignore[no-any-return]

    def resign(self) -> None:
        with self._lock:
            self._resigned = True
            inner = self._inner
        self._holder._forget(self)
        inner.resign()
