"""Primary keys to the ``Keys`` the key map holds (``cuvee.upsert.keys``), as ``upsertConfig.hashFunction`` asks.
Pure and vectorised: no Python loop per row.

A key's *bytes* are Pinot's (``PrimaryKey.asBytes``). One column: its value alone (INT and BOOLEAN: 4 bytes, LONG
and TIMESTAMP: 8, FLOAT: 4, DOUBLE: 8, all big-endian; STRING and JSON: UTF-8; BYTES: as they are). Several
columns: each in turn, numbers as above, strings and bytes each after its length (4 bytes, big-endian), so the
bytes of two different keys always differ. A null is its column's default null value, which is what Pinot keeps
in its place (a null key and a key of that value are one key, as in Pinot).

- ``NONE`` (the default): keys compare whole, as Pinot's ``PrimaryKey`` objects do. A key whose bytes fit in 64
  bits (one INT, LONG, TIMESTAMP, BOOLEAN, FLOAT or DOUBLE column; two INTs) is its own index, through a
  bijection (SplitMix64's finaliser), and nothing else is kept: 24 bytes a key in the key map. Any other key is
  indexed by a 64-bit hash and keeps its bytes beside it (``Keys.exact``), compared wherever indexes agree: two
  different keys that share a hash stay two keys. The hash: for keys of fixed-width columns only, their values
  mixed and folded in numpy; otherwise the first word of MurmurHash3_x64_128 over the key's bytes.
- ``MD5`` / ``MURMUR3``: the 128-bit hash of the key's bytes (Guava's ``md5()`` / ``murmur3_128()``, which
  Pinot's ``HashUtils`` calls), kept as two 64-bit words, the first eight bytes of the hash as the index and the
  last eight as ``exact`` (both read little-endian); the key's bytes are not kept: 32 bytes a key, whatever its
  width. Keys compare by the whole 128-bit hash, so two keys with the same hash would be one key, as in Pinot.

Floating-point NaNs: under ``NONE`` every NaN is one key (Java's ``Double.equals``); MD5 and MURMUR3 hash the raw
bits, as Pinot does. Hashes only ever meet hashes computed by the same process (a restart rebuilds the key map
from segments and snapshots of valid docs, never from stored hashes), so nothing persistent depends on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.config.schema import DataType, Schema
from cuvee.config.sections import HASH_FUNCTIONS
from cuvee.query.execute import run_sql
from cuvee.query.hash_functions import murmur3_128
from cuvee.upsert.keys import Keys

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_WIDTHS = {DataType.INT: 4, DataType.BOOLEAN: 4, DataType.FLOAT: 4, DataType.LONG: 8, DataType.TIMESTAMP: 8,
           DataType.DOUBLE: 8}  # the fixed-width types and their bytes; STRING, JSON and BYTES are variable
_HEX = np.zeros(256, np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint8)


@dataclass(frozen=True)
class KeyColumn:
    """One primary-key column: its name, Pinot data type, and the value a null stands for."""

    name: str
    data_type: DataType
    null_value: Any

    @property
    def width(self) -> int | None:
        """Bytes of a value, None for a variable-width type."""
        return _WIDTHS.get(self.data_type)


class KeyHasher:
    """A table's primary keys (``columns``, in the schema's ``primaryKeyColumns`` order) as ``Keys``, by
    ``hash_function`` (``NONE``, ``MD5`` or ``MURMUR3``)."""

    def __init__(self, columns: Sequence[KeyColumn], hash_function: str = "NONE") -> None:
        if not columns:
            raise ValueError("a primary key needs at least one column")
        if hash_function not in HASH_FUNCTIONS:
            raise ValueError(f"hashFunction {hash_function!r} is not one of {', '.join(HASH_FUNCTIONS)}")
        self.columns = tuple(columns)
        self.hash_function = hash_function
        widths = [c.width for c in self.columns]
        self._fixed = all(w is not None for w in widths)
        self._fixed_width = sum(w or 0 for w in widths)

    @classmethod
    def of(cls, schema: Schema, hash_function: str = "NONE") -> KeyHasher:
        """The hasher of ``schema``'s primary key."""
        columns = [schema.column(name) for name in schema.primary_key_columns]
        return cls([KeyColumn(c.name, c.data_type, c.null_value) for c in columns], hash_function)

    @property
    def exact_by_index(self) -> bool:
        """Whether the index alone is the key (``NONE`` over at most 8 bytes of fixed-width columns)."""
        return self.hash_function == "NONE" and self._fixed and self._fixed_width <= 8

    def keys(self, rows: pa.Table | pa.RecordBatch) -> Keys:
        """The key of each row of ``rows``."""
        n = rows.num_rows
        if self.hash_function != "NONE":
            first, second = self._hash128(self.key_bytes(rows)) if n else (np.zeros(0, np.uint64),) * 2
            return Keys(first, pa.array(second, pa.uint64()))
        if self._fixed:
            words = [_word(_plain(rows.column(c.name)), c, canonical_nan=True) for c in self.columns]
            if self._fixed_width <= 8:
                return Keys(_mix(_packed(words, [c.width or 0 for c in self.columns])))
            return Keys(_folded(words), self._fixed_bytes(words, n))
        exact = self.key_bytes(rows)
        index = murmur3_128(exact)[0] if n else np.zeros(0, np.uint64)
        return Keys(index, exact)

    def key_bytes(self, rows: pa.Table | pa.RecordBatch) -> pa.Array:
        """Pinot's bytes of each row's key (``PrimaryKey.asBytes``): fixed-size binary when every key column has a
        fixed width, else large binary."""
        n = rows.num_rows
        arrays = [_plain(rows.column(c.name)) for c in self.columns]
        if self._fixed:
            return self._fixed_bytes([_word(a, c, canonical_nan=False) for a, c in zip(arrays, self.columns)], n)
        if len(self.columns) == 1:
            return _variable(arrays[0], self.columns[0])
        return self._composite(arrays, n)

    def _fixed_bytes(self, words: Sequence[np.ndarray], n: int) -> pa.Array:
        """Fixed-width columns' values, big-endian, side by side: one fixed-size binary value per row."""
        width = self._fixed_width
        matrix = np.empty((n, width), np.uint8)
        at = 0
        for word, column in zip(words, self.columns):
            w = column.width or 0
            matrix[:, at:at + w] = _big_endian(word)[:, 8 - w:]
            at += w
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(matrix.tobytes())])

    def _composite(self, arrays: Sequence[pa.Array], n: int) -> pa.Array:
        """Several columns, one at least of variable width: each value in turn, a variable one after its length
        (4 bytes, big-endian). Built by scattering each column's bytes to their places in every row at once."""
        parts: list[tuple[int, np.ndarray, np.ndarray | None, np.ndarray | None]] = []  # (width, bytes, starts, lens)
        row_len = np.zeros(n, np.int64)
        for array, column in zip(arrays, self.columns):
            if column.width is not None:
                w = column.width
                parts.append((w, _big_endian(_word(array, column, canonical_nan=False))[:, 8 - w:], None, None))
                row_len += w
                continue
            values = _variable(array, column)
            offsets = np.frombuffer(values.buffers()[1], np.int64)[values.offset:values.offset + n + 1]
            data = values.buffers()[2]
            raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
            lens = np.diff(offsets)
            if (lens > np.iinfo(np.int32).max).any():
                raise ValueError(f"primary key column {column.name!r}: a value longer than 2 GiB")
            parts.append((0, raw[offsets[0]:offsets[-1]], offsets, lens))
            row_len += 4 + lens
        bounds = np.zeros(n + 1, np.int64)
        np.cumsum(row_len, out=bounds[1:])
        out = np.empty(int(bounds[-1]), np.uint8)
        at = bounds[:-1].copy()  # where the next column's bytes go in each row
        for width, data, offsets, lens in parts:
            if offsets is None or lens is None:
                out[at[:, None] + np.arange(width)] = data
                at += width
                continue
            out[at[:, None] + np.arange(4)] = _big_endian(lens.astype(np.uint64))[:, 4:]
            at += 4
            out[np.repeat(at - offsets[:-1], lens) + np.arange(offsets[0], offsets[-1])] = data
            at += lens
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n,
                                                [None, pa.py_buffer(bounds.tobytes()), pa.py_buffer(out.tobytes())])

    def _hash128(self, data: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """The 128-bit hash of each row's bytes as two words: its bytes 0-7 and 8-15, each read little-endian."""
        if self.hash_function == "MURMUR3":
            return murmur3_128(data)
        hex_digests = run_sql("SELECT md5(k) AS h FROM upsert_keys", "upsert_keys",
                              pa.table({"k": data.cast(pa.large_binary())})).column("h")
        hex_digests = hex_digests.combine_chunks().cast(pa.large_string())
        offsets = np.frombuffer(hex_digests.buffers()[1], np.int64)[hex_digests.offset:hex_digests.offset + 2]
        chars = np.frombuffer(hex_digests.buffers()[2], np.uint8)[offsets[0]:offsets[0] + 32 * len(data)]
        nibbles = _HEX[chars].reshape(len(data), 16, 2)
        digest = np.ascontiguousarray(nibbles[:, :, 0] << 4 | nibbles[:, :, 1]).view("<u8")
        return digest[:, 0].copy(), digest[:, 1].copy()


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array, dictionary-decoded: a key hashes the same however its segment stores it."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _filled(array: pa.Array, column: KeyColumn) -> pa.Array:
    """``array`` in the column's Arrow type, nulls replaced by the column's null value."""
    kind = column.data_type.arrow_type()
    if pa.types.is_timestamp(array.type) and array.type != kind:
        array = array.cast(pa.timestamp("ms", tz=array.type.tz)).cast(pa.int64()).cast(kind)
    elif array.type != kind:
        array = array.cast(kind)
    return array.fill_null(pa.scalar(column.null_value, kind)) if array.null_count else array


def _word(array: pa.Array, column: KeyColumn, *, canonical_nan: bool) -> np.ndarray:
    """A fixed-width column's values as the raw bits of Pinot's value, zero-extended to uint64."""
    filled = _filled(array, column)
    kind = column.data_type
    if kind is DataType.BOOLEAN:
        return np.asarray(filled.to_numpy(zero_copy_only=False), bool).astype(np.uint64)
    if kind is DataType.TIMESTAMP:
        filled = filled.cast(pa.int64())
    values = filled.to_numpy(zero_copy_only=False)
    if kind in (DataType.FLOAT, DataType.DOUBLE) and canonical_nan:
        values = np.where(np.isnan(values), values.dtype.type(np.nan), values)
    if kind in (DataType.INT, DataType.FLOAT):
        return values.view(np.uint32).astype(np.uint64)
    return np.ascontiguousarray(values).view(np.uint64)


def _variable(array: pa.Array, column: KeyColumn) -> pa.Array:
    """A variable-width column's values as large binary (a string's UTF-8 bytes)."""
    return _filled(array, column).cast(pa.large_binary())


def _big_endian(words: np.ndarray) -> np.ndarray:
    """Each uint64 as its 8 bytes, most significant first: an (n, 8) array."""
    return words.astype(">u8").view(np.uint8).reshape(len(words), 8)


def _packed(words: Sequence[np.ndarray], widths: Sequence[int]) -> np.ndarray:
    """Fixed-width values that fit in 64 bits side by side in one word (their big-endian bytes, read as one)."""
    out = np.zeros(len(words[0]), np.uint64)
    for word, width in zip(words, widths):
        out = (out << np.uint64(8 * width)) | word if width < 8 else word
    return out


def _folded(words: Sequence[np.ndarray]) -> np.ndarray:
    """Several columns' words mixed into one 64-bit hash, each column in its place."""
    out: np.ndarray | None = None
    for word in words:
        hashed = _mix(word)
        out = hashed if out is None else _mix(out * _GOLDEN ^ hashed)
    assert out is not None
    return out


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over a uint64 array: a bijection that spreads every input bit over the output."""
    with np.errstate(over="ignore"):
        x = values + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
