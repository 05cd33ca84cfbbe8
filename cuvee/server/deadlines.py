"""One thread that interrupts queries past their deadline, instead of a timer thread started per query.

Starting a ``threading.Timer`` costs every query a thread's creation and start (a measurable part of a small
query's time on a server); a single watcher with a heap of deadlines costs a heap push and, when the query ends in
time, a flag. ``watch`` returns a handle; ``Handle.cancel()`` before the deadline means the action never runs.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable


class Handle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Deadlines:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._heap: list[tuple[float, int, Handle, Callable[[], None]]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, action: Callable[[], None]) -> Handle:
        """Run ``action`` in the watcher's thread at ``deadline`` (this clock) unless the handle is cancelled."""
        handle = Handle()
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="query-deadlines", daemon=True)
                self._thread.start()
            first = not self._heap or deadline < self._heap[0][0]
            heapq.heappush(self._heap, (deadline, next(self._order), handle, action))
            if first:
                self._changed.notify()
        return handle

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._changed.wait()
                    continue
                wait = self._heap[0][0] - self._clock()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                _, _, handle, action = heapq.heappop(self._heap)
            if not handle.cancelled:
                try:
                    action()
                except Exception:  # noqa: BLE001 - one failed action must not stop the watcher
                    pass


DEADLINES = Deadlines()
