"""One upsert table on one server: a ``PartitionUpsert`` per stream partition, fed by the server's segments.

The server wires three moments in (``cuvee.server``): a consuming segment's batch (``ingest``, between writing
the rows and publishing them), a committed copy served (``serve``: a commit, a download, a restart's load, a
reload; it replaces the copy of the same name in the same step as the registry swap), and a segment leaving
(``remove``). Queries read through ``views`` and ``cuvee.upsert.reads``.

Each *copy* of a segment gets its own id in the key map (the consuming copy and the committed copy that replaces
it differ); its rank is its LLC sequence number, its place in the stream. A copy is identified to readers by its
*token*: the consuming segment object, or the immutable segment object.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import FrozenBitMap

from cuvee.config import Schema, TableConfig
from cuvee.config.sections import PartialUpsertStrategy, UpsertMode
from cuvee.errors import CuveeError
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.upsert.hashing import KeyHasher
from cuvee.upsert.keymap import Versions
from cuvee.upsert.partial import merge_rows, occurrence_rounds
from cuvee.upsert.partition import PartitionUpsert, UpsertView
from cuvee.upsert.reads import DEFAULT_CACHE_BYTES, ValidRowCache
from cuvee.upsert.snapshot import Snapshot, SnapshotStore
from cuvee.upsert.rows import comparison_dtype, versions_of


log = logging.getLogger(__name__)


class UpsertStateError(CuveeError):
    """A segment's rows reached the upsert state out of turn (not started, or released)."""


