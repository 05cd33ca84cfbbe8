"""Primary keys hash per row, in row order, equal keys equally, composite keys as one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cuvee.upsert.hashing import key_hashes


def test_equal_keys_hash_equally_in_row_order() -> None:
    n = 300_000  # many DuckDB vectors and threads: the order must still be the rows'
    ids = np.arange(n) % 1000
    rows = pa.table({"user": pa.array(np.char.add("u", ids.astype(str))), "region": pa.array(ids % 3)})
    hashes = key_hashes(rows, ["user", "region"])
    assert len(hashes) == n and hashes.dtype == np.uint64
    assert len(np.unique(hashes)) == 1000
    assert (hashes[:1000] == hashes[1000:2000]).all() and (hashes[:1000] == hashes[-1000:]).all()
    first = {int(h): i for i, h in enumerate(hashes[:1000])}
    assert [first[int(h)] for h in hashes[5000:5010]] == list(range(0, 10))


def test_composite_keys_differ_by_any_column() -> None:
    rows = pa.table({"a": ["x", "x", "y", None], "b": [1, 2, 1, 1]})
    hashes = key_hashes(rows, ["a", "b"])
    assert len(set(hashes.tolist())) == 4
    assert key_hashes(rows.slice(0, 0), ["a"]).tolist() == []
    with pytest.raises(ValueError):
        key_hashes(rows, [])
