"""Vectorised Arrow helpers shared by the decoder and the mutable segment."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# ASCII byte -> nibble value, -1 for bytes that are not hex digits.
_NIBBLE = np.full(256, -1, dtype=np.int16)
for _digit, _char in enumerate(b"0123456789abcdef"):
    _NIBBLE[_char] = _digit
    _NIBBLE[ord(chr(_char).upper())] = _digit


def drop_null_list_elements(array: pa.Array) -> pa.Array:
    """The same list array without null elements (Pinot's multi-value columns never hold nulls)."""
    if not isinstance(array, pa.ListArray) or array.values.null_count == 0:
        return array
    flat = array.flatten()
    if flat.null_count == 0:  # the nulls were in the hidden range of null lists or outside the slice
        return array
    parents = pc.list_parent_indices(array).to_numpy()
    element_is_null = flat.is_null().to_numpy(zero_copy_only=False)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy()
    kept_lengths = lengths - np.bincount(parents[element_is_null], minlength=len(array))
    offsets = np.zeros(len(array) + 1, dtype=np.int32)
    np.cumsum(kept_lengths, out=offsets[1:])
    kept = flat.filter(pc.invert(flat.is_null()))
    mask = array.is_null() if array.null_count else None
    return pa.ListArray.from_arrays(pa.array(offsets), kept, type=array.type, mask=mask)


def hex_to_binary(strings: pa.Array) -> pa.Array | None:
    """Decode an array of hex strings to binary in one pass; None if any string is not even-length hex."""
    if strings.null_count:
        strings_filled = strings.fill_null("")
    else:
        strings_filled = strings
    strings_filled = strings_filled.cast(pa.string())
    if strings_filled.offset:
        strings_filled = pa.concat_arrays([strings_filled])  # normalise the slice so buffers start at row 0
    n = len(strings_filled)
    offsets = np.frombuffer(strings_filled.buffers()[1], dtype=np.int32, count=n + 1)
    data_buffer = strings_filled.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    if np.any(np.diff(offsets) % 2):
        return None
    nibbles = _NIBBLE[data]
    if np.any(nibbles < 0):
        return None
    decoded = (nibbles[0::2] << 4 | nibbles[1::2]).astype(np.uint8)
    new_offsets = ((offsets - offsets[0]) // 2).astype(np.int32)
    validity = pc.is_valid(strings).buffers()[1] if strings.null_count else None
    return pa.Array.from_buffers(
        pa.binary(), n, [validity, pa.py_buffer(new_offsets), pa.py_buffer(decoded)], null_count=strings.null_count
    )
