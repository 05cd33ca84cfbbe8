"""One upsert table on one server: a ``PartitionUpsert`` per stream partition, fed by the server's segments.

The server wires three moments in (``cuvee.server``): a consuming segment's batch (``ingest``, between writing
the rows and publishing them), a committed copy served (``serve``: a commit, a download, a restart's load, a
reload; it replaces the copy of the same name in the same step as the registry swap), and a segment leaving
(``remove``). Queries read through ``views`` and ``valid_mask``.

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

    def same_rules(self, other: TableUpsert) -> bool:
        """Whether ``other`` decides keys as this one does."""
        return ((self.primary_key, self.comparison, self.delete_column, self._dtype)
                == (other.primary_key, other.comparison, other.delete_column, other._dtype))

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

    def remove(self, segment: str, *, redecide: bool = False, publish: Callable[[], None] | None = None) -> None:
        """``segment`` leaves (``publish``: its removal from the registry, in the same step for readers). With
        ``redecide`` (a consuming copy) its keys fall back to their versions in the partition's other segments."""
        with self._lock:
            sid = self._ids.pop(segment, None)
            state = self._partitions.get(LLCSegmentName.parse(segment).partition)
        if sid is None or state is None:
            if publish is not None:
                publish()
            return
        state.remove(sid, redecide=redecide, publish=publish)

    @property
    def empty(self) -> bool:
        """No segment of the table is tracked (its state can be forgotten: a re-created table starts afresh)."""
        with self._lock:
            return not self._ids

    def _versions_of_copy(self, token: Any) -> Versions:
        """A copy's rows as key-map input (re-deciding keys): a committed segment's columns, or the readable rows
        of a consuming one."""
        if hasattr(token, "snapshot"):
            rows = token.snapshot().select(self.columns)
        else:
            rows = token.to_arrow(self.columns)
        return versions_of(rows, self.primary_key, self.comparison, self.delete_column, 0)

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
                state = self._partitions[partition] = PartitionUpsert(self._dtype, self._versions_of_copy)
            sid = self._ids.get(segment)
            if sid is None or new_copy:
                sid = self._ids[segment] = next(self._next)
            return state, sid


def _name_of(token: Any) -> str:
    return str(token.name)


VALID_COLUMN = "__cuvee_valid"  # the column a query's scan filters on (never shown: the server's view drops it)


def valid_mask(num_rows: int, bits: Any) -> pa.Array:
    """A boolean per row of a segment's query table: whether its valid-docs bitmap marks the doc. Appended to the
    segment's rows (no row is copied) for the scan to filter on; docs past the table are not read."""
    mask = np.zeros(num_rows, bool)
    docs = np.frombuffer(bits.to_array(), np.uint32) if len(bits) else np.zeros(0, np.uint32)
    mask[docs[docs < num_rows]] = True
    return pa.array(mask)


class UpsertTables:
    """The server's upsert tables, created the first time a segment of one is served or consumed.

    Queries read the cached answer (``get``); segment transitions ask for a ``refresh``: a table deleted and created
    again (with another upsert config, or none) is then seen afresh, while a table whose state holds segments keeps
    it (an upsert config changed under live segments applies after they leave)."""

    def __init__(self, context: Callable[[str], tuple[TableConfig, Schema]]):
        self._context = context
        self._lock = threading.Lock()
        self._tables: dict[str, TableUpsert | None] = {}

    def get(self, table: str, *, refresh: bool = False) -> TableUpsert | None:
        """The table's upsert state, None when the table is not an upsert table."""
        with self._lock:
            if table in self._tables and not refresh:
                return self._tables[table]
        config, schema = self._context(table)
        made = TableUpsert(config, schema) if config.is_upsert else None
        with self._lock:
            current = self._tables.get(table)
            if current is not None and (not current.empty or (made is not None and current.same_rules(made))):
                return current
            self._tables[table] = made
            return made

    def known(self) -> Mapping[str, TableUpsert | None]:
        with self._lock:
            return dict(self._tables)
