"""The plain (decoded) copies of dictionary columns that committed segments keep for queries, under one byte budget.

A copy scans faster than its dictionary column (``cuvee.server.queryable``), but it is anonymous memory beside the
mapped segment, up to ``PLAIN_BYTES_FACTOR`` times the encoded column: kept without a bound, the copies of every
column queries ever read would grow a server until the OOM killer ends it. So the copies of all a server's
segments live here, under ``max_bytes`` (the server's ``plain_copy_bytes``): the least recently read goes first to
make room, a copy bigger than the whole budget is not kept (its column is scanned encoded, as before), and a
segment's copies leave with the segment (when its ``CommittedSegment`` is collected). Thread-safe.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

import pyarrow as pa

DEFAULT_PLAIN_COPY_BYTES = 512 * 1024 * 1024

_Key = tuple[int, str]  # (the owner's token, column)


class PlainCopies:
    """Copies by (owner, column), least recently read first out. ``max_bytes`` 0 keeps none."""

    def __init__(self, max_bytes: int = DEFAULT_PLAIN_COPY_BYTES):
        if max_bytes < 0:
            raise ValueError("plain_copy_bytes must be 0 (no copies kept) or positive")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._copies: OrderedDict[_Key, pa.Array] = OrderedDict()
        self._lock = threading.Lock()
        self._tokens = 0

    def owner(self, segment: Any) -> int:
        """A token for ``segment``'s copies, which are dropped when the segment object is collected."""
        with self._lock:
            self._tokens += 1
            token = self._tokens
        weakref.finalize(segment, self._forget, token)
        return token

    def get(self, token: int, column: str) -> pa.Array | None:
        with self._lock:
            copy = self._copies.get((token, column))
            if copy is not None:
                self._copies.move_to_end((token, column))
            return copy

    def put(self, token: int, column: str, copy: pa.Array) -> bool:
        """Keep ``copy``, making room by dropping the least recently read; False when it cannot fit at all."""
        size = copy.nbytes
        if size > self.max_bytes:
            return False
        with self._lock:
            old = self._copies.pop((token, column), None)
            if old is not None:
                self.bytes -= old.nbytes
            while self.bytes + size > self.max_bytes and self._copies:
                _, dropped = self._copies.popitem(last=False)
                self.bytes -= dropped.nbytes
            self._copies[(token, column)] = copy
            self.bytes += size
            return True

    def _forget(self, token: int) -> None:
        with self._lock:
            for key in [k for k in self._copies if k[0] == token]:
                self.bytes -= self._copies.pop(key).nbytes


PLAIN_COPIES = PlainCopies()  # the process's copies; a server sets its budget (``ServerConfig.plain_copy_bytes``)
