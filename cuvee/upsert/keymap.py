"""One stream partition's upsert key map on one replica: primary key → (segment, doc, comparison value). Pure.

The stream is partitioned by primary key, so a replica of a partition sees every version of its keys in offset
order and can decide alone which doc of each key is the valid one (Pinot's partition-local upsert; DESIGN.md §10).
Rows arrive a batch at a time (``apply``); the map answers with the docs that become valid and those that stop
being valid, which the server applies to its valid-docs bitmaps in one step for readers.

Rules (Pinot's upsertConfig):
- a row whose comparison value is ≥ the key's current one wins (a tie goes to the later offset: the later row of a
  segment, or the row of the later segment, by the segments' *rank*, their order in the stream, so a segment
  loaded late, such as an old segment downloaded after a restart, does not win ties it lost in the stream);
  the key's previous doc becomes invalid; a smaller comparison value is *out of order*: stored, never valid;
- a delete row that wins leaves a *tombstone*: the key has no valid doc, and older versions arriving later stay
  invalid; a newer row brings the key back;
- ``expire(metadata_ttl, deleted_keys_ttl)`` stops tracking keys whose comparison value is older than the largest
  one seen minus the TTL (tombstones by their own TTL); their docs keep the validity they have.

Keys (``cuvee.upsert.keys``) live in flat numpy arrays, not Python objects: 8 bytes of 64-bit index, 4 of segment,
4 of doc, 8 of comparison value, 24 bytes per key and no lookup structure beside them. Where the index is not the
key itself but a hash, each entry also keeps what tells keys of one index apart (the key's bytes, or the second
word of a 128-bit hash), and a key is found only where that agrees too: two keys sharing an index are two
entries, side by side. The arrays are two runs sorted by index, like a small LSM tree: a large main run, and a
delta run that takes each batch's new keys (a copy of the delta only); when the delta outgrows an eighth of the
main run it is merged into it. A batch finds its keys by binary search in both runs (``searchsorted``,
vectorised). A restart's preloaded segments are set aside sorted and merged by one sort when the map is next
used. A tombstone is stored as a negative doc (``-1 - doc``), so it costs nothing extra. Nothing loops per row
in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cuvee.upsert.keys import Keys

_FIELDS = ("segs", "docs", "cmps")  # beside the keys
_DTYPES = {"segs": np.int32, "docs": np.int32}
INT_SMALLEST = np.iinfo(np.int64).min  # an integer comparison value that loses to every other
_MIN_MERGE = 65_536  # the delta run is merged into the main run past this many keys, or an eighth of the main run


@dataclass(frozen=True)
class Versions:
    """Rows of one segment in stream order: each row's key, comparison value, doc id, and delete flag. ``keys`` may
    be given as plain uint64 indexes (keys that are their own index)."""

    keys: Keys
    comparisons: np.ndarray  # the key map's comparison dtype: int64 (exact) or float64
    docs: np.ndarray  # int32
    deletes: np.ndarray | None = None  # bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", Keys.of(self.keys))
        n = len(self.keys)
        if len(self.comparisons) != n or len(self.docs) != n or (self.deletes is not None and len(self.deletes) != n):
            raise ValueError("keys, comparisons, docs and deletes must have one entry per row")


@dataclass
class Changes:
    """What a batch did: docs of the batch's segment that become valid, and per segment the docs that stop being
    valid; ``out_of_order`` marks each input row older than its key's current version."""

    valid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    invalid: dict[int, np.ndarray] = field(default_factory=dict)
    out_of_order: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


@dataclass
class _Decision:
    """``KeyMap._decide``'s working: the rows grouped by key (``order``, ``starts``), where each key is stored, and
    which rows win."""

    keys: Keys
    cmps: np.ndarray
    docs: np.ndarray
    deletes: np.ndarray
    order: np.ndarray
    starts: np.ndarray
    group_keys: Keys
    group_of: np.ndarray
    existing: np.ndarray
    present: np.ndarray
    owned: np.ndarray
    wins: np.ndarray
    out_of_order: np.ndarray


