"""Pure, vectorised column encoding for immutable segments: sorted dictionaries and canonical Arrow arrays.

Replicas must write byte-identical files for the same rows, whatever the batch boundaries or the input's
dictionary order. So every array written to disk is rebuilt here in one canonical form: offset 0, tight buffers,
a validity bitmap we pack ourselves (trailing bits zero) or none when there are no nulls, and zeroed slots under
nulls. Floats are ordered by their IEEE total order (-NaN < -inf < ... < -0.0 < 0.0 < ... < inf < NaN), so -0.0 and
0.0 stay distinct values and NaN has a fixed place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_FLOAT_BITS = {pa.float32(): (pa.int32(), np.int32), pa.float64(): (pa.int64(), np.int64)}


@dataclass(frozen=True)
class DictEncoded:
    """A single-value column as a sorted dictionary plus per-row dictionary ids (ids of null rows are 0)."""

    dictionary: pa.Array  # sorted, unique, no nulls
    ids: np.ndarray  # int32, one per row
    valid: np.ndarray | None  # bool per row, None when no row is null

    def forward(self) -> pa.Array:
        return with_validity(pa.array(self.ids, pa.int32()), self.valid)


def combine(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One contiguous array from a column, unifying the dictionaries of dictionary-encoded chunks."""
    if isinstance(column, pa.Array):
        return column
    if pa.types.is_dictionary(column.type) and column.num_chunks > 1:
        column = pa.table({"c": column}).unify_dictionaries().column("c")
    if column.num_chunks == 0:
        return pa.array([], column.type)
    if column.num_chunks == 1:
        return column.chunk(0)
    return pa.concat_arrays(column.chunks)


def validity(arr: pa.Array) -> np.ndarray | None:
    """A bool mask of non-null rows, or None when there is no null."""
    if arr.null_count == 0:
        return None
    return pc.is_valid(arr).to_numpy(zero_copy_only=False)


