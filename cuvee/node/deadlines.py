"""One thread that interrupts queries past their deadline, instead of a timer thread started per query.

Starting a ``threading.Timer`` costs every query a thread's creation and start (a measurable part of a small
query's time on a server); a single watcher with a heap of deadlines costs a heap push and, when the query ends in
time, a flag. ``watch`` returns a handle; ``Handle.cancel()`` before the deadline means the action never runs.

An action can repeat (``every``) until its handle is cancelled: DuckDB forgets an interrupt that comes before its
statement starts, so a deadline that passes between a last check and the statement's start would otherwise let
the statement run to its end. Shared by every role (the servers' queries, the broker's merges).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Handle:
    """A watched deadline. ``cancel`` drops the action at once (it may hold a cursor), so a query that ended in
    time leaves only this small object in the heap until the heap is compacted."""

    __slots__ = ("action", "_owner", "every")

    def __init__(self, action: Callable[[], None], owner: Deadlines, every: float | None = None) -> None:
        self.action: Callable[[], None] | None = action
        self._owner = owner
        self.every = every

    @property
    def cancelled(self) -> bool:
        return self.action is None

    def cancel(self) -> None:
        if self.action is not None:
            self.action = None
            self._owner._cancelled()


class Deadlines:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cancelled_count = 0
        self._heap: list[tuple[float, int, Handle]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, action: Callable[[], None], every: float | None = None) -> Handle:
        """Run ``action`` in the watcher's thread at ``deadline`` (this clock) unless the handle is cancelled, and
        with ``every`` (seconds) again that often until it is."""
        handle = Handle(action, self, every)
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="query-deadlines", daemon=True)
                self._thread.start()
            first = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, next(self._order), handle))
            if first:
                self._changed.notify()
        return handle

    def __len__(self) -> int:
        """Entries in the heap, cancelled ones not yet compacted away included."""
        with self._changed:
            return len(self._heap)

    def _cancelled(self) -> None:
        """A handle was cancelled: when cancelled entries are most of the heap (queries end long before hour-long
        timeouts), rebuild it without them, so it holds about as many entries as queries running."""
        with self._changed:
            self._cancelled_count += 1
            if self._cancelled_count > 64 and self._cancelled_count * 2 > len(self._heap):
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled_count = 0

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                    self._cancelled_count = max(self._cancelled_count - 1, 0)
                if not self._heap:
                    self._changed.wait()
                    continue
                wait = self._heap[0][0] - self._clock()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                due, _, handle = heapq.heappop(self._heap)
                action = handle.action
                if handle.every is None:
                    handle.action = None
                else:  # again until cancelled
                    heapq.heappush(self._heap, (max(due + handle.every, self._clock()), next(self._order), handle))
            if action is not None:
                try:
                    action()
                except Exception:  # noqa: BLE001 - one failed action must not stop the watcher
                    log.warning("a deadline action failed", exc_info=True)


DEADLINES = Deadlines()
