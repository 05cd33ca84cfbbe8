"""One upsert table on one server: a ``PartitionUpsert`` per stream partition, fed by the server's segments.

The server wires three moments in (``cuvee.server``): a consuming segment's batch (``ingest``, between writing
the rows and publishing them), a committed copy served (``serve``: a commit, a download, a restart's load, a
reload; it replaces the copy of the same name in the same step as the registry swap), and a segment leaving
(``remove``). Queries read through ``views`` and ``valid_rows``.

Each *copy* of a segment gets its own id in the key map (the consuming copy and the committed copy that replaces
it differ); its rank is its LLC sequence number, its place in the stream. A copy is identified to readers by its
*token*: the consuming segment object, or the immutable segment object.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.config import Schema, TableConfig
from cuvee.errors import CuveeError
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.upsert.keymap import Versions
from cuvee.upsert.partition import PartitionUpsert, UpsertView
from cuvee.upsert.rows import comparison_dtype, versions_of


class UpsertStateError(CuveeError):
    """A segment's rows reached the upsert state out of turn (not started, or released)."""


class TableUpsert:
    def __init__(self, config: TableConfig, schema: Schema):
        self.primary_key = schema.primary_key_columns
        self.comparison = config.comparison_columns
        self.delete_column = config.upsert.delete_record_column if config.upsert is not None else None
        types = [schema.column(c).arrow_type() for c in self.comparison]
        self._dtype = comparison_dtype(types)
        self._lock = threading.Lock()
        self._partitions: dict[int, PartitionUpsert] = {}
        self._ids: dict[str, int] = {}  # segment name -> id of the copy now tracked
        self._next = itertools.count()

    @property
    def columns(self) -> list[str]:
        """The columns the key map reads from a segment's rows."""
        return list(dict.fromkeys([*self.primary_key, *self.comparison,
                                   *([self.delete_column] if self.delete_column else [])]))

    def start(self, segment: str, token: Any) -> None:
        """A consuming segment about to be served: in the views from now on, with no valid doc yet (a query
        routed to it before its first row must find it there)."""
        llc = LLCSegmentName.parse(segment)
        state, sid = self._state_and_id(llc.partition, segment, new_copy=True)
        empty = np.zeros(0, np.int32)
        state.add(sid, Versions(np.zeros(0, np.uint64), np.zeros(0, self._dtype), empty), token, rank=llc.sequence)

    def ingest(self, segment: str, token: Any, rows: pa.Table | pa.RecordBatch, first_doc: int,
               publish: Callable[[], None]) -> None:
        """A consuming segment's new rows (docs from ``first_doc``), written but not yet readable. Refused for a
        segment not started or already removed (a batch racing its release must not re-create it)."""
        llc = LLCSegmentName.parse(segment)
        with self._lock:
            sid = self._ids.get(segment)
            state = self._partitions.get(llc.partition)
        if sid is None or state is None:
            raise UpsertStateError(f"segment {segment} is not consuming in the upsert state of this server")
        versions = versions_of(rows, self.primary_key, self.comparison, self.delete_column, first_doc)
        state.add(sid, versions, token, rank=llc.sequence, publish=publish)

    def serve(self, segment: str, token: Any, rows: pa.Table, publish: Callable[[], None]) -> None:
        """A committed copy of ``segment`` (its rows in doc order) replaces whatever copy was tracked, in one step
        with ``publish`` (the registry swap)."""
        llc = LLCSegmentName.parse(segment)
        with self._lock:
            replacing = self._ids.get(segment)
        state, sid = self._state_and_id(llc.partition, segment, new_copy=True)
        versions = versions_of(rows, self.primary_key, self.comparison, self.delete_column, 0)
        state.add(sid, versions, token, rank=llc.sequence, replacing=replacing, publish=publish)

    def remove(self, segment: str) -> None:
        with self._lock:
            sid = self._ids.pop(segment, None)
            state = self._partitions.get(LLCSegmentName.parse(segment).partition)
        if sid is not None and state is not None:
            state.remove(sid)

    def views(self, segments: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """Segment name → (token, valid docs) for the partitions of ``segments``, each partition's from one view."""
        partitions = {LLCSegmentName.parse(s).partition for s in segments}
        with self._lock:
            states = [self._partitions[p] for p in partitions if p in self._partitions]
        out: dict[str, tuple[Any, Any]] = {}
        for state in states:
            view: UpsertView = state.view
            for token, bits in view.segments.values():
                out[_name_of(token)] = (token, bits)
        return out

    def _state_and_id(self, partition: int, segment: str, *, new_copy: bool) -> tuple[PartitionUpsert, int]:
        with self._lock:
            state = self._partitions.get(partition)
            if state is None:
                state = self._partitions[partition] = PartitionUpsert(self._dtype)
            sid = self._ids.get(segment)
            if sid is None or new_copy:
                sid = self._ids[segment] = next(self._next)
            return state, sid


def _name_of(token: Any) -> str:
    return str(token.name)


def valid_rows(table: pa.Table, bits: Any) -> pa.Table:
    """The rows of a segment's query table that its valid-docs bitmap marks (docs past the table are not read)."""
    mask = np.zeros(table.num_rows, bool)
    docs = np.asarray(bits.to_array(), np.int64)
    mask[docs[docs < table.num_rows]] = True
    return table.filter(pa.array(mask))


class UpsertTables:
    """The server's upsert tables, created the first time a segment of one is served or consumed."""

    def __init__(self, context: Callable[[str], tuple[TableConfig, Schema]]):
        self._context = context
        self._lock = threading.Lock()
        self._tables: dict[str, TableUpsert | None] = {}

    def get(self, table: str) -> TableUpsert | None:
        """The table's upsert state, None when the table is not an upsert table."""
        with self._lock:
            if table in self._tables:
                return self._tables[table]
        config, schema = self._context(table)
        made = TableUpsert(config, schema) if config.is_upsert else None
        with self._lock:
            return self._tables.setdefault(table, made)

    def known(self) -> Mapping[str, TableUpsert | None]:
        with self._lock:
            return dict(self._tables)
