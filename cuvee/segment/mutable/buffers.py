"""Append-only numpy storage that readers may view without locks while one writer appends.

The writer fills new items first and only then advances its size; when it must grow, it copies into a bigger
array and swaps the reference before writing, so any array a reader holds is valid up to the size it read
before taking it. Old arrays stay alive as long as a reader's view (or a zero-copy Arrow buffer) uses them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class GrowingArray:
    """A numpy array that doubles when full; ``head(n)`` is safe for any n below a size read earlier."""

    def __init__(self, dtype: np.dtype | type, initial_capacity: int) -> None:
        self._array = np.zeros(max(1, initial_capacity), dtype=dtype)
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    @property
    def itemsize(self) -> int:
        return self._array.itemsize

    def append(self, values: np.ndarray) -> None:
        count = len(values)
        needed = self._size + count
        if needed > len(self._array):
            grown = np.zeros(max(needed, 2 * len(self._array)), dtype=self._array.dtype)
            grown[: self._size] = self._array[: self._size]
            self._array = grown
        self._array[self._size : needed] = values
        self._size = needed

    def truncate(self, size: int) -> None:
        """Forget the items from ``size`` on (they were recorded ahead of a step that then took fewer)."""
        self._size = min(self._size, max(size, 0))

    def head(self, count: int) -> np.ndarray:
        """The first ``count`` items (a view, no copy)."""
        return self._array[:count]

    def view(self) -> np.ndarray:
        """All items published so far (size read before the array, so the view is complete)."""
        size = self._size
        return self._array[:size]


class VarBinaryStore:
    """Variable-length values (strings, bytes) as Arrow lays them out: int32 offsets plus one data buffer."""

    def __init__(self, arrow_type: pa.DataType, initial_items: int, initial_bytes: int) -> None:
        self.arrow_type = arrow_type
        self._offsets = GrowingArray(np.int32, initial_items + 1)
        self._offsets.append(np.zeros(1, dtype=np.int32))
        self._data = GrowingArray(np.uint8, initial_bytes)

    @property
    def size(self) -> int:
        return self._offsets.size - 1

    def append(self, values: pa.Array) -> None:
        """Append a string/binary array without nulls."""
        count = len(values)
        if count == 0:
            return
        _, offsets_buffer, data_buffer = values.buffers()
        offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=values.offset + count + 1)[values.offset :]
        begin, end = int(offsets[0]), int(offsets[-1])
        base = self._data.size
        if base + (end - begin) > np.iinfo(np.int32).max:
            raise ValueError("more than 2 GiB of variable-length data in one column of a consuming segment")
        if end > begin:
            self._data.append(np.frombuffer(data_buffer, dtype=np.uint8, count=end)[begin:])
        self._offsets.append((offsets[1:] - (begin - base)).astype(np.int32, copy=False))

    def to_arrow(self, count: int, validity: pa.Buffer | None = None, first: int = 0) -> pa.Array:
        """Items ``first`` to ``count`` (their offsets index the shared data buffer: nothing is copied)."""
        offsets = self._offsets.head(count + 1)[first:]
        data = self._data.head(int(offsets[-1]))
        return pa.Array.from_buffers(self.arrow_type, count - first,
                                     [validity, pa.py_buffer(offsets), pa.py_buffer(data)])

    def bytes_used(self, count: int) -> int:
        return 4 * (count + 1) + int(self._offsets.head(count + 1)[-1])
