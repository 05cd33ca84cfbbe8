"""Growing dictionaries of a consuming segment: value -> id in insertion order, encoded a batch at a time.

Only a batch's distinct values are looked up (and the new ones inserted), then every row's id is mapped with
numpy, so the cost per batch follows its cardinality, not its row count. Ids are never reassigned, so readers
can use any prefix of the values without locks.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.segment.mutable.buffers import GrowingArray

# numpy dtype of each fixed-width Arrow type, and the same-width integer type its keys are compared as (so that
# NaN, -0.0 and friends each get exactly one id).
NUMPY_TYPES: dict[pa.DataType, np.dtype] = {
    pa.int32(): np.dtype(np.int32),
    pa.int64(): np.dtype(np.int64),
    pa.float32(): np.dtype(np.float32),
    pa.float64(): np.dtype(np.float64),
    pa.bool_(): np.dtype(np.bool_),
    pa.timestamp("ms"): np.dtype(np.int64),
}
_KEY_TYPES = {
    np.dtype(np.float32): np.dtype(np.int32),
    np.dtype(np.float64): np.dtype(np.int64),
    np.dtype(np.bool_): np.dtype(np.uint8),
}


def fixed_to_numpy(values: pa.Array) -> np.ndarray:
    """A null-free fixed-width Arrow array as numpy (zero-copy except booleans, which Arrow packs in bits)."""
    if values.type == pa.timestamp("ms"):
        values = values.view(pa.int64())
    return values.to_numpy(zero_copy_only=False)


def numpy_to_fixed(values: np.ndarray, arrow_type: pa.DataType, validity: pa.Buffer | None = None) -> pa.Array:
    """The inverse of ``fixed_to_numpy``: wraps the numpy memory (booleans are packed into a copy)."""
    if arrow_type == pa.bool_():
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = pa.py_buffer(values)
    return pa.Array.from_buffers(arrow_type, len(values), [validity, data])


class NumericDictionary:
    """Numbers, booleans and timestamps: a sorted key array for lookups, values in id order for readers."""

    def __init__(self, arrow_type: pa.DataType, initial_capacity: int) -> None:
        self.arrow_type = arrow_type
        self._dtype = NUMPY_TYPES[arrow_type]
        self._key_dtype = _KEY_TYPES.get(self._dtype, self._dtype)
        self._values = GrowingArray(self._dtype, initial_capacity)
        # (sorted keys, their ids) swapped as one reference so a reader never pairs an old and a new array.
        self._lookup: tuple[np.ndarray, np.ndarray] = (np.zeros(0, self._key_dtype), np.zeros(0, np.int32))

    @property
    def size(self) -> int:
        return self._values.size

    def encode(self, values: pa.Array) -> np.ndarray:
        """Ids (int32) of a null-free batch, inserting values not seen before."""
        keys = fixed_to_numpy(values).view(self._key_dtype)
        distinct, first_seen, inverse = np.unique(keys, return_index=True, return_inverse=True)
        sorted_keys, sorted_ids = self._lookup
        positions = np.searchsorted(sorted_keys, distinct)
        found = positions < len(sorted_keys)
        found[found] = sorted_keys[positions[found]] == distinct[found]
        ids = np.empty(len(distinct), dtype=np.int32)
        ids[found] = sorted_ids[positions[found]]
        missing = ~found
        new_keys = distinct[missing]
        if len(new_keys):
            # Ids in order of first appearance, so they do not depend on where batches happen to be cut.
            appearance = np.argsort(first_seen[missing], kind="stable")
            new_ids = np.empty(len(new_keys), dtype=np.int32)
            new_ids[appearance] = np.arange(self.size, self.size + len(new_keys), dtype=np.int32)
            ids[missing] = new_ids
            self._values.append(new_keys[appearance].view(self._dtype))
            at = positions[missing]
            self._lookup = (np.insert(sorted_keys, at, new_keys), np.insert(sorted_ids, at, new_ids))
        return ids[inverse.reshape(-1)]

    def id_of(self, value: Any) -> int | None:
        key = fixed_to_numpy(pa.array([value], type=self.arrow_type)).view(self._key_dtype)[0]
        sorted_keys, sorted_ids = self._lookup
        position = int(np.searchsorted(sorted_keys, key))
        if position < len(sorted_keys) and sorted_keys[position] == key:
            return int(sorted_ids[position])
        return None

    def values_array(self) -> pa.Array:
        return numpy_to_fixed(self._values.view(), self.arrow_type)

    def bytes_used(self) -> int:
        sorted_keys, sorted_ids = self._lookup
        return self.size * self._dtype.itemsize + sorted_keys.nbytes + sorted_ids.nbytes


class ObjectDictionary:
    """Strings, JSON text and bytes: a Python dict for lookups, values kept as Arrow chunks in id order.

    Readers concatenate the chunks (cached per chunk tuple); the writer then folds the chunks a reader concatenated
    into that one array, so the values are held once, not as chunks plus their concatenation. ``bytes_used``
    counts what is really held: the chunks, a concatenation not yet folded, the dict and its Python keys (which
    for short strings weigh more than the Arrow values)."""

    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type
        self._ids: dict[Any, int] = {}
        self._chunks: tuple[pa.Array, ...] = ()  # replaced whole (never mutated): a reader's tuple stays valid
        self._size = 0
        self._key_bytes = 0
        self._concatenated: tuple[tuple[pa.Array, ...], pa.Array] = ((), pa.array([], type=arrow_type))

    @property
    def size(self) -> int:
        return self._size

    def encode(self, values: pa.Array) -> np.ndarray:
        encoded = values.dictionary_encode()
        distinct = encoded.dictionary
        known = self._ids
        distinct_values = distinct.to_pylist()
        ids = [known.get(value) for value in distinct_values]
        new_positions = [position for position, found in enumerate(ids) if found is None]
        if new_positions:
            next_id = self._size
            key_bytes = 0
            for position in new_positions:
                value = distinct_values[position]
                ids[position] = next_id
                known[value] = next_id
                key_bytes += sys.getsizeof(value)
                next_id += 1
            self._chunks = self._folded() + (distinct.take(new_positions),)
            self._key_bytes += key_bytes
            self._size = next_id
        mapping = np.array(ids, dtype=np.int32)
        return mapping[encoded.indices.to_numpy(zero_copy_only=False)]

    def _folded(self) -> tuple[pa.Array, ...]:
        """The chunks with the prefix a reader concatenated replaced by its concatenation (writer only)."""
        chunks = self._chunks
        covered, merged = self._concatenated
        n = len(covered)
        if n > 1 and len(chunks) >= n and all(a is b for a, b in zip(covered, chunks)):
            folded = (merged,) + chunks[n:]
            # The cache must let go of the old chunks too, or they live on beside their concatenation. A reader
            # that replaces it meanwhile only costs the next reader a concatenation.
            self._concatenated = ((merged,), merged)
            return folded
        return chunks

    def id_of(self, value: Any) -> int | None:
        return self._ids.get(value)

    def values_array(self) -> pa.Array:
        chunks = self._chunks
        covered, merged = self._concatenated
        if covered is chunks:
            return merged
        merged = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks) if chunks else merged
        self._concatenated = (chunks, merged)
        return merged

    def bytes_used(self) -> int:
        chunks = self._chunks
        covered, merged = self._concatenated
        held = sum(chunk.nbytes for chunk in chunks)
        if len(covered) > 1 and not (chunks and chunks[0] is merged):
            held += merged.nbytes  # a concatenation the writer has not folded yet
        return held + sys.getsizeof(self._ids) + self._key_bytes


Dictionary = NumericDictionary | ObjectDictionary


def make_dictionary(arrow_type: pa.DataType, initial_capacity: int) -> Dictionary:
    if arrow_type in NUMPY_TYPES:
        return NumericDictionary(arrow_type, initial_capacity)
    return ObjectDictionary(arrow_type)