class TableUpsert:
    """``snapshots``: where the table's valid-docs snapshots live on this server (None: no snapshots, no preload).
    A snapshot round runs, and the TTLs are applied, when a partition's consuming segment starts (Pinot's moment:
    the committed segments' state is then complete until the next commit)."""

    def __init__(self, config: TableConfig, schema: Schema, snapshots: SnapshotStore | None = None,
                 reads: ValidRowCache | None = None):
        """``reads``: the server's cache of committed segments' valid rows (told when a segment leaves)."""
        upsert = config.upsert
        self._reads = reads
        self.primary_key = schema.primary_key_columns
        self._hasher = KeyHasher.of(schema, upsert.hash_function if upsert is not None else "NONE")
        self.comparison = config.comparison_columns
        self.delete_column = upsert.delete_record_column if upsert is not None else None
        types = [schema.column(c).arrow_type() for c in self.comparison]
        self._dtype = comparison_dtype(types)
        self._ttls = (upsert.metadata_ttl, upsert.deleted_keys_ttl) if upsert is not None else (0.0, 0.0)
        self._partial = upsert is not None and upsert.mode is UpsertMode.PARTIAL
        self._strategies = dict(upsert.partial_upsert_strategies) if upsert is not None else {}
        self._default_strategy = (upsert.default_partial_upsert_strategy if upsert is not None
                                  else PartialUpsertStrategy.OVERWRITE)
        self._drop_out_of_order = bool(upsert is not None and upsert.drop_out_of_order_record)
        self._out_of_order_column = upsert.out_of_order_record_column if upsert is not None else None
        self._out_of_order_type = (schema.column(self._out_of_order_column).arrow_type()
                                   if self._out_of_order_column else None)
        self._snapshots = snapshots if upsert is not None and upsert.snapshot_enabled else None
        self._preload_on = self._snapshots is not None and upsert is not None and upsert.preload_enabled
        self._rules = (self._hasher.columns, self._dtype, config.upsert_rules)
        self._lock = threading.Lock()
        self._partitions: dict[int, PartitionUpsert] = {}
        self._ids: dict[str, int] = {}  # segment name -> id of the copy now tracked
        self._crcs: dict[str, int] = {}  # committed segment name -> CRC of the copy tracked
        self._next = itertools.count()
        # snapshots to preload, per partition, until the partition's first consuming segment starts (restart only)
        self._preloads: dict[int, dict[str, Snapshot]] = {}
        self._persisted: dict[str, tuple[FrozenBitMap, np.ndarray]] = {}  # last snapshot written per segment
        # restart bookkeeping per partition, until it is ready: (lowest rank decided from rows, highest preloaded)
        self._restart: dict[int, tuple[int | None, int | None]] = {}
        self._ready: set[int] = set()  # partitions past their restart (a consumer became ready, or rebuilt)
        self._round_lock = threading.Lock()
        self.preloaded = 0  # segments whose keys came from a snapshot (a restart's figure)

    def same_rules(self, other: TableUpsert) -> bool:
        """Whether ``other`` decides keys as this one does."""
        return self._rules == other._rules

    @property
    def columns(self) -> list[str]:
        """The columns the key map reads from a segment's rows."""
        return list(dict.fromkeys([*self.primary_key, *self.comparison,
                                   *([self.delete_column] if self.delete_column else [])]))

    def start(self, segment: str, token: Any, publish: Callable[[], None] | None = None) -> None:
        """A consuming segment about to be served: in the views, with no valid doc yet, in one step with
        ``publish`` (its registry entry), so a query routed to it finds it in both."""
        llc = LLCSegmentName.parse(segment)
        with self._lock:
            earlier = self._ids.get(segment)  # a copy of this name still tracked: replaced, never left orphaned
        state, sid = self._state_and_new_id(llc.partition)
        empty = np.zeros(0, np.int32)
        state.add(sid, Versions(np.zeros(0, np.uint64), np.zeros(0, self._dtype), empty), token, rank=llc.sequence,
                  publish=publish, replacing=earlier)
        with self._lock:
            self._ids[segment] = sid

    def ready(self, segment: str) -> None:
        """A consuming segment is about to read its first row and every earlier committed segment of its partition
        is served here: the clean moment (no consuming rows decided yet, the same versions on every replica) to
        apply the TTLs and write a snapshot round. Skipped while another consuming copy of the partition holds
        rows: its rows have already invalidated committed docs, and a snapshot must not keep that."""
        llc = LLCSegmentName.parse(segment)
        with self._lock:
            self._preloads[llc.partition] = {}  # from now on keys change: a snapshot loaded earlier is stale
            self._ready.add(llc.partition)
            self._restart.pop(llc.partition, None)
            state = self._partitions.get(llc.partition)
            others = [n for n in self._ids if n not in self._crcs and n != segment
                      and LLCSegmentName.parse(n).partition == llc.partition]
        if state is None:
            return
        handles = [state.handle(self._ids.get(n, -1)) for n in others]
        busy = [n for n, handle in zip(others, handles) if handle is not None and _readable_docs(handle) > 0]
        if busy:
            log.info("%s: TTLs and snapshot round skipped: %s still consuming here", segment, ", ".join(busy))
            return
        if any(self._ttls):
            state.expire(*self._ttls)
        try:
            self._snapshot_round(llc.partition, state)
        except Exception:  # noqa: BLE001 - a snapshot is an optimisation: never fail consumption for it
            log.exception("upsert snapshot of %s partition %d failed; a restart decides keys from the rows",
                          segment, llc.partition)

    def _snapshot_round(self, partition: int, state: PartitionUpsert) -> None:
        """Persist the valid docs of the partition's committed segments (``cuvee.upsert.snapshot``): written for
        those whose state changed since the last round, named again for the others."""
        if self._snapshots is None:
            return
        with self._round_lock:
            with self._lock:
                committed = {name: (self._ids[name], crc) for name, crc in self._crcs.items()
                             if name in self._ids and LLCSegmentName.parse(name).partition == partition}
            captured = state.capture({sid: name for name, (sid, _) in committed.items()})
            changed: dict[str, Snapshot] = {}
            kept: dict[str, Snapshot] = {}
            for sid, (name, valid, tombs) in captured.items():
                crc = committed[name][1]
                docs = np.frombuffer(valid.to_array(), np.uint32) if len(valid) else np.zeros(0, np.uint32)
                snap = Snapshot(crc, docs, np.asarray(tombs))
                last = self._persisted.get(name)
                same = last is not None and last[0] is valid and np.array_equal(last[1], tombs)
                (kept if same else changed)[name] = snap
            written = self._snapshots.write_round(partition, time.time_ns(), changed, kept)
            with self._lock:
                for sid, (name, valid, tombs) in captured.items():
                    if name in written and self._ids.get(name) == sid:  # still the copy tracked
                        self._persisted[name] = (valid, tombs)

    @property
    def prepares(self) -> bool:
        """Whether a batch must pass ``prepare`` before it is stored."""
        return self._partial or self._drop_out_of_order or self._out_of_order_column is not None

    def prepare(self, segment: str, rows: pa.RecordBatch, offsets: np.ndarray
                ) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
        """A consuming segment's batch before it is stored: rows older than their key's current version are
        dropped (``dropOutOfOrderRecord``; returned as skipped offsets) or marked in ``outOfOrderRecordColumn``.
        Every replica decides the same from the same stream, so their copies stay identical."""
        offsets = np.asarray(offsets, np.int64)
        llc = LLCSegmentName.parse(segment)
        with self._lock:
            state = self._partitions.get(llc.partition)
            known = segment in self._ids
        if state is None or not known:
            raise UpsertStateError(f"segment {segment} is not consuming in the upsert state of this server")
        versions = versions_of(rows, self._hasher, self.comparison, self.delete_column, 0)
        if self._partial:
            late, rows = self._merged(state, versions, llc.sequence, rows)
        else:
            late = state.out_of_order(versions, llc.sequence)
        if self._drop_out_of_order:
            keep = pa.array(~late)
            return rows.filter(keep), offsets[~late], offsets[late]
        if self._out_of_order_column is None or self._out_of_order_type is None:
            return rows, offsets, offsets[:0]
        at = rows.schema.get_field_index(self._out_of_order_column)
        marks = pa.array(late).cast(self._out_of_order_type)
        field = pa.field(self._out_of_order_column, marks.type)
        rows = rows.set_column(at, field, marks) if at >= 0 else rows.append_column(field, marks)
        return rows, offsets, offsets[:0]

    def _merged(self, state: PartitionUpsert, versions: Versions, rank: int, batch: pa.RecordBatch
                ) -> tuple[np.ndarray, pa.RecordBatch]:
        """Partial upsert: each row merged with its key's previous version (``cuvee.upsert.partial``), so the
        stored row is complete. The previous version of a key's first row in the batch is its stored live version;
        of a later row, the batch's last row of the key that was not out of order. Out-of-order rows are stored
        as they came (never valid); a delete row is stored as it came and leaves no previous version."""
        rows = pa.Table.from_batches([batch])
        late, live, parts = state.previous_rows(versions, rank, lambda handle, docs: _rows_at(handle, docs,
                                                                                              rows.schema))
        deletes = np.zeros(len(late), bool) if versions.deletes is None else np.asarray(versions.deletes, bool)
        previous = rows  # any rows of the right schema: only those marked live are read
        if parts:
            at = np.concatenate([a for a, _ in parts])
            got = pa.concat_tables([t for _, t in parts])
            index = np.arange(len(late))
            index[at] = len(late) + np.arange(len(at))
            previous = pa.concat_tables([rows, got]).take(pa.array(index))
        key_ids = versions.keys.group_ids()  # equal ids for equal keys
        keys, first, group_of = np.unique(key_ids, return_index=True, return_inverse=True)  # first row of each
        current, has = previous.take(pa.array(first)), live[first].copy()
        always_new = [*self.primary_key, *self.comparison]
        pieces, order = [], []
        for picked in occurrence_rounds(key_ids):
            groups = group_of[picked]
            wins = ~late[picked]
            merged = merge_rows(current.take(pa.array(groups)), has[groups] & wins & ~deletes[picked],
                                rows.take(pa.array(picked)), self._strategies, self._default_strategy, always_new)
            pieces.append(merged)
            order.append(picked)
            moved = np.arange(len(keys))
            moved[groups[wins]] = len(keys) + np.flatnonzero(wins)
            current = pa.concat_tables([current, merged]).take(pa.array(moved))
            has[groups[wins]] = ~deletes[picked][wins]
        merged_all = pa.concat_tables(pieces).take(pa.array(np.argsort(np.concatenate(order), kind="stable")))
        return late, merged_all.combine_chunks().to_batches()[0] if merged_all.num_rows else batch

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
        versions = versions_of(rows, self._hasher, self.comparison, self.delete_column, first_doc)
        state.add(sid, versions, token, rank=llc.sequence, publish=publish)

    def serve(self, segment: str, token: Any, rows: pa.Table, publish: Callable[[], None]) -> None:
        """A committed copy of ``segment`` (its rows in doc order) replaces whatever copy was tracked, in one step
        with ``publish`` (the registry swap)."""
        llc = LLCSegmentName.parse(segment)
        crc = int(getattr(token, "crc", 0) or 0)
        with self._lock:
            replacing = self._ids.get(segment)
        snapshot = self._preload_snapshot(llc.partition, segment) if replacing is None else None
        if snapshot is not None and self._rows_decided_by(llc.partition, llc.sequence):
            snapshot = None  # its keys may be valid already in an earlier segment decided from its rows
        state, sid = self._state_and_new_id(llc.partition)
        preloaded = snapshot is not None and snapshot.crc == crc and self._preload(
            state, sid, llc.sequence, token, rows, snapshot, publish)
        if not preloaded:
            versions = versions_of(rows, self._hasher, self.comparison, self.delete_column, 0)  # may raise
            replaced = state.handle(replacing) if replacing is not None else None
            shorter = replaced is not None and rows.num_rows < _readable_docs(replaced)
            state.add(sid, versions, token, rank=llc.sequence, replacing=replacing, publish=publish,
                      shorter=shorter)
        if self._mixed_after(llc.partition, llc.sequence, preloaded):
            # a segment decided from its rows no later than one preloaded: a snapshot may lack what those rows
            # need (a tombstone the TTL expired), so the whole partition is decided from its rows, and no more
            # snapshots are used for it until it is ready
            log.info("%s: snapshots and rows mixed in partition %d at restart; deciding it from its rows", segment,
                     llc.partition)
            state.rebuild()
        with self._lock:  # only now: a failure above leaves the tracked copy as it was
            self._ids[segment] = sid
            self._crcs[segment] = crc
        if self._reads is not None and replacing is not None:
            self._reads.forget(segment)  # the rows kept were the replaced copy's

    def _rows_decided_by(self, partition: int, rank: int) -> bool:
        """Whether a segment of ``partition`` no later than ``rank`` was decided from its rows in this restart."""
        with self._lock:
            low = self._restart.get(partition, (None, None))[0]
            return low is not None and low <= rank

    def _mixed_after(self, partition: int, rank: int, preloaded: bool) -> bool:
        """Restart bookkeeping (until the partition is ready): True, once, when a segment decided from its rows has
        a rank no later than a preloaded one's, in whichever order they came."""
        with self._lock:
            if partition in self._ready:
                return False
            low, high = self._restart.get(partition, (None, None))
            if preloaded:
                high = rank if high is None else max(high, rank)
            else:
                low = rank if low is None else min(low, rank)
            self._restart[partition] = (low, high)
            if low is None or high is None or low > high:
                return False
            self._ready.add(partition)  # no more preloads, no second rebuild: rows decide from now on
            self._preloads[partition] = {}
            return True

    def _preload_snapshot(self, partition: int, segment: str) -> Snapshot | None:
        """The snapshot to preload ``segment`` from (once), while the partition has not started consuming."""
        if not self._preload_on or self._snapshots is None:
            return None
        with self._lock:
            loaded = partition in self._preloads
        if not loaded:
            found = self._snapshots.load(partition)  # file reads outside the lock
            with self._lock:
                self._preloads.setdefault(partition, found)
        with self._lock:
            return self._preloads[partition].pop(segment, None)

    def _preload(self, state: PartitionUpsert, sid: int, rank: int, token: Any, rows: pa.Table, snapshot: Snapshot,
                 publish: Callable[[], None]) -> bool:
        """Add a committed copy from its snapshot: only its valid and tombstone rows are read, nothing compared.
        False (nothing changed) when the snapshot does not fit the rows or holds a key tracked already."""
        docs = (np.union1d(snapshot.valid, snapshot.tombstones) if len(snapshot.tombstones)
                else np.asarray(snapshot.valid)).astype(np.int64)  # both sorted, unique
        if len(docs) and docs[-1] >= rows.num_rows:
            log.warning("snapshot of %s names doc %d of %d: decided from its rows", _name_of(token), docs[-1],
                        rows.num_rows)
            return False
        picked = versions_of(rows.take(pa.array(docs)), self._hasher, self.comparison, None, 0)
        try:
            state.preload(sid, picked.keys, picked.comparisons, docs, token,
                          deleted=np.isin(docs, snapshot.tombstones) if len(snapshot.tombstones) else None,
                          rank=rank, publish=publish)
        except ValueError as exc:
            log.warning("snapshot of %s not preloaded (%s): decided from its rows", _name_of(token), exc)
            return False
        with self._lock:
            self.preloaded += 1
        return True

    def remove(self, segment: str, *, redecide: bool = False, publish: Callable[[], None] | None = None) -> None:
        """``segment`` leaves (``publish``: its removal from the registry, in the same step for readers). With
        ``redecide`` (a consuming copy) its keys fall back to their versions in the partition's other segments."""
        with self._lock:
            sid = self._ids.pop(segment, None)
            self._crcs.pop(segment, None)
            self._persisted.pop(segment, None)
            state = self._partitions.get(LLCSegmentName.parse(segment).partition)
        if self._reads is not None:
            self._reads.forget(segment)
        if sid is None or state is None:
            if publish is not None:
                publish()
            return
        state.remove(sid, redecide=redecide, publish=publish)

    def kept_docs(self, segment: str) -> tuple[int, int, np.ndarray, dict[str, int]] | None:
        """(CRC, total docs, docs kept, counts) of the committed copy of ``segment`` tracked here, for an upsert
        compaction (``PartitionUpsert.kept_docs``); None when no committed copy of it is tracked."""
        llc = _llc_or_none(segment)
        with self._lock:
            sid, crc = self._ids.get(segment), self._crcs.get(segment)
            state = self._partitions.get(llc.partition) if llc is not None else None
        if sid is None or crc is None or state is None:
            return None
        token = state.handle(sid)
        if token is None:
            return None
        rows = token.to_arrow(self.columns)
        versions = versions_of(rows, self._hasher, self.comparison, self.delete_column, 0)
        found = state.kept_docs(sid, token, versions,  # read here, outside the partition's lock
                                lambda handle: hasattr(handle, "snapshot"))  # as _versions_of_copy tells them
        if found is None:
            return None
        with self._lock:
            if self._ids.get(segment) != sid:  # replaced meanwhile: the answer would be the old copy's
                return None
        return crc, rows.num_rows, found[0], found[1]

    def stats(self) -> dict[str, Any]:
        """Per partition: keys tracked, metadata bytes per key, valid docs, segments; and segments preloaded."""
        with self._lock:
            partitions = dict(self._partitions)
            preloaded = self.preloaded
        out: dict[str, Any] = {}
        for partition, state in sorted(partitions.items()):
            keys, per_key = state.stats()
            view = state.view
            out[str(partition)] = {"keys": keys, "bytesPerKey": round(per_key, 2), "validDocs": view.valid_count(),
                                   "segments": len(view.segments)}
        return {"partitions": out, "preloadedSegments": preloaded}

    @property
    def empty(self) -> bool:
        """No segment of the table is tracked (its state can be forgotten: a re-created table starts afresh)."""
        with self._lock:
            return not self._ids

    def _versions_of_copy(self, token: Any) -> Versions:
        """A copy's rows as key-map input (re-deciding keys): a committed segment's columns, or the readable rows
        of a consuming one."""
        if hasattr(token, "snapshot"):
            rows = token.snapshot(past_cap=True).select(self.columns)
        else:
            rows = token.to_arrow(self.columns)
        return versions_of(rows, self._hasher, self.comparison, self.delete_column, 0)

    def views(self, segments: Sequence[str]) -> dict[str, tuple[Any, Any]]:
        """Segment name → (token, valid docs) for the partitions of ``segments``, each partition's from one view."""
        partitions = {llc.partition for llc in map(_llc_or_none, segments) if llc is not None}
        with self._lock:
            states = [self._partitions[p] for p in partitions if p in self._partitions]
        out: dict[str, tuple[Any, Any]] = {}
        for state in states:
            view: UpsertView = state.view
            for token, bits in view.segments.values():
                out[_name_of(token)] = (token, bits)
        return out

    def _state_and_new_id(self, partition: int) -> tuple[PartitionUpsert, int]:
        """The partition's state and an id for a new copy (the caller records it once the copy is in)."""
        with self._lock:
            state = self._partitions.get(partition)
            if state is None:
                state = self._partitions[partition] = PartitionUpsert(self._dtype, self._versions_of_copy)
            return state, next(self._next)


