"""The plain (decoded) copies of dictionary columns that committed segments keep for queries, under one byte budget.

A copy scans faster than its dictionary column (``cuvee.server.queryable``), but it is anonymous memory beside the
mapped segment, up to ``PLAIN_BYTES_FACTOR`` times the encoded column: kept without a bound, the copies of every
column queries ever read would grow a server until the OOM killer ends it. So the copies of all a server's
segments live here, under ``max_bytes`` (the server's ``plain_copy_bytes``), and a segment's copies leave with the
segment (when its ``CommittedSegment`` is collected). Thread-safe.

Room is made only from copies nobody read for ``min_idle_seconds`` (least recently read first). Plain LRU thrashes
when the columns queries read outgrow the budget: at 10M ClickBench rows a ``SELECT *`` read more copies than
512 MiB holds, so every query decoded every column again and evicted the copies the previous one had made (7 s
where DuckDB takes a fraction of one). Now the copies that fit stay, and a column that finds no room is
*declined*: scanned encoded (as before copies existed) until ``min_idle_seconds`` pass, then tried again, so a
changed workload still gets its copies once the old ones go idle. A copy bigger than the whole budget is never
kept.
"""

from __future__ import annotations

import enum
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import pyarrow as pa

DEFAULT_PLAIN_COPY_BYTES = 512 * 1024 * 1024
DEFAULT_PLAIN_COPY_MIN_IDLE_SECONDS = 60.0

_Key = tuple[int, str]  # (the owner's token, column)


class Kept(enum.Enum):
    """What ``put`` did with a copy."""

    KEPT = "kept"
    DECLINED = "declined"  # no room now (every kept copy read lately): try again after min_idle_seconds
    TOO_BIG = "too big"  # bigger than the whole budget: never kept


class PlainCopies:
    """Copies by (owner, column), least recently read first out. ``max_bytes`` 0 keeps none."""

    def __init__(self, max_bytes: int = DEFAULT_PLAIN_COPY_BYTES,
                 min_idle_seconds: float = DEFAULT_PLAIN_COPY_MIN_IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        if max_bytes < 0:
            raise ValueError("plain_copy_bytes must be 0 (no copies kept) or positive")
        if min_idle_seconds < 0:
            raise ValueError("plain_copy_min_idle_seconds must be 0 or positive")
        self.max_bytes = max_bytes
        self.min_idle_seconds = min_idle_seconds
        self.bytes = 0
        self._clock = clock
        self._copies: OrderedDict[_Key, tuple[pa.Array, float]] = OrderedDict()  # -> (copy, last read)
        self._declined: dict[_Key, float] = {}  # -> when a copy found no room
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
            entry = self._copies.get((token, column))
            if entry is None:
                return None
            self._copies[(token, column)] = (entry[0], self._clock())
            self._copies.move_to_end((token, column))
            return entry[0]

    def worth_decoding(self, token: int, column: str) -> bool:
        """False while a copy of ``column`` was declined less than ``min_idle_seconds`` ago: decoding it again
        now would only be declined again (or evict copies that are in use)."""
        with self._lock:
            declined = self._declined.get((token, column))
            if declined is None:
                return True
            if self._clock() - declined < self.min_idle_seconds:
                return False
            del self._declined[(token, column)]
            return True

    def put(self, token: int, column: str, copy: pa.Array) -> Kept:
        """Keep ``copy``, making room from copies idle for ``min_idle_seconds``, least recently read first."""
        size = copy.nbytes
        if size > self.max_bytes:
            return Kept.TOO_BIG
        with self._lock:
            now = self._clock()
            old = self._copies.pop((token, column), None)
            if old is not None:
                self.bytes -= old[0].nbytes
            while self.bytes + size > self.max_bytes and self._copies:
                oldest = next(iter(self._copies.values()))
                if now - oldest[1] < self.min_idle_seconds:
                    break  # the least recently read was read lately: so was every other
                _, (dropped, _) = self._copies.popitem(last=False)
                self.bytes -= dropped.nbytes
            if self.bytes + size > self.max_bytes:
                self._declined[(token, column)] = now
                return Kept.DECLINED
            self._copies[(token, column)] = (copy, now)
            self.bytes += size
            return Kept.KEPT

    def _forget(self, token: int) -> None:
        with self._lock:
            for key in [k for k in self._copies if k[0] == token]:
                self.bytes -= self._copies.pop(key)[0].nbytes
            for key in [k for k in self._declined if k[0] == token]:
                del self._declined[key]


PLAIN_COPIES = PlainCopies()  # the process's copies; a server sets its budget (``ServerConfig.plain_copy_bytes``)
