"""One partition's upsert state on a server, published to queries one consistent view at a time.

Writers (the partition's consumer; segment loads, commits and drops) change the key map and the segments' valid
docs under one lock and then swap in a new ``UpsertView``: an immutable map from segment to (what the query reads,
its valid docs as a frozen bitmap). Readers take a view and read only through it, so a query sees every segment of
the partition as of one instant: a key's old doc invalid *and* its new doc valid, or neither change; a consuming
segment and its committed copy are never both in a view, and never both absent.

Order inside one change, for a consuming segment's batch: the rows are appended to the segment (not yet
published), the caller's ``publish`` makes them readable (``num_docs``; for a committed copy, the registry swap),
the key map decides, and only then is the new view swapped in. A reader that took the previous view may see the
new rows, but the previous view's bitmap does not mark them valid, so it still reads the previous state exactly;
and if the key map refuses the rows, they stay published but never valid, with map and bitmaps in agreement.

Bitmaps are copied on write (only those a change touches), so a view handed to a query never changes under it.

A key whose version leaves (a consuming copy released, or replaced by a committed copy that ends before the rows
holding the key's newest version: a replica that read past the committed end) is *re-decided* from the partition's
other segments, read again through ``versions`` in stream order: its previous version becomes valid again, so the
key is never absent from a view while a row of it is still on this server (Pinot drops such keys until the stream
brings them back). Committed segments leave without it (a partition moving away or retention would pay a scan of
the partition per segment); their keys leave with them.
"""

from __future__ import annotations

import array
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyroaring import FrozenBitMap

from cuvee.upsert.keymap import Changes, KeyMap, SnapshotConflict, Versions
from cuvee.upsert.keys import Keys

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpsertView:
    """What a query reads of a partition: per segment id, its reader handle and its valid docs."""

    segments: Mapping[int, tuple[Any, FrozenBitMap]] = field(default_factory=dict)
    version: int = 0

    def valid_count(self) -> int:
        return sum(len(bits) for _, bits in self.segments.values())


