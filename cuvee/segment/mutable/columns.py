"""The columns of a consuming segment: a value store (raw or dictionary ids) plus nulls, offsets and an index.

Stores hold null-free values; a column turns a batch's nulls into the column's null value (single-value) or an
empty list (multi-value) and remembers them in a null mask. Single-value buffers are preallocated to the
segment's capacity and never move; multi-value element stores and variable-length data grow by doubling.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import FieldSpec
from cuvee.decode.arrow_ops import drop_null_list_elements
from cuvee.segment.mutable.buffers import GrowingArray, VarBinaryStore
from cuvee.segment.mutable.dictionary import NUMPY_TYPES, Dictionary, fixed_to_numpy, make_dictionary, numpy_to_fixed
from cuvee.segment.mutable.inverted import InvertedIndex

_INITIAL_DICTIONARY_SIZE = 1024
_INITIAL_BYTES_PER_VALUE = 8
_INT32_MAX = np.iinfo(np.int32).max


class FixedStore:
    """Raw fixed-width values (numbers, booleans, timestamps as int64 millis)."""

    dictionary: Dictionary | None = None

    def __init__(self, arrow_type: pa.DataType, initial_items: int) -> None:
        self.arrow_type = arrow_type
        self._values = GrowingArray(NUMPY_TYPES[arrow_type], initial_items)

    def append(self, values: pa.Array) -> None:
        self._values.append(fixed_to_numpy(values))

    def to_arrow(self, count: int, validity: pa.Buffer | None = None, first: int = 0) -> pa.Array:
        return numpy_to_fixed(self._values.head(count)[first:], self.arrow_type, validity)

    def bytes_used(self, count: int) -> int:
        return count * self._values.itemsize


class VarStore(VarBinaryStore):
    """Raw strings, JSON text or bytes."""

    dictionary: Dictionary | None = None


class DictStore:
    """Dictionary ids (int32) of each value; ``to_arrow`` gives a DictionaryArray."""

    def __init__(self, arrow_type: pa.DataType, initial_items: int) -> None:
        self.arrow_type = arrow_type
        self.dictionary: Dictionary = make_dictionary(arrow_type, min(initial_items, _INITIAL_DICTIONARY_SIZE))
        self._ids = GrowingArray(np.int32, initial_items)

    def append(self, values: pa.Array) -> np.ndarray:
        ids = self.dictionary.encode(values)
        self._ids.append(ids)
        return ids

    def to_arrow(self, count: int, validity: pa.Buffer | None = None, first: int = 0) -> pa.Array:
        indices = pa.Array.from_buffers(pa.int32(), count - first,
                                        [validity, pa.py_buffer(self._ids.head(count)[first:])])
        return pa.DictionaryArray.from_arrays(indices, self.dictionary.values_array(), safe=False)

    def bytes_used(self, count: int) -> int:
        return 4 * count + self.dictionary.bytes_used()


Store = FixedStore | VarStore | DictStore


def make_store(arrow_type: pa.DataType, dictionary_encoded: bool, initial_items: int) -> Store:
    if dictionary_encoded:
        return DictStore(arrow_type, initial_items)
    if arrow_type in NUMPY_TYPES:
        return FixedStore(arrow_type, initial_items)
    return VarStore(arrow_type, initial_items, initial_items * _INITIAL_BYTES_PER_VALUE)


class _NullMask:
    """One byte per row (packed into an Arrow validity bitmap only when a reader asks)."""

    def __init__(self, capacity: int) -> None:
        self._nulls = np.zeros(capacity, dtype=np.bool_)
        self.any = False

    def set(self, first_doc: int, mask: np.ndarray) -> None:
        self._nulls[first_doc : first_doc + len(mask)] = mask
        self.any = True

    def validity(self, count: int, first: int = 0) -> pa.Buffer | None:
        """The validity bitmap of rows ``first`` to ``count`` (None: none of them is null)."""
        if not self.any:
            return None
        nulls = self._nulls[first:count]
        if not nulls.any():
            return None
        return pa.py_buffer(np.packbits(~nulls, bitorder="little"))

    def count(self, count: int) -> int:
        return int(np.count_nonzero(self._nulls[:count])) if self.any else 0


class SingleValueColumn:
    def __init__(self, spec: FieldSpec, store: Store, capacity: int, index: InvertedIndex | None) -> None:
        self.spec = spec
        self.store = store
        self.index = index
        self._nulls = _NullMask(capacity)
        self._null_value = pa.scalar(spec.null_value, type=spec.data_type.arrow_type())

    def append(self, values: pa.Array, first_doc: int) -> None:
        mask = None
        if values.null_count:
            mask = values.is_null().to_numpy(zero_copy_only=False)
            self._nulls.set(first_doc, mask)
            values = values.fill_null(self._null_value)
        ids = self.store.append(values)
        if self.index is not None and ids is not None:
            docs = np.arange(first_doc, first_doc + len(values), dtype=np.uint32)
            if mask is not None:
                ids, docs = ids[~mask], docs[~mask]
            self.index.add(ids, docs)

    def to_arrow(self, count: int, first: int = 0) -> pa.Array:
        """Rows ``first`` to ``count`` (only those rows' nulls and booleans are packed)."""
        return self.store.to_arrow(count, self._nulls.validity(count, first), first)

    def null_count(self, count: int) -> int:
        return self._nulls.count(count)

    def bytes_used(self, count: int) -> int:
        index = self.index.bytes_used() if self.index is not None else 0
        nulls = (count + 7) // 8 if self._nulls.any else 0
        return self.store.bytes_used(count) + nulls + index


class MultiValueColumn:
    """Row offsets (preallocated) into a growing store of elements; a null row is an empty, null list."""

    def __init__(self, spec: FieldSpec, store: Store, capacity: int, index: InvertedIndex | None) -> None:
        self.spec = spec
        self.store = store
        self.index = index
        self._nulls = _NullMask(capacity)
        self._offsets = np.zeros(capacity + 1, dtype=np.int32)

    def append(self, values: pa.Array, first_doc: int) -> None:
        values = drop_null_list_elements(values)
        count = len(values)
        if values.null_count:
            self._nulls.set(first_doc, values.is_null().to_numpy(zero_copy_only=False))
        lengths = pc.list_value_length(values).fill_null(0).to_numpy(zero_copy_only=False)
        ends = np.cumsum(lengths, dtype=np.int64) + int(self._offsets[first_doc])
        if count and ends[-1] > _INT32_MAX:
            raise ValueError(f"column {self.spec.name!r}: more than 2^31 multi-value elements in one segment")
        ids = self.store.append(values.flatten())
        self._offsets[first_doc + 1 : first_doc + count + 1] = ends
        if self.index is not None and ids is not None:
            docs = np.repeat(np.arange(first_doc, first_doc + count, dtype=np.uint32), lengths)
            self.index.add(ids, docs)

    def to_arrow(self, count: int, first: int = 0) -> pa.Array:
        """Rows ``first`` to ``count``, over only their elements (offsets rebased when ``first`` is not 0)."""
        offsets = self._offsets[first : count + 1]
        begin = int(offsets[0])
        elements = self.store.to_arrow(int(offsets[-1]), None, begin)
        return pa.Array.from_buffers(
            pa.list_(elements.type),
            count - first,
            [self._nulls.validity(count, first), pa.py_buffer(offsets - begin if begin else offsets)],
            children=[elements],
        )

    def null_count(self, count: int) -> int:
        return self._nulls.count(count)

    def bytes_used(self, count: int) -> int:
        index = self.index.bytes_used() if self.index is not None else 0
        nulls = (count + 7) // 8 if self._nulls.any else 0
        return 4 * (count + 1) + self.store.bytes_used(int(self._offsets[count])) + nulls + index


Column = SingleValueColumn | MultiValueColumn