def _rows_at(token: Any, docs: np.ndarray, schema: pa.Schema) -> pa.Table:
    """Rows ``docs`` of a copy in ``schema`` (a consuming segment's published rows, past any cap; a committed
    segment's columns): the previous versions partial upsert merges with."""
    names = list(schema.names)
    if hasattr(token, "encoded_snapshot"):
        table = token.encoded_snapshot(past_cap=True).select(names)
    else:  # a column added to the schema after the segment was built reads as nulls
        held = set(token.column_names)
        table = token.to_arrow([n for n in names if n in held], decode=False)
    taken = table.take(pa.array(docs))  # dictionary columns still encoded: only the picked rows are decoded
    arrays = []
    for field in schema:
        if field.name not in taken.column_names:
            arrays.append(pa.nulls(len(docs), field.type))
            continue
        column = taken.column(field.name).combine_chunks()
        arrays.append(column.dictionary_decode() if pa.types.is_dictionary(column.type) else column)
    return pa.Table.from_arrays(arrays, names=names).cast(schema)


def _llc_or_none(segment: str) -> LLCSegmentName | None:
    """A realtime segment's parsed name; None for another name (it belongs to no stream partition)."""
    try:
        return LLCSegmentName.parse(segment)
    except InvalidSegmentNameError:
        return None


