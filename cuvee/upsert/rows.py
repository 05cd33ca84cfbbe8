"""A batch of decoded rows as the key map's ``Versions``: keys, comparison values, delete flags. Pure.

Comparison values: the first comparison column (``upsertConfig.comparisonColumns``, else the time column) that is
not null in the row: int64 when every comparison column is an integer or TIMESTAMP (epoch milliseconds; exact over
the whole range), float64 otherwise (``comparison_dtype`` says which, for the key map). With several
comparison columns Pinot compares the column each new row sets against the same column of the stored version; here
they are folded into one value, which matches Pinot when the columns share a scale (the usual case: several
timestamps). A row whose comparison columns are all null compares as the smallest value (it loses against any
stored version). A null delete flag is false.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.upsert.hashing import KeyHasher
from cuvee.upsert.keymap import INT_SMALLEST, Versions


def comparison_dtype(types: Sequence[pa.DataType]) -> type:
    """int64 when every comparison column is an integer or a timestamp, else float64."""
    exact = all(pa.types.is_integer(t) or pa.types.is_timestamp(t) for t in types)
    return np.int64 if exact else np.float64


def versions_of(rows: pa.Table | pa.RecordBatch, primary_key: KeyHasher, comparison: Sequence[str],
                delete_column: str | None, first_doc: int) -> Versions:
    """``rows`` (docs ``first_doc``, ``first_doc + 1``, ...) as key-map input, their keys by ``primary_key``."""
    n = rows.num_rows
    columns = []
    for name in comparison:
        column = rows.column(name)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
        columns.append(column)
    dtype = comparison_dtype([c.type for c in columns])
    values = np.full(n, INT_SMALLEST if dtype is np.int64 else -np.inf, dtype)
    unset = np.ones(n, bool)
    for column in columns:
        numbers = column.cast(pa.int64() if dtype is np.int64 else pa.float64()).to_numpy(zero_copy_only=False)
        present = unset & np.asarray(column.is_valid())
        if dtype is np.float64:
            present &= ~np.isnan(numbers)
        values[present] = numbers[present]
        unset &= ~present
    deletes = None
    if delete_column is not None:
        flags = rows.column(delete_column)
        deletes = np.asarray(pc.fill_null(flags, False).to_numpy(zero_copy_only=False), bool)
    return Versions(primary_key.keys(rows), values, np.arange(first_doc, first_doc + n, dtype=np.int32),
                    deletes)
