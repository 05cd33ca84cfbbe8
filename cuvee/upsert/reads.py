"""What a query reads of an upsert table's segment: its valid docs, each segment the cheapest way.

Every version of a key stays stored (until compaction rewrites the segment), so a scan of an upsert segment that
reads every row and filters the valid ones pays for the invalid rows too: with four versions per key, four times
the rows of the same data held append-only. Three cases, from cheapest:

- every doc of the segment is valid: read as it is, no filter;
- a *committed* segment read a second time at the same valid-docs version (bitmaps are copied on write, so a
  bitmap object *is* a version): its valid rows are taken then and kept in a cache with a byte budget, least
  recently read evicted first; later queries, while the segment's keys do not move, read only valid rows, as
  Pinot's valid-doc filter does. Taking rows costs more than filtering them once, so a version read only once
  (keys moving under steady updates) is never copied;
- otherwise (a consuming segment, whose bitmap changes with every batch; a committed segment's first read of a
  version; valid rows that would not fit the budget): the valid-docs bitmap goes to DuckDB's scan as a boolean
  column, ``VALID_COLUMN``, filtered in the scan itself.

A read mixing the two carries ``VALID_COLUMN`` on every table, true for the rows already taken.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

VALID_COLUMN = "__cuvee_valid"  # the column a query's scan filters on (never shown: the server's view drops it)
DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ValidRows:
    """A segment's rows for one query: ``masked`` when ``table`` carries ``VALID_COLUMN`` for the scan to filter,
    else every row of ``table`` is valid."""

    table: pa.Table
    masked: bool


def valid_mask(num_rows: int, bits: Any) -> pa.Array:
    """A boolean per row of a segment's query table: whether its valid-docs bitmap marks the doc (docs past the
    table are not read)."""
    mask = np.zeros(num_rows, bool)
    mask[_docs(bits, num_rows)] = True
    return pa.array(mask)


def _docs(bits: Any, num_rows: int) -> np.ndarray:
    docs = np.frombuffer(bits.to_array(), np.uint32) if len(bits) else np.zeros(0, np.uint32)
    return docs[docs < num_rows]


class ValidRowCache:
    """Committed segments' valid rows, taken on the second read of a valid-docs version, within ``budget_bytes``
    (0: no cache; dictionary columns are charged their indices: the dictionary stays the segment's). Thread-safe;
    holds segments weakly; ``forget`` drops a segment that left."""

    def __init__(self, budget_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if budget_bytes < 0:
            raise ValueError("the valid-row cache budget must be 0 (none) or positive")
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[weakref.ref[Any], Any, pa.Table, int]] = OrderedDict()
        self._seen: dict[str, tuple[weakref.ref[Any], Any]] = {}  # versions read once, not taken
        self._bytes = 0
        self.hits = self.misses = 0

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def read(self, name: str, token: Any, table: pa.Table, bits: Any, *, committed: bool) -> ValidRows:
        """The rows of segment ``name`` (copy ``token``, rows ``table`` in doc order) a query reads, given its
        valid docs ``bits`` (a frozen bitmap, replaced whenever the segment's valid docs change)."""
        n = table.num_rows
        count = len(bits)
        if count == 0:
            return ValidRows(table.slice(0, 0), False)
        if count == n and bits.max() < n:
            return ValidRows(table, False)
        masked = ValidRows(table.append_column(VALID_COLUMN, valid_mask(n, bits)), True) if not committed \
            or self.budget_bytes == 0 or _copied_bytes(table) * count / n > self.budget_bytes else None
        if masked is not None:
            return masked
        with self._lock:
            entry = self._entries.get(name)
            if entry is not None and entry[0]() is token and entry[1] is bits:
                self._entries.move_to_end(name)
                self.hits += 1
                return ValidRows(entry[2], False)
            self.misses += 1
            seen = self._seen.get(name)
            second = seen is not None and seen[0]() is token and seen[1] is bits
            if not second:
                self._seen[name] = (weakref.ref(token), bits)
        if not second:
            return ValidRows(table.append_column(VALID_COLUMN, valid_mask(n, bits)), True)
        taken = table.take(pa.array(_docs(bits, n)))
        size = _copied_bytes(taken)
        with self._lock:
            self._seen.pop(name, None)
            self._drop(name)
            for dead in [k for k, (ref, *_) in self._entries.items() if ref() is None]:
                self._drop(dead)
            if size <= self.budget_bytes:
                self._entries[name] = (weakref.ref(token), bits, taken, size)
                self._bytes += size
                while self._bytes > self.budget_bytes:
                    self._drop(next(iter(self._entries)))
        return ValidRows(taken, False)

    def forget(self, name: str) -> None:
        """Segment ``name`` left (or was replaced): its rows are no longer kept."""
        with self._lock:
            self._seen.pop(name, None)
            self._drop(name)

    def _drop(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self._bytes -= entry[3]


def _copied_bytes(table: pa.Table) -> int:
    """Bytes a copy of ``table``'s rows allocates: a dictionary column's indices (its dictionary is shared)."""
    size = 0
    for column in table.columns:
        for chunk in column.chunks:
            size += chunk.indices.nbytes if isinstance(chunk, pa.DictionaryArray) else chunk.nbytes
    return size


def scan_tables(parts: Sequence[ValidRows]) -> list[pa.Table]:
    """The parts as tables of one shape: all carrying ``VALID_COLUMN`` (true for rows already valid) if any part
    needs the scan's filter, else none."""
    if not any(p.masked for p in parts):
        return [p.table for p in parts]
    return [p.table if p.masked else p.table.append_column(VALID_COLUMN, pa.array(np.ones(p.table.num_rows, bool)))
            for p in parts]