def with_validity(values: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """Attach a freshly packed validity bitmap to a null-free, offset-0 array."""
    if valid is None or bool(valid.all()):
        return values
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    children = [values.values] if pa.types.is_list(values.type) else None
    buffers = [bitmap, *values.buffers()[1 : _own_buffer_count(values.type)]]
    return pa.Array.from_buffers(values.type, len(values), buffers, children=children)


def _own_buffer_count(arrow_type: pa.DataType) -> int:
    if pa.types.is_string(arrow_type) or pa.types.is_binary(arrow_type):
        return 3
    return 2  # validity + data (primitives, bool) or validity + offsets (lists)


def float_total_order_key(values: np.ndarray) -> np.ndarray:
    """Signed integers that sort like IEEE-754 totalOrder (distinguishes -0.0 and 0.0, places NaNs)."""
    int_type = np.int32 if values.dtype == np.float32 else np.int64
    bits = values.view(int_type)
    mask = np.iinfo(int_type).max
    return np.where(bits < 0, bits ^ int_type(mask), bits)


def order_key(values: pa.Array) -> np.ndarray | None:
    """A numpy key that sorts like ``values`` (null-free), or None for strings/bytes (compared by Arrow)."""
    t = values.type
    if pa.types.is_floating(t):
        return float_total_order_key(values.to_numpy(zero_copy_only=False))
    if pa.types.is_timestamp(t):
        return values.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_boolean(t):
        return values.to_numpy(zero_copy_only=False).astype(np.int8)
    if pa.types.is_integer(t):
        return values.to_numpy(zero_copy_only=False)
    return None


def sorted_unique(values: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Sort and deduplicate null-free values: (unique sorted values, rank of every input value)."""
    n = len(values)
    if n == 0:
        return values, np.zeros(0, np.int32)
    key = order_key(values)
    if key is not None:
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        first = np.empty(n, bool)
        first[0] = True
        np.not_equal(sorted_key[1:], sorted_key[:-1], out=first[1:])
    else:
        order = pc.sort_indices(values).to_numpy()
        sorted_values = values.take(order)
        first = np.empty(n, bool)
        first[0] = True
        first[1:] = pc.not_equal(sorted_values[1:], sorted_values[:-1]).to_numpy(zero_copy_only=False)
    ranks = np.empty(n, np.int32)
    ranks[order] = np.cumsum(first, dtype=np.int32) - 1
    return canonical_values(values.take(order[first])), ranks


def dictionary_encode(arr: pa.Array) -> DictEncoded:
    """Encode a single-value column with a sorted dictionary; accepts plain or dictionary arrays."""
    if not pa.types.is_dictionary(arr.type):
        arr = _hashable_dictionary_encode(arr)
    indices, dictionary = arr.indices, arr.dictionary
    valid = validity(indices)
    idx = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    dict_valid = validity(dictionary)
    if dict_valid is not None:  # an index pointing at a null dictionary entry is a null row
        row_valid = dict_valid[idx] if valid is None else (valid & dict_valid[idx])
        valid = None if row_valid.all() else row_valid
    used = np.zeros(len(dictionary), bool)
    used[idx if valid is None else idx[valid]] = True
    if dict_valid is not None:
        used &= dict_valid
    used_positions = np.flatnonzero(used)
    unique, ranks = sorted_unique(dictionary.take(used_positions))
    remap = np.zeros(len(dictionary), np.int32)
    remap[used_positions] = ranks
    ids = remap[idx] if len(dictionary) else np.zeros(len(arr), np.int32)
    if valid is not None:
        ids[~valid] = 0
    return DictEncoded(unique, ids, valid)


def _hashable_dictionary_encode(arr: pa.Array) -> pa.DictionaryArray:
    """Arrow's hash-based encoding; floats are hashed by bit pattern so -0.0 and 0.0 stay apart."""
    bits = _FLOAT_BITS.get(arr.type)
    if bits is None:
        return pc.dictionary_encode(arr)
    encoded = pc.dictionary_encode(arr.view(bits[0]))
    return pa.DictionaryArray.from_arrays(encoded.indices, encoded.dictionary.view(arr.type))


def sort_permutation(arr: pa.Array) -> np.ndarray:
    """Row order that stably sorts a single-value column ascending, nulls last."""
    encoded = dictionary_encode(arr)
    key = encoded.ids.astype(np.int64)
    if encoded.valid is not None:
        key[~encoded.valid] = len(encoded.dictionary)
    return np.argsort(key, kind="stable")


def canonical_values(arr: pa.Array) -> pa.Array:
    """The canonical on-disk form of a plain (non-dictionary) array, single- or multi-value."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary.take(arr.indices)
    valid = validity(arr)
    t = arr.type
    if pa.types.is_list(t):
        lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(arr) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        child = canonical_values(arr.flatten())
        values = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), child, type=t)
    elif pa.types.is_string(t) or pa.types.is_binary(t):
        values = _canonical_binary(arr.fill_null(b"" if pa.types.is_binary(t) else ""))
    elif pa.types.is_boolean(t):
        bits = np.packbits(arr.fill_null(False).to_numpy(zero_copy_only=False), bitorder="little")
        values = pa.Array.from_buffers(t, len(arr), [None, pa.py_buffer(bits.tobytes())])
    else:
        storage = arr.fill_null(pa.scalar(0, t)) if arr.null_count else arr
        numbers = storage.to_numpy(zero_copy_only=False)
        values = pa.Array.from_buffers(t, len(arr), [None, pa.py_buffer(np.ascontiguousarray(numbers).tobytes())])
    return with_validity(values, valid)


def _canonical_binary(arr: pa.Array) -> pa.Array:
    """Rebase a (possibly sliced) null-free string/binary array to offset 0 with a tight data buffer."""
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32)[arr.offset : arr.offset + n + 1] if n else np.zeros(1, np.int32)
    start, end = int(offsets[0]), int(offsets[-1])
    data = data_buf.slice(start, end - start) if data_buf is not None else pa.py_buffer(b"")
    rebased = (offsets - start).astype(np.int32)
    return pa.Array.from_buffers(arr.type, n, [None, pa.py_buffer(rebased.tobytes()), data])


def list_offsets_and_parents(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """For a canonical list array: its offsets and, for every flattened element, the row it belongs to."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[: len(arr) + 1]
    lengths = np.diff(offsets)
    parents = np.repeat(np.arange(len(arr), dtype=np.uint32), lengths)
    return offsets, parents