def _name_of(token: Any) -> str:
    return str(token.name)


def _readable_docs(token: Any) -> int:
    """A copy's docs as the key map saw them: a consuming segment's published rows (past any cap), a committed
    segment's total."""
    published = getattr(token, "published_docs", None)
    if published is not None:
        return int(published)
    held = getattr(token, "num_docs", None)  # a served ImmutableSegment counts total_docs (a reload replaces one)
    return int(held if held is not None else token.total_docs)


class UpsertTables:
    """The server's upsert tables, created the first time a segment of one is served or consumed.

    Queries read the cached answer (``get``); segment transitions ask for a ``refresh``: a table deleted and created
    again (with another upsert config, or none) is then seen afresh, while a table whose state holds segments keeps
    it (an upsert config changed under live segments applies after they leave)."""

    def __init__(self, context: Callable[[str], tuple[TableConfig, Schema]],
                 snapshot_dir: Callable[[str], Path] | None = None, *,
                 read_cache_bytes: int = DEFAULT_CACHE_BYTES):
        """``snapshot_dir(table)``: where a table's valid-docs snapshots live (None: none are kept).
        ``read_cache_bytes``: the budget of the committed segments' valid rows kept for queries (``reads``)."""
        self.reads = ValidRowCache(read_cache_bytes)
        self._context = context
        self._snapshot_dir = snapshot_dir
        self._lock = threading.Lock()
        self._tables: dict[str, TableUpsert | None] = {}

    def get(self, table: str, *, refresh: bool = False) -> TableUpsert | None:
        """The table's upsert state, None when the table is not an upsert table."""
        with self._lock:
            if table in self._tables and not refresh:
                return self._tables[table]
        config, schema = self._context(table)
        snapshots = SnapshotStore(self._snapshot_dir(table)) if self._snapshot_dir is not None else None
        made = TableUpsert(config, schema, snapshots, self.reads) if config.is_upsert else None
        with self._lock:
            current = self._tables.get(table)
            if current is not None and (not current.empty or (made is not None and current.same_rules(made))):
                return current
            self._tables[table] = made
            return made

    def retire(self, table: str) -> None:
        """Forget the table's state (it was deleted); segments of it still held leave without it."""
        with self._lock:
            self._tables.pop(table, None)

    def known(self) -> Mapping[str, TableUpsert | None]:
        with self._lock:
            return dict(self._tables)
