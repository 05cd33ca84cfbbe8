"""Primary keys as the key map holds them: a 64-bit index, and where the index alone is not the key, what tells keys
apart exactly. Pure and vectorised.

``Keys.index`` (uint64) is what the key map sorts and searches: equal keys have equal indexes. Where the index *is*
the key (a key whose bytes fit in 64 bits, mixed by a bijection; ``cuvee.upsert.hashing``), ``exact`` is None and
nothing else is compared. Otherwise two different keys may share an index (a 64-bit hash of a string or composite
key; the first word of a 128-bit hash), and ``exact`` holds, per key, what equal keys and only equal keys with the
same index share: the key's bytes (``hashFunction: NONE``), or the second word of its 128-bit hash (``MD5``,
``MURMUR3``: two keys are one when all 128 bits agree, as in Pinot). Every comparison here checks ``exact`` where
the indexes agree, so a true 64-bit collision keeps its keys apart. A collision costs one more vectorised round
per extra key sharing an index, never a Python loop per row; without one, the cost is the indexes' plus an
``exact`` comparison of the rows whose index matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Keys:
    """One primary key per row: ``index`` (uint64) and, unless the index is exact, ``exact`` (an Arrow array, one
    value per row, never null)."""

    index: np.ndarray
    exact: pa.Array | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", np.ascontiguousarray(self.index, np.uint64))
        if self.exact is not None:
            exact = self.exact.combine_chunks() if isinstance(self.exact, pa.ChunkedArray) else self.exact
            if len(exact) != len(self.index):
                raise ValueError("a key's index and exact value come one per row")
            object.__setattr__(self, "exact", exact)

    @staticmethod
    def of(keys: Keys | np.ndarray | Sequence[int]) -> Keys:
        """``keys`` as Keys: plain indexes are exact ones (keys that are their own index)."""
        return keys if isinstance(keys, Keys) else Keys(np.asarray(keys, np.uint64))

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, rows: np.ndarray) -> Keys:
        """The keys of ``rows``: a boolean mask or positions."""
        rows = np.asarray(rows)
        if self.exact is None:
            return Keys(self.index[rows])
        if rows.dtype == bool:
            return Keys(self.index[rows], self.exact.filter(pa.array(rows)))
        return Keys(self.index[rows], self.exact.take(pa.array(rows, pa.int64())))

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + (self.exact.nbytes if self.exact is not None else 0)

    @staticmethod
    def concat(parts: Sequence[Keys]) -> Keys:
        """All of ``parts``, in turn. Empty parts aside, all have ``exact`` of one type or none do."""
        full = [p for p in parts if len(p)]
        if not full:
            return parts[0] if parts else Keys(np.zeros(0, np.uint64))
        return Keys(np.concatenate([p.index for p in full]), Keys.exact_of(full))

    @staticmethod
    def exact_of(parts: Sequence[Keys]) -> pa.Array | None:
        """The ``exact`` values of ``parts`` in turn (None when they have none); keys of two kinds are refused."""
        full = [p for p in parts if len(p)]
        kinds = {None if p.exact is None else p.exact.type for p in full}
        if len(kinds) > 1:
            raise ValueError(f"keys of different kinds cannot be mixed: {kinds}")
        if not full or full[0].exact is None:
            return None
        return pa.concat_arrays([p.exact for p in full])  # type: ignore[misc]

    def same(self, rows: np.ndarray, other: Keys, other_rows: np.ndarray) -> np.ndarray:
        """Whether ``self``'s key at each of ``rows`` equals ``other``'s at ``other_rows``, given that their indexes
        are equal (only ``exact`` is compared)."""
        if self.exact is None or other.exact is None:
            if (self.exact is None) != (other.exact is None) and len(rows):
                raise ValueError("keys with and without exact values cannot be compared")
            return np.ones(len(rows), bool)
        if not len(rows):
            return np.zeros(0, bool)
        mine = self.exact.take(pa.array(rows, pa.int64()))
        theirs = other.exact.take(pa.array(other_rows, pa.int64()))
        return np.asarray(pc.equal(mine, theirs).to_numpy(zero_copy_only=False), bool)

    def grouped(self, *, stable: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(order, starts)``: ``order`` sorts the rows by index with each key's rows together (in row order when
        ``stable``), and ``starts`` are the positions in ``order`` where a key begins. Rows repeating an index are
        compared with the first row of that index; only when one differs (a collision) are the rows ordered by
        index and exact value together."""
        n = len(self)
        order = np.argsort(self.index, kind="stable" if stable else None)
        if n == 0:
            return order, np.zeros(0, np.int64)
        ordered = self.index[order]
        new = np.r_[True, ordered[1:] != ordered[:-1]]
        if self.exact is None or new.all():
            return order, np.flatnonzero(new)
        first = order[np.maximum.accumulate(np.where(new, np.arange(n), 0))]  # each row's first row of its index
        repeats = np.flatnonzero(~new)
        if self.same(order[repeats], self, first[repeats]).all():
            return order, np.flatnonzero(new)
        exact_ids = np.asarray(pc.dictionary_encode(self.exact).indices.to_numpy(zero_copy_only=False), np.int64)
        order = np.lexsort((np.arange(n), exact_ids, self.index))
        ordered, ids = self.index[order], exact_ids[order]
        new = np.r_[True, (ordered[1:] != ordered[:-1]) | (ids[1:] != ids[:-1])]
        return order, np.flatnonzero(new)

    def group_ids(self) -> np.ndarray:
        """A dense id per row (int64, 0..k-1): equal ids for equal keys, different ids for different keys."""
        order, starts = self.grouped()
        ids = np.empty(len(self), np.int64)
        ids[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(self)]))
        return ids

    def unique(self) -> Keys:
        """Each key once, sorted by index."""
        order, starts = self.grouped(stable=False)
        return self[order[starts]]

    def find_in(self, run: Keys) -> np.ndarray:
        """Position of each key in ``run`` (keys sorted by index, each key once), -1 where absent."""
        m = len(run)
        if not m:
            return np.full(len(self), -1, np.int64)
        at = np.minimum(np.searchsorted(run.index, self.index), m - 1)
        hit = run.index[at] == self.index
        if run.exact is None and self.exact is None:
            return np.where(hit, at, -1)
        out = np.full(len(self), -1, np.int64)
        rows = np.flatnonzero(hit)
        at = at[rows]
        while len(rows):  # the first entry of each matching index, then the next ones of the same index (collisions)
            same = run.same(at, self, rows)
            out[rows[same]] = at[same]
            rows, at = rows[~same], at[~same] + 1
            more = at < m
            rows, at = rows[more], at[more]
            more = run.index[at] == self.index[rows]
            rows, at = rows[more], at[more]
        return out

    def isin(self, other: Keys) -> np.ndarray:
        """Whether each key is one of ``other``'s."""
        if not len(other) or not len(self):
            return np.zeros(len(self), bool)
        return self.find_in(other.unique()) >= 0
