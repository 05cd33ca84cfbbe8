"""One lock per table on the lead controller: the operations that write a table's segment records, ideal state and
pending deletions together (pushes, deletes, the purge of deep-store objects) run one at a time per table, so a
push and a delete of one name, or a push and the purge of the archive it points at again, never interleave.

Waiting is bounded (``LOCK_WAIT_SECONDS``): a caller that cannot get the lock gets a 503 and retries, instead of
holding a worker thread (the same pool serves segment completion) for as long as another push runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from cuvee.controller.errors import ApiError

LOCK_WAIT_SECONDS = 30.0


class TableBusy(ApiError):
    status = 503


class TableLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    @contextmanager
    def hold(self, table: str, timeout_seconds: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(table, threading.RLock())
        if not lock.acquire(timeout=timeout_seconds):
            raise TableBusy(f"another push or delete of {table} is still running; retry in a moment")
        try:
            yield
        finally:
            lock.release()


TABLE_LOCKS = TableLocks()
