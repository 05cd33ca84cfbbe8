"""Turns rows of the embedded store's change log into persistent watch callbacks."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cuvee.spi.metastore import Subscription, WatchEvent, WatchEventType

log = logging.getLogger(__name__)

Callback = Callable[[WatchEvent], None]


@dataclass(eq=False)
class _Watch(Subscription):
    feed: ChangeFeed
    key: int
    path: str
    on_children: bool
    callback: Callback
    after_seq: int  # changes logged before the watch existed are not its events
    cancelled: bool = field(default=False)

    def cancel(self) -> None:
        self.cancelled = True
        self.feed.remove(self.key)


class ChangeFeed:
    """The subscriptions of one client. ``deliver`` runs on the client's poller thread only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[int, _Watch] = {}
        self._keys = itertools.count()

    def subscribe(self, path: str, callback: Callback, *, on_children: bool, after_seq: int) -> Subscription:
        with self._lock:
            watch = _Watch(self, next(self._keys), path, on_children, callback, after_seq)
            self._watches[watch.key] = watch
        return watch

    def remove(self, key: int) -> None:
        with self._lock:
            self._watches.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            for watch in self._watches.values():
                watch.cancelled = True
            self._watches.clear()

    def deliver(self, rows: Iterable[tuple[int, str, str]]) -> None:
        """Fire the watches matching each change, in log order."""
        for seq, path, type_name in rows:
            event = WatchEvent(WatchEventType(type_name), path)
            for watch in self._matching(event):
                if seq > watch.after_seq:
                    self._fire(watch, event)

    def resync(self, exists: Callable[[str], bool]) -> None:
        """Some changes were trimmed before we read them: tell every watch to re-read."""
        with self._lock:
            watches = list(self._watches.values())
        for watch in watches:
            if watch.on_children:
                event_type = WatchEventType.CHILDREN
            else:
                event_type = WatchEventType.CHANGED if exists(watch.path) else WatchEventType.DELETED
            self._fire(watch, WatchEvent(event_type, watch.path))

    def _matching(self, event: WatchEvent) -> list[_Watch]:
        with self._lock:
            matches = [
                w
                for w in self._watches.values()
                if w.path == event.path and w.on_children == (event.type is WatchEventType.CHILDREN)
            ]
            if event.type is WatchEventType.DELETED:
                # Like ZooKeeper's children watch, a children watch ends with its node.
                for w in list(self._watches.values()):
                    if w.on_children and w.path == event.path:
                        w.cancelled = True
                        del self._watches[w.key]
        return matches

    @staticmethod
    def _fire(watch: _Watch, event: WatchEvent) -> None:
        if watch.cancelled:
            return
        try:
            watch.callback(event)
        except Exception:  # one subscriber's bug must not starve the others
            log.exception("watch callback for %s failed on %s", watch.path, event)
