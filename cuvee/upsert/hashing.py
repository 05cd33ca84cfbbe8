"""Primary keys to the 64-bit hashes the key map holds. Pure and vectorised: no Python loop per row.

One key of one or more columns (a composite key) becomes one ``uint64`` for a whole batch at a time. Keys made of
integer columns (the common case: ids) are hashed in numpy with SplitMix64's finaliser, a bijection on 64 bits, so
distinct non-null single-column integer keys never collide (a null key shares its hash with one integer), and a batch of 10,000 keys costs microseconds (a DuckDB call
costs milliseconds, most of the upsert ingest overhead it was). Other keys (strings, composites with a string) use
DuckDB's vectorised ``hash``. A table's key columns have fixed types, so one table always takes one path. Hashes
only ever meet hashes computed by the same process (a restart rebuilds the key map from segments and snapshots of
valid docs, never from stored hashes), so a DuckDB upgrade that changed its hash function would change nothing
persistent. Two distinct keys sharing a hash would be taken for one key: with 64 bits that is about one chance in
400,000 for a partition of ten million keys, and keys crafted to collide need write access to the table's stream.
Pinot's ``hashFunction`` setting is accepted; every value maps to this hash.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from cuvee.query.execute import run_sql

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC908)  # what a null integer key column contributes (all nulls are one key)


def key_hashes(rows: pa.Table | pa.RecordBatch, columns: Sequence[str]) -> np.ndarray:
    """The hash of each row's primary key (``columns``, in the schema's ``primaryKeyColumns`` order)."""
    if not columns:
        raise ValueError("a primary key needs at least one column")
    if rows.num_rows == 0:
        return np.zeros(0, np.uint64)
    arrays = [_plain(rows.column(c)) for c in columns]
    if all(pa.types.is_integer(a.type) for a in arrays):
        return _integer_hashes(arrays)
    keys = pa.table({f"k{i}": a for i, a in enumerate(arrays)})
    args = ", ".join(f"k{i}" for i in range(len(columns)))
    out = run_sql(f"SELECT hash({args}) AS h FROM upsert_keys", "upsert_keys", keys)
    return out.column("h").to_numpy().astype(np.uint64, copy=False)


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One array, dictionary-decoded: a key hashes the same however its segment stores it."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _integer_hashes(arrays: Sequence[pa.Array]) -> np.ndarray:
    """Integer columns (any width; a value hashes the same as int8 or int64) folded into one hash per row."""
    out: np.ndarray | None = None
    for array in arrays:
        values = array.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False).view(np.uint64)
        hashed = _mix(values)
        if array.null_count:
            hashed[~np.asarray(array.is_valid())] = _NULL
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
