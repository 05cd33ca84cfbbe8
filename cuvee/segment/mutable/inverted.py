"""Inverted index of a consuming segment: one roaring bitmap of doc ids per dictionary id.

Updated once per batch: the batch's (id, doc) pairs are grouped by id with one numpy sort, then each id's
bitmap takes its docs in a single call. Readers copy a bitmap and cut it at their published row count.
"""

from __future__ import annotations

import array

import numpy as np
from pyroaring import BitMap

_MAX_DOC = 2**32


class InvertedIndex:
    def __init__(self) -> None:
        self._bitmaps: list[BitMap] = []

    def add(self, ids: np.ndarray, docs: np.ndarray) -> None:
        """Record that doc ``docs[i]`` holds dictionary id ``ids[i]``."""
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        sorted_docs = array.array("I", docs[order].astype(np.uint32).tobytes())
        starts = np.flatnonzero(np.diff(sorted_ids)) + 1
        starts = np.concatenate(([0], starts))
        ends = np.concatenate((starts[1:], [len(sorted_ids)]))
        bitmaps = self._bitmaps
        highest = int(sorted_ids[-1])
        while len(bitmaps) <= highest:
            bitmaps.append(BitMap())
        for dictionary_id, start, end in zip(sorted_ids[starts].tolist(), starts.tolist(), ends.tolist()):
            bitmaps[dictionary_id].update(sorted_docs[start:end])

    def docs(self, dictionary_id: int, below: int) -> BitMap:
        """The docs holding ``dictionary_id`` among the first ``below`` docs."""
        bitmaps = self._bitmaps
        if dictionary_id >= len(bitmaps):
            return BitMap()
        found = bitmaps[dictionary_id].copy()
        if below < _MAX_DOC:
            found.remove_range(below, _MAX_DOC)
        return found

    def bytes_used(self) -> int:
        total = 0
        for bitmap in self._bitmaps[:]:
            stats = bitmap.get_statistics()
            total += (
                stats["n_bytes_array_containers"]
                + stats["n_bytes_run_containers"]
                + stats["n_bytes_bitset_containers"]
            )
        return total