class PartitionUpsert:
    def __init__(self, comparison_dtype: type = np.float64,
                 versions: Callable[[Any], Versions] | None = None) -> None:
        """``versions(handle)``: a segment's rows (all its readable docs) as key-map input, for re-deciding keys;
        None: keys that leave are not re-decided."""
        self._versions = versions
        self._lock = threading.RLock()  # re-entrant: a publish callback may read the (previous) view
        self._keys = KeyMap(comparison_dtype)
        self._valid: dict[int, FrozenBitMap] = {}
        self._handles: dict[int, Any] = {}
        self._view = UpsertView()
        self._winners_lock = threading.Lock()  # one caller decides the committed winners (``_committed_winners``)
        self._winners: tuple[tuple[tuple[int, int], ...], dict[int, FrozenBitMap]] | None = None

    @property
    def view(self) -> UpsertView:
        """The current view; waits for a change in progress (its publish may already have swapped the registry).
        Preloads not merged yet are merged first: no view is read before their keys were checked together."""
        with self._lock:
            if not self._keys.settled:
                self._settled()
            return self._view

    def snapshot(self, segment: int) -> tuple[np.ndarray, np.ndarray]:
        """(valid docs, tombstone docs) of ``segment``, consistent with each other: what a restart preloads."""
        with self._lock:
            self._settled()
            return self._keys.valid_docs(segment), self._keys.tombstones(segment)

    def capture(self, segments: Mapping[int, str]) -> dict[int, tuple[str, FrozenBitMap, np.ndarray]]:
        """(name, valid docs, tombstone docs) of each of ``segments`` (id → name) still in the partition, from one
        instant: a snapshot round."""
        with self._lock:
            self._settled()
            tombs = self._keys.tombstones_by_segment()
            none = np.zeros(0, np.int32)
            return {s: (name, self._valid.get(s, FrozenBitMap()), tombs.get(s, none))
                    for s, name in segments.items() if s in self._handles}

    def kept_docs(self, segment: int, handle: Any, mine: Versions, consuming: Callable[[Any], bool]
                  ) -> tuple[np.ndarray, dict[str, int]] | None:
        """What an upsert compaction may keep of committed ``segment``, its state taken at one instant: its valid
        docs; its tombstones; for the keys whose newest version is in a consuming copy (``consuming(handle)``), the
        doc that would be their version if that copy went (it may yet be released, or end shorter, and the key fall
        back to its committed version: decided afresh from the committed copies' rows, in stream order); and delete
        rows of keys no longer tracked (a tombstone the TTL forgot still hides older versions when a restart
        decides keys from rows). Sorted docs and their counts by kind; None when ``handle`` (whose rows the caller
        read, outside the lock: ``mine``) is not the segment's copy in the partition any more."""
        assert self._versions is not None
        with self._lock:
            self._settled()
            if self._handles.get(segment) is not handle:
                return None
            valid = self._valid.get(segment, FrozenBitMap())
            tombs = self._keys.tombstones(segment).astype(np.int64)
            live = [s for s, h in self._handles.items() if s != segment and consuming(h)]
            held = Keys.concat([self._keys.keys_of(s) for s in live])
            committed = sorted(((self._keys.rank(s) or 0, s, h) for s, h in self._handles.items()
                                if s not in live), key=lambda x: (x[0], x[1]))
            found = self._keys.lookup(mine.keys)[0] if len(mine.keys) else np.zeros(0, bool)
        valid_docs = np.asarray(valid.to_array(), np.int64) if len(valid) else np.zeros(0, np.int64)
        fallback = self._fallback(segment, mine, held, committed)
        forgotten = np.zeros(0, np.int64)
        if mine.deletes is not None and len(mine.deletes):
            forgotten = np.flatnonzero(np.asarray(mine.deletes, bool) & ~found)
        kept = np.union1d(np.union1d(valid_docs, tombs), np.union1d(fallback, forgotten))
        counts = {"validDocs": len(valid_docs), "tombstones": len(tombs), "fallbackDocs": len(fallback),
                  "forgottenDeletes": len(forgotten)}
        return kept.astype(np.int64), counts

    def _fallback(self, segment: int, mine: Versions, held: Keys,
                  committed: list[tuple[int, int, Any]]) -> np.ndarray:
        """The docs of ``segment`` that are the committed version of a key of ``held`` (keys a consuming copy holds):
        those of its rows whose key is held and that win their key among the committed copies (a delete row that
        would win counts: it hides the key). Nothing else is read unless one of its keys is held."""
        pick = mine.keys.isin(held)
        if not pick.any():
            return np.zeros(0, np.int64)
        winners = self._committed_winners(committed).get(segment)
        if winners is None:  # not among the committed copies the winners were decided over (cannot happen)
            return np.zeros(0, np.int64)
        docs = np.asarray(mine.docs[pick], np.int64)
        return np.sort(docs[np.isin(docs, np.asarray(winners.to_array(), np.int64))])

    def _committed_winners(self, committed: list[tuple[int, int, Any]]) -> dict[int, FrozenBitMap]:
        """Per committed copy, its docs that win their key when only the committed copies (``committed``: rank,
        id, handle) are decided, in stream order. Committed copies never change and each copy has an id of its
        own, so the answer is kept for as long as the partition's committed copies are these (one entry): the
        replicas' answers to a compaction run, one per segment, read the partition's committed rows once, not
        once per segment. Decided outside the partition lock, one caller at a time."""
        key = tuple((rank, seg) for rank, seg, _ in committed)
        with self._winners_lock:
            if self._winners is not None and self._winners[0] == key:
                return self._winners[1]
            assert self._versions is not None
            fresh = KeyMap(self._keys.comparison_dtype)
            for rank, seg, handle in committed:
                fresh.apply(seg, self._versions(handle), rank=rank)
            winners = {seg: FrozenBitMap(_uint32(np.union1d(fresh.valid_docs(seg), fresh.tombstones(seg))))
                       for _, seg, _ in committed}
            self._winners = (key, winners)
            return winners

    def rebuild(self) -> None:
        """Decide every key again from all segments' rows, in stream order (a restart whose snapshots could not
        all be used)."""
        with self._lock:
            self._rebuild()

    def _settled(self) -> None:
        """Merge the snapshots preloaded so far into the key map (``KeyMap.settle``; under the lock). Snapshots
        that disagree (a key valid in two of them) make the partition decided from its rows."""
        try:
            self._keys.settle()
        except SnapshotConflict as exc:
            if self._versions is None:
                raise
            log.warning("upsert partition: %s", exc)
            self._rebuild()

    def _rebuild(self) -> None:
        """Everything decided anew, then swapped in whole. A segment that cannot be read is logged and left with
        no valid doc (its keys untracked) rather than leave map and views disagreeing."""
        assert self._versions is not None
        ranks = {s: self._keys.rank(s) or 0 for s in self._handles}
        fresh = KeyMap(self._keys.comparison_dtype)
        valid: dict[int, FrozenBitMap] = {}
        for seg in sorted(self._handles, key=lambda s: (ranks[s], s)):
            try:
                rows = self._versions(self._handles[seg])
            except Exception:  # noqa: BLE001 - a broken copy must not leave the partition half rebuilt
                log.exception("rebuilding upsert keys: segment %d cannot be read; none of its docs is valid", seg)
                rows = Versions(np.zeros(0, np.uint64), np.zeros(0, fresh.comparison_dtype), np.zeros(0, np.int32))
            _apply(valid, seg, fresh.apply(seg, rows, rank=ranks[seg]))
        self._keys = fresh
        self._install(valid, dict(self._handles))

    def out_of_order(self, rows: Versions, rank: int) -> np.ndarray:
        """Which of ``rows`` the key map would find out of order now (``KeyMap.out_of_order``)."""
        with self._lock:
            self._settled()
            return self._keys.out_of_order(rows, rank)

    def previous_rows(self, rows: Versions, rank: int, read: Callable[[Any, np.ndarray], pa.Table]
                      ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, pa.Table]]]:
        """For partial upsert, from one instant: which of ``rows`` are out of order, which have a live stored
        version (not deleted), and those versions' rows: (row indices, their previous rows read through
        ``read(handle, docs)``) per segment holding some."""
        with self._lock:
            self._settled()
            late = self._keys.out_of_order(rows, rank)
            found, segs, docs, _ = self._keys.lookup(rows.keys)
            live = found & (docs >= 0) & np.isin(segs, np.fromiter(self._handles, np.int64, len(self._handles)))
            parts = []
            for seg in np.unique(segs[live]):
                at = np.flatnonzero(live & (segs == seg))
                parts.append((at, read(self._handles[int(seg)], docs[at].astype(np.int64))))
            return late, live, parts

    def expire(self, metadata_ttl: float, deleted_keys_ttl: float) -> int:
        """Stop tracking keys past their TTLs (``KeyMap.expire``); their docs keep the validity they have."""
        with self._lock:
            self._settled()
            return self._keys.expire(metadata_ttl, deleted_keys_ttl)

    def stats(self) -> tuple[int, float]:
        """(keys tracked, metadata bytes per key)."""
        with self._lock:
            return len(self._keys), self._keys.bytes_per_key

    def add(self, segment: int, rows: Versions, handle: Any, *, rank: int | None = None,
            replacing: int | None = None, publish: Callable[[], None] | None = None,
            shorter: bool = False) -> Changes:
        """Rows of ``segment`` (read through ``handle``) in stream order. ``replacing``: the segment these rows are a
        copy of, dropped from the view in the same step; ``shorter``: the copy lacks rows the replaced one had (a
        replica that read past the committed end), so every key the replaced copy held is decided again from all
        segments (its version may be in an earlier segment, not in this copy's out-of-order rows). ``publish``:
        makes the rows readable, run just before the new view is swapped in."""
        with self._lock:
            self._settled()
            if publish is not None:
                publish()
            held = self._held_by(replacing)
            changes = self._keys.apply(segment, rows, rank=rank, replacing=replacing)
            valid = dict(self._valid)
            handles = dict(self._handles)
            if replacing is not None:
                valid.pop(replacing, None)
                handles.pop(replacing, None)
            _apply(valid, segment, changes)
            handles[segment] = handle
            if held is not None:
                if shorter:
                    self._redecide(held, valid, handles, exclude=set(), reset=True)
                else:
                    self._redecide(held, valid, handles, exclude={segment})
            self._install(valid, handles)
        return changes

    def handle(self, segment: int) -> Any:
        """The reader handle of ``segment`` (None if it is not in the partition)."""
        with self._lock:
            return self._handles.get(segment)

    def preload(self, segment: int, keys: Keys | np.ndarray, comparisons: np.ndarray, docs: np.ndarray, handle: Any, *,
                deleted: np.ndarray | None = None, rank: int | None = None,
                publish: Callable[[], None] | None = None) -> None:
        """A committed segment's snapshot (restart), trusted: the keys, comparison values and docs of its valid
        rows, and ``deleted``, a bool per row of those that are tombstones (delete rows that hide their key: kept in
        the key map, never valid). Trusted only while the key map holds nothing but other preloads: once a
        segment was decided from its rows (a newer segment, committed after the last snapshot round, that loaded
        first), the snapshot's rows are *decided* against it instead (``add``; still only those rows are read), so a
        key the newer segment moved is never valid twice. Keys shared with other preloads not merged yet are found
        when the next view is taken or the map is next used, and the partition is then decided from its rows."""
        docs = np.asarray(docs, np.int32)
        tomb = np.zeros(len(docs), bool) if deleted is None else np.asarray(deleted, bool)
        with self._lock:
            if self._keys.holds_decided_keys:
                rows = Versions(Keys.of(keys), np.asarray(comparisons, self._keys.comparison_dtype),
                                docs, tomb)
                self.add(segment, rows, handle, rank=rank, publish=publish)
                return
            self._keys.preload(segment, keys, comparisons, np.where(tomb, -1 - docs, docs).astype(np.int32),
                               rank=rank)  # checks first: may raise, changing nothing
            if publish is not None:
                try:
                    publish()
                except BaseException:
                    if not self._keys.unpreload(segment):  # merged meanwhile (the publish read the view)
                        self._keys.remove_segment(segment)
                    raise
            valid = {**self._valid, segment: FrozenBitMap(_uint32(docs[~tomb]))}
            self._install(valid, {**self._handles, segment: handle})

    def remove(self, segment: int, *, redecide: bool = False, publish: Callable[[], None] | None = None) -> None:
        """The segment left this server: its docs are no longer read, and its keys are re-decided from the other
        segments (``redecide``) or no longer tracked. ``publish`` (the registry's removal) runs in the same step."""
        with self._lock:
            self._settled()
            if publish is not None:
                publish()
            held = self._held_by(segment) if redecide else None
            self._keys.remove_segment(segment)
            valid, handles = dict(self._valid), dict(self._handles)
            valid.pop(segment, None)
            handles.pop(segment, None)
            if held is not None:
                self._redecide(held, valid, handles, exclude={segment})
            self._install(valid, handles)

    @property
    def empty(self) -> bool:
        """No segment left in this partition."""
        with self._lock:
            return not self._handles

    def _held_by(self, segment: int | None) -> Keys | None:
        """The keys whose version is in ``segment`` (those that may need re-deciding once it leaves)."""
        if segment is None or self._versions is None:
            return None
        return self._keys.keys_of(segment)

    def _redecide(self, held: Keys, valid: dict[int, FrozenBitMap], handles: dict[int, Any], *,
                  exclude: set[int], reset: bool = False) -> None:
        """Keys of ``held`` the map no longer tracks (``reset``: all of them, forgotten first) get their version
        back from the segments of ``handles`` but ``exclude``: each segment's rows of those keys applied again in
        stream order (out-of-order and deleted rows as before). A segment that cannot be read is logged and
        skipped: its keys then stay as they are rather than fail the change."""
        assert self._versions is not None
        if reset:
            segs, docs = self._keys.forget(held)
            live = docs >= 0
            for seg in np.unique(segs[live]):
                if int(seg) in valid:
                    valid[int(seg)] = valid[int(seg)] - FrozenBitMap(_uint32(docs[live & (segs == seg)]))
            lost = held
        else:
            found = self._keys.lookup(held)[0] if len(held) else np.zeros(0, bool)
            lost = held[~found]
        if not len(lost):
            return
        ranked = sorted((self._keys.rank(s) or 0, s) for s in handles if s not in exclude)
        for rank, seg in ranked:
            try:
                rows = self._versions(handles[seg])
            except Exception:  # noqa: BLE001 - a released or broken copy: its keys are not re-decided
                log.exception("re-deciding upsert keys: segment %d cannot be read", seg)
                continue
            mine = rows.keys.isin(lost)
            if not mine.any():
                continue
            subset = Versions(rows.keys[mine], rows.comparisons[mine], rows.docs[mine],
                              None if rows.deletes is None else rows.deletes[mine])
            _apply(valid, seg, self._keys.apply(seg, subset, rank=rank))

    def _install(self, valid: dict[int, FrozenBitMap], handles: dict[int, Any]) -> None:
        self._valid, self._handles = valid, handles
        self._view = UpsertView({s: (handles[s], valid[s]) for s in valid}, self._view.version + 1)


def _apply(valid: dict[int, FrozenBitMap], segment: int, changes: Changes) -> None:
    """``changes`` made by rows of ``segment`` applied to the (copied) bitmaps."""
    for seg, docs in changes.invalid.items():
        if seg in valid:
            valid[seg] = valid[seg] - FrozenBitMap(_uint32(docs))
    valid[segment] = valid.get(segment, FrozenBitMap()) | FrozenBitMap(_uint32(changes.valid))


def _uint32(docs: np.ndarray) -> array.array:  # type: ignore[type-arg]
    """Docs in the form pyroaring takes in bulk (a numpy array is taken element by element)."""
    return array.array("I", np.asarray(docs, np.uint32).tobytes())