class SnapshotConflict(ValueError):
    """Preloaded snapshots that hold a key valid twice: the partition must be decided from its rows."""


class _Run:
    """Entries sorted by key index (the entries of one index side by side), their keys and one array per field."""

    def __init__(self, cmp_dtype: type, keys: Keys | None = None, **arrays: np.ndarray):
        self.cmp_dtype = cmp_dtype
        self.keys = keys if keys is not None else Keys(np.zeros(0, np.uint64))
        for name in _FIELDS:
            setattr(self, name, arrays.get(name, np.zeros(0, _DTYPES.get(name, cmp_dtype))))

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + sum(getattr(self, name).nbytes for name in _FIELDS)

    def find(self, keys: Keys) -> np.ndarray:
        """Index of each key, -1 if absent."""
        return keys.find_in(self.keys)

    def merged(self, other: _Run) -> _Run:
        """Both runs as one (``other``'s keys are not in this one): each of ``other``'s entries goes where binary
        search puts it, shifted by the entries of ``other`` before it; one pass per field, no sort."""
        if not len(other):
            return self
        at = np.searchsorted(self.keys.index, other.keys.index) + np.arange(len(other))
        mine = np.ones(len(self) + len(other), bool)
        mine[at] = False

        def interleaved(theirs: np.ndarray, ours: np.ndarray) -> np.ndarray:
            out = np.empty(len(mine), ours.dtype)
            out[at] = theirs
            out[mine] = ours
            return out

        arrays = {name: interleaved(getattr(other, name), getattr(self, name)) for name in _FIELDS}
        index = interleaved(other.keys.index, self.keys.index)
        exact = Keys.exact_of([self.keys, other.keys])  # refuses keys of two kinds
        if exact is None:
            return _Run(self.cmp_dtype, Keys(index), **arrays)
        source = interleaved(len(self) + np.arange(len(other)), np.arange(len(self)))  # where each exact value is
        return _Run(self.cmp_dtype, Keys(index, exact.take(pa.array(source))), **arrays)

    def without(self, drop: np.ndarray) -> _Run:
        keep = ~drop
        return _Run(self.cmp_dtype, self.keys[keep], **{name: getattr(self, name)[keep] for name in _FIELDS})


