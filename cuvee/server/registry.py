"""The segments a server serves, per table, with reference counts so a swap never pulls rows from under a query.

A query ``acquire``s the segments it was routed and holds them for its duration. ``swap`` (consuming → committed)
and ``remove`` change what the *next* acquire sees at once, under one lock, so a query sees either the old or the
new segment of a name, never both and never neither. The replaced entry is *retired*: its ``on_release`` callback
(stop a consumer, delete files) runs only when the last query holding it lets go.

A segment deleted from the ideal state (``mark_deleted``, before it is removed) is not reported missing to a
query routed to it by a broker whose view lags behind: it is gone on purpose, so the query runs without it
(Pinot's "recently deleted segments"). A segment moved to another server is not marked and stays an error.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from cuvee.server.queryable import QueryableSegment

log = logging.getLogger(__name__)

Release = Callable[[], None]


@dataclass
class _Entry:
    segment: QueryableSegment
    on_release: Release | None = None
    refs: int = 0
    retired: bool = False


@dataclass(frozen=True)
class Acquired:
    """The segments one query may read, in the order asked, the names this server does not hold, and those it
    no longer holds because they were deleted."""

    segments: list[QueryableSegment] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


MAX_DELETED_REMEMBERED = 10_000


class SegmentRegistry:
    """``{tableWithType: {segment name: segment}}``, thread-safe, ref-counted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[str, dict[str, _Entry]] = {}
        self._retired: list[_Entry] = []  # retired entries still held by queries
        self._deleted: OrderedDict[tuple[str, str], None] = OrderedDict()  # most recent last, bounded

    # ---- readers ------------------------------------------------------------------------------------------

    @contextmanager
    def acquire(self, table_with_type: str, names: Sequence[str]) -> Iterator[Acquired]:
        """Hold the named segments for the duration of the ``with`` block."""
        held: list[_Entry] = []
        missing: list[str] = []
        deleted: list[str] = []
        with self._lock:
            segments = self._tables.get(table_with_type, {})
            for name in names:
                entry = segments.get(name)
                if entry is None:
                    (deleted if (table_with_type, name) in self._deleted else missing).append(name)
                    continue
                entry.refs += 1
                held.append(entry)
        try:
            yield Acquired([e.segment for e in held], missing, deleted)
        finally:
            self._release(held)

    def get(self, table_with_type: str, name: str) -> QueryableSegment | None:
        """The segment now registered under ``name`` (not held: use ``acquire`` to read rows safely)."""
        with self._lock:
            entry = self._tables.get(table_with_type, {}).get(name)
            return entry.segment if entry else None

    def segments(self, table_with_type: str) -> list[QueryableSegment]:
        with self._lock:
            return [e.segment for _, e in sorted(self._tables.get(table_with_type, {}).items())]

    def names(self, table_with_type: str) -> list[str]:
        with self._lock:
            return sorted(self._tables.get(table_with_type, {}))

    def tables(self) -> list[str]:
        with self._lock:
            return sorted(t for t, segments in self._tables.items() if segments)

    def ref_count(self, table_with_type: str, name: str) -> int:
        """How many queries hold the segment now registered under ``name`` (0 if absent)."""
        with self._lock:
            entry = self._tables.get(table_with_type, {}).get(name)
            return entry.refs if entry else 0

    def retired_in_use(self) -> int:
        """Replaced or removed segments whose release waits for queries to finish."""
        with self._lock:
            return len(self._retired)

    # ---- writers ------------------------------------------------------------------------------------------

    def put(self, table_with_type: str, segment: QueryableSegment, on_release: Release | None = None) -> None:
        """Serve ``segment`` under its name, replacing (and retiring) any segment of that name."""
        self.swap(table_with_type, segment.name, segment, on_release)

    def swap(
        self, table_with_type: str, name: str, segment: QueryableSegment, on_release: Release | None = None
    ) -> QueryableSegment | None:
        """Atomically replace the segment registered as ``name``; returns the replaced one (or None)."""
        if segment.name != name:
            raise ValueError(f"cannot register segment {segment.name!r} under the name {name!r}")
        with self._lock:
            self._deleted.pop((table_with_type, name), None)  # served again (pushed again after a delete)
            segments = self._tables.setdefault(table_with_type, {})
            old = segments.get(name)
            segments[name] = _Entry(segment, on_release)
            ready = self._retire(old)
        self._run_releases(ready)
        return old.segment if old else None

    def mark_deleted(self, table_with_type: str, name: str) -> None:
        """``name`` left the ideal state: once removed, queries routed to it skip it instead of failing."""
        with self._lock:
            self._deleted[(table_with_type, name)] = None
            self._deleted.move_to_end((table_with_type, name))
            while len(self._deleted) > MAX_DELETED_REMEMBERED:
                self._deleted.popitem(last=False)

    def remove(self, table_with_type: str, name: str) -> QueryableSegment | None:
        """Stop serving ``name``; its release runs once no query holds it. Returns the removed segment."""
        with self._lock:
            segments = self._tables.get(table_with_type, {})
            old = segments.pop(name, None)
            if not segments:
                self._tables.pop(table_with_type, None)
            ready = self._retire(old)
        self._run_releases(ready)
        return old.segment if old else None

    def clear(self) -> None:
        """Remove everything (server shutdown)."""
        for table in self.tables():
            for name in self.names(table):
                self.remove(table, name)

    # ---- internals ----------------------------------------------------------------------------------------

    def _retire(self, entry: _Entry | None) -> list[_Entry]:
        """Mark ``entry`` retired (lock held); returns it if it can be released now."""
        if entry is None:
            return []
        entry.retired = True
        if entry.refs == 0:
            return [entry]
        self._retired.append(entry)
        return []

    def _release(self, held: list[_Entry]) -> None:
        ready: list[_Entry] = []
        with self._lock:
            for entry in held:
                entry.refs -= 1
                if entry.retired and entry.refs == 0:
                    self._retired.remove(entry)
                    ready.append(entry)
        self._run_releases(ready)

    @staticmethod
    def _run_releases(entries: list[_Entry]) -> None:
        for entry in entries:
            if entry.on_release is None:
                continue
            try:
                entry.on_release()
            except Exception:  # a failed cleanup must not fail the query that happened to release last
                log.exception("releasing segment %s failed", entry.segment.name)
