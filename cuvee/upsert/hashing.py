"""Primary keys to the 64-bit hashes the key map holds. Pure (DuckDB's vectorised ``hash`` over Arrow columns).

One key of one or more columns (a composite key) becomes one ``uint64``, computed for a whole batch in one DuckDB
call (millions of keys per second) rather than per row in Python. Hashes only ever meet hashes computed by the same
process (a restart rebuilds the key map from segments and snapshots of valid docs, never from stored hashes), so a
DuckDB upgrade that changed its hash function would change nothing persistent. Two distinct keys sharing a hash
would be taken for one key: with 64 bits that is about one chance in 400,000 for a partition of ten million keys,
and keys crafted to collide need write access to the table's stream. Pinot's ``hashFunction`` setting is accepted;
every value maps to this hash.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from cuvee.query.execute import run_sql


def key_hashes(rows: pa.Table | pa.RecordBatch, columns: Sequence[str]) -> np.ndarray:
    """The hash of each row's primary key (``columns``, in the schema's ``primaryKeyColumns`` order)."""
    if not columns:
        raise ValueError("a primary key needs at least one column")
    if rows.num_rows == 0:
        return np.zeros(0, np.uint64)
    keys = pa.table({f"k{i}": rows.column(c) for i, c in enumerate(columns)})
    args = ", ".join(f"k{i}" for i in range(len(columns)))
    out = run_sql(f"SELECT hash({args}) AS h FROM upsert_keys", "upsert_keys", keys)
    return out.column("h").to_numpy().astype(np.uint64, copy=False)