class KeyMap:
    """``comparison_dtype``: int64 for integer and time comparison columns (exact over the whole range), float64
    for floating-point ones."""

    def __init__(self, comparison_dtype: type = np.float64) -> None:
        if comparison_dtype not in (np.int64, np.float64):
            raise ValueError("comparison values are int64 or float64")
        self._cmp_dtype = comparison_dtype
        self._smallest = INT_SMALLEST if comparison_dtype is np.int64 else -np.inf
        self._main, self._delta = _Run(comparison_dtype), _Run(comparison_dtype)
        self._pending: list[_Run] = []  # preloaded segments not merged yet (``settle``)
        self.largest_comparison: int | float | None = None  # the largest finite one seen (TTLs count back from it)
        self._ranks: dict[int, int] = {}  # segment id -> its order in the stream (ties go to the later)

    # ---- reading ----------------------------------------------------------------------------------------------

    @property
    def comparison_dtype(self) -> type:
        return self._cmp_dtype

    def __len__(self) -> int:
        """Keys tracked, tombstones included."""
        return len(self._main) + len(self._delta) + sum(len(r) for r in self._pending)

    @property
    def bytes_per_key(self) -> float:
        held = self._main.nbytes + self._delta.nbytes + sum(r.nbytes for r in self._pending)
        return held / max(len(self), 1)

    def lookup(self, keys: Keys | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(found, segment, doc, comparison) per key; doc < 0 is a tombstone (no valid doc)."""
        rows = self._find(Keys.of(keys))
        found = rows >= 0
        if not len(self):
            zeros = np.zeros(len(rows), np.int32)
            return found, zeros, zeros, np.zeros(len(rows))
        at = np.where(found, rows, 0)
        return found, self._read("segs", at), self._read("docs", at), self._read("cmps", at)

    def keys_of(self, segment: int) -> Keys:
        """The keys whose version (a valid doc or a tombstone) is in ``segment``."""
        return self._all_keys()[self._all("segs") == segment]

    def rank(self, segment: int) -> int | None:
        """``segment``'s order in the stream, None once it is not tracked."""
        return self._ranks.get(segment)

    def valid_docs(self, segment: int) -> np.ndarray:
        """The docs of ``segment`` the map holds valid, sorted (what its valid-docs bitmap must equal)."""
        docs = self._docs_of(segment)
        return np.sort(docs[docs >= 0])

    # ---- writing ----------------------------------------------------------------------------------------------

    def apply(self, segment: int, rows: Versions, *, rank: int | None = None, replacing: int | None = None) -> Changes:
        """Add ``rows`` of ``segment`` (in stream order). ``rank``: the segment's order in the stream (its sequence
        number; default the segment id). ``replacing``: a segment these rows are a copy of (the committed form of
        a consuming segment, a downloaded copy; give it the same rank): keys it held are re-decided by these rows
        alone, and its docs are not reported invalid (the caller drops that segment whole)."""
        if replacing is not None and replacing == segment:
            raise ValueError("a copy replacing a segment needs an id of its own")
        self._ranks[segment] = segment if rank is None else rank
        n = len(rows.keys)
        if n == 0:
            if replacing is not None:
                self.remove_segment(replacing)  # an empty copy: the replaced segment's keys go with it
            return Changes()
        d = self._decide(rows, self._ranks[segment], replacing)
        keys, cmps, docs, deletes, order = d.keys, d.cmps, d.docs, d.deletes, d.order
        starts, group_keys, group_of, existing, present = d.starts, d.group_keys, d.group_of, d.existing, d.present
        owned, wins, out_of_order = d.owned, d.wins, d.out_of_order

        # each key's last winning row is its new version
        win_pos = np.flatnonzero(wins)
        last = np.full(len(starts), -1, np.int64)
        np.maximum.at(last, group_of[win_pos], win_pos)
        changed = last >= 0
        new_rows = order[last[changed]]
        new_docs = np.where(deletes[new_rows], -1 - docs[new_rows], docs[new_rows]).astype(np.int32)

        invalid: dict[int, np.ndarray] = {}
        replaced = changed & present
        if replaced.any():
            old_rows = existing[replaced]
            old_segs, old_docs = self._read("segs", old_rows), self._read("docs", old_rows)
            live = (old_docs >= 0) & ~owned[replaced]
            for seg in np.unique(old_segs[live]):
                invalid[int(seg)] = np.sort(old_docs[live & (old_segs == seg)])
            picked = replaced[changed]
            self._write("segs", old_rows, np.full(len(old_rows), segment, np.int32))
            self._write("docs", old_rows, new_docs[picked])
            self._write("cmps", old_rows, cmps[new_rows[picked]])
        fresh = changed & ~present
        if fresh.any():
            picked = fresh[changed]
            self._append(group_keys[fresh], segment, new_docs[picked], cmps[new_rows[picked]])
        if replacing is not None:
            self.remove_segment(replacing)  # keys only the replaced copy had (none, for a true copy)
        self._saw(cmps)
        return Changes(valid=np.sort(new_docs[new_docs >= 0]), invalid=invalid, out_of_order=out_of_order)

    def out_of_order(self, rows: Versions, rank: int) -> np.ndarray:
        """Which of ``rows`` (of a segment of ``rank``, in stream order) ``apply`` would find out of order, without
        changing anything: what ``dropOutOfOrderRecord`` drops and ``outOfOrderRecordColumn`` marks before the
        rows are stored."""
        if not len(rows.keys):
            return np.zeros(0, bool)
        return self._decide(rows, rank, None).out_of_order

    def _decide(self, rows: Versions, rank: int, replacing: int | None) -> _Decision:
        """Which rows win against the stored versions and the earlier rows of their key (no change made)."""
        n = len(rows.keys)
        keys = rows.keys
        cmps = np.asarray(rows.comparisons)
        if cmps.dtype != self._cmp_dtype:
            raise ValueError(f"comparison values are {cmps.dtype}, this key map holds {np.dtype(self._cmp_dtype)}")
        docs = np.asarray(rows.docs, np.int32)
        deletes = np.zeros(n, bool) if rows.deletes is None else np.asarray(rows.deletes, bool)
        if cmps.dtype == np.float64 and np.isnan(cmps).any():
            raise ValueError("comparison values must not be NaN (null comparison values are the caller's to fill)")

        order, starts = keys.grouped()  # groups of one key, stream order kept inside each
        group_keys = keys[order[starts]]
        group_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))

        existing = self._find(group_keys)
        present = existing >= 0
        at = np.maximum(existing, 0)
        stored = self._read("cmps", at) if len(self) else np.zeros(len(at), self._cmp_dtype)
        owned = np.zeros(len(starts), bool)  # held by the segment these rows replace: decided anew by these rows
        if replacing is not None and len(self):
            owned = present & (self._read("segs", at) == replacing)
        against = present & ~owned
        # a stored version from a later segment keeps ties: against it a row must be strictly greater
        later = np.zeros(len(starts), bool)
        if against.any():
            later[against] = self._rank_of(self._read("segs", at[against])) > rank
        stored = np.where(against, stored, self._smallest).astype(self._cmp_dtype, copy=False)

        # a row wins if its value is >= every earlier row's of its key in this batch and beats the stored version
        sorted_cmps = cmps[order]
        before = _exclusive_group_max(sorted_cmps, group_of, np.full(len(starts), self._smallest, self._cmp_dtype))
        base, keeps_ties = stored[group_of], later[group_of]
        wins = (sorted_cmps >= before) & ((sorted_cmps > base) | ((sorted_cmps == base) & ~keeps_ties))
        out_of_order = np.zeros(n, bool)
        out_of_order[order] = ~wins
        return _Decision(keys, cmps, docs, deletes, order, starts, group_keys, group_of, existing, present, owned,
                         wins, out_of_order)

    def preload(self, segment: int, keys: Keys | np.ndarray, comparisons: np.ndarray, docs: np.ndarray, *,
                rank: int | None = None) -> None:
        """Restart: add a committed segment's valid docs from its snapshot, trusted (no comparisons: the snapshots
        of a partition's segments hold each key valid exactly once). Raises ValueError, changing nothing, when a
        key is tracked already (decided from rows, or preloaded and merged). The segment's keys are set aside as
        they come; the first use of the map after a run of preloads merges them all with one sort (``settle``),
        which refuses a key held twice among the preloads set aside (twice in one snapshot too)."""
        keys = Keys.of(keys)
        if (len(self._main) and (self._main.find(keys) >= 0).any()) \
                or (len(self._delta) and (self._delta.find(keys) >= 0).any()):
            raise ValueError(f"preload of segment {segment}: a key is valid twice; snapshots disagree")
        self._ranks[segment] = segment if rank is None else rank
        cmps = np.asarray(comparisons, self._cmp_dtype)
        self._pending.append(_Run(self._cmp_dtype, keys=keys, segs=np.full(len(keys), segment, np.int32),
                                  docs=np.asarray(docs, np.int32), cmps=cmps))
        self._saw(cmps)

    @property
    def holds_decided_keys(self) -> bool:
        """Keys merged into the runs (decided from rows, or preloads merged already)."""
        return bool(len(self._main) or len(self._delta))

    @property
    def settled(self) -> bool:
        """No preload waits to be merged."""
        return not self._pending

    def unpreload(self, segment: int) -> bool:
        """Take back a preload of ``segment`` not merged yet; False if there is none (it was merged)."""
        kept = [r for r in self._pending if not (len(r) and r.segs[0] == segment)]
        if len(kept) == len(self._pending):
            return False
        self._pending = kept
        self._ranks.pop(segment, None)
        return True

    def settle(self) -> None:
        """Merge the preloaded segments set aside into the map: one sort of all keys. Raises ``SnapshotConflict``
        when a key is then held twice (snapshots that disagree); the preloads are dropped and the caller decides
        the partition from its rows. Every other method settles first."""
        if not self._pending:
            return
        runs, self._pending = [self._main, self._delta, *self._pending], []
        keys = Keys.concat([r.keys for r in runs])
        order, starts = keys.grouped(stable=False)  # equal keys are refused just below: their order does not matter
        if len(starts) < len(keys):
            raise SnapshotConflict("preloaded snapshots hold a key valid twice; decide the partition from its rows")
        self._main = _Run(self._cmp_dtype, keys[order],
                          **{name: np.concatenate([getattr(r, name) for r in runs])[order] for name in _FIELDS})
        self._delta = _Run(self._cmp_dtype)

    def forget(self, keys: Keys | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stop tracking ``keys``; returns the segments and stored docs (tombstones negative) they had."""
        mask = self._all_keys().isin(Keys.of(keys))
        segs, docs = self._all("segs")[mask], self._all("docs")[mask]
        self._drop(mask)
        return segs, docs

    def remove_segment(self, segment: int) -> int:
        """Stop tracking the keys whose version is in ``segment`` (it was dropped); returns how many."""
        self._ranks.pop(segment, None)
        return self._drop(self._all("segs") == segment)

    def expire(self, metadata_ttl: float = 0.0, deleted_keys_ttl: float = 0.0) -> int:
        """Forget keys older than the largest comparison value tracked minus the TTL (0: never); returns how many.
        The largest *tracked* value, not the largest ever seen: replicas whose maps hold the same versions expire
        the same keys, even if one of them once read rows it later discarded (past a committed end)."""
        if not len(self):
            return 0
        cmps, tomb = self._all("cmps"), self._all("docs") < 0
        finite = cmps[np.isfinite(cmps)] if self._cmp_dtype is np.float64 else cmps
        if not len(finite):
            return 0
        newest = finite.max()
        old = np.zeros(len(self), bool)
        if metadata_ttl > 0:
            old |= cmps < self._threshold(newest, metadata_ttl)
        if deleted_keys_ttl > 0:
            old |= tomb & (cmps < self._threshold(newest, deleted_keys_ttl))
        return self._drop(old)

    def _threshold(self, newest: np.generic, ttl: float) -> np.generic:
        """``newest`` minus ``ttl``, in the map's dtype (exact for integers)."""
        if self._cmp_dtype is np.int64:
            return np.int64(max(int(newest) - int(ttl), INT_SMALLEST))
        return np.float64(float(newest) - ttl)

    def tombstones(self, segment: int) -> np.ndarray:
        """The docs of ``segment``'s delete rows that hide their keys (a snapshot keeps them: without them an older
        version could bring a deleted key back after a restart)."""
        docs = self._docs_of(segment)
        return np.sort(-1 - docs[docs < 0])

    def tombstones_by_segment(self) -> dict[int, np.ndarray]:
        """``tombstones`` of every segment that has some, in one pass (a snapshot round takes them all)."""
        segs, docs = self._all("segs"), self._all("docs")
        dead = docs < 0
        segs, docs = segs[dead], -1 - docs[dead]
        return {int(seg): np.sort(docs[segs == seg]) for seg in np.unique(segs)}

    def _docs_of(self, segment: int) -> np.ndarray:
        """The stored docs (tombstones negative) of the keys whose version is in ``segment``."""
        return self._all("docs")[self._all("segs") == segment]

    def _saw(self, cmps: np.ndarray) -> None:
        """Track the largest finite comparison value (the TTLs count back from it)."""
        finite = cmps[np.isfinite(cmps)] if cmps.dtype == np.float64 else cmps[cmps != INT_SMALLEST]
        if len(finite):
            top = finite.max().item()
            self.largest_comparison = top if self.largest_comparison is None else max(self.largest_comparison, top)

    def _rank_of(self, segs: np.ndarray) -> np.ndarray:
        ids = np.fromiter(self._ranks, np.int64, len(self._ranks))
        ranks = np.fromiter(self._ranks.values(), np.int64, len(self._ranks))
        order = np.argsort(ids)
        return ranks[order][np.searchsorted(ids[order], segs)]

    # ---- storage: rows 0..len(main)-1 are the main run's, the rest the delta run's -----------------------------

    def _find(self, keys: Keys) -> np.ndarray:
        """Row of each key, -1 if absent."""
        self.settle()  # every read of the runs starts with _find or _all
        rows = self._main.find(keys)
        if len(self._delta):
            in_delta = self._delta.find(keys)
            rows = np.where((rows < 0) & (in_delta >= 0), in_delta + len(self._main), rows)
        return rows

    def _read(self, name: str, rows: np.ndarray) -> np.ndarray:
        m = len(self._main)
        if not len(self._delta):
            return getattr(self._main, name)[rows]
        in_main = rows < m
        out = np.empty(len(rows), _DTYPES.get(name, self._cmp_dtype))
        out[in_main] = getattr(self._main, name)[rows[in_main]]
        out[~in_main] = getattr(self._delta, name)[rows[~in_main] - m]
        return out

    def _write(self, name: str, rows: np.ndarray, values: np.ndarray) -> None:
        m = len(self._main)
        in_main = rows < m
        getattr(self._main, name)[rows[in_main]] = values[in_main]
        getattr(self._delta, name)[rows[~in_main] - m] = values[~in_main]

    def _all(self, name: str) -> np.ndarray:
        self.settle()
        return np.concatenate([getattr(self._main, name), getattr(self._delta, name)])

    def _all_keys(self) -> Keys:
        self.settle()
        return Keys.concat([self._main.keys, self._delta.keys])

    def _append(self, keys: Keys, segment: int, docs: np.ndarray, cmps: np.ndarray) -> None:
        """Add keys not tracked yet."""
        if not len(keys):
            return
        order = np.argsort(keys.index)
        keys, docs, cmps = keys[order], docs[order], cmps[order]
        new = _Run(self._cmp_dtype, keys, segs=np.full(len(keys), segment, np.int32), docs=docs, cmps=cmps)
        self._delta = self._delta.merged(new)
        if len(self._delta) > max(_MIN_MERGE, len(self._main) // 8):
            self._main, self._delta = self._main.merged(self._delta), _Run(self._cmp_dtype)

    def _drop(self, mask: np.ndarray) -> int:
        count = int(mask.sum())
        if count:
            m = len(self._main)
            self._main, self._delta = self._main.without(mask[:m]), self._delta.without(mask[m:])
        return count


def _exclusive_group_max(values: np.ndarray, group_of: np.ndarray, base: np.ndarray) -> np.ndarray:
    """For rows sorted by group: the max of ``base[group]`` and the group's earlier values (segmented scan).

    Values are replaced by dense ranks (order kept), and each group's ranks are lifted above every earlier group's,
    so one global ``maximum.accumulate`` never carries a maximum across groups. Groups of one row (most, in a
    batch or a segment) just see their base: only the rows of repeated keys take the ranked scan."""
    n = len(values)
    starts = np.flatnonzero(np.r_[True, group_of[1:] != group_of[:-1]])
    repeated = np.diff(np.r_[starts, n]) > 1
    if not repeated.all():
        out = base[group_of]
        if repeated.any():
            rows = np.flatnonzero(repeated[group_of])
            dense = np.cumsum(repeated) - 1  # repeated groups renumbered 0..k-1, order kept
            out[rows] = _exclusive_group_max(values[rows], dense[group_of[rows]], base[repeated])
        return out
    both = np.concatenate([values, base])
    uniq, inverse = np.unique(both, return_inverse=True)
    ranks, base_ranks = inverse[:n].astype(np.int64), inverse[n:].astype(np.int64)
    lift = np.int64(len(uniq) + 1)
    lifted = ranks + group_of.astype(np.int64) * lift
    shifted = np.empty(n, np.int64)  # row i sees rows before it in its group, and the group's base
    shifted[1:] = lifted[:-1]
    shifted[starts] = base_ranks + np.arange(len(starts), dtype=np.int64) * lift
    running = np.maximum.accumulate(shifted)
    return uniq[running - group_of.astype(np.int64) * lift]
