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


def test_integer_keys_hash_in_numpy_without_collisions_and_whatever_their_width() -> None:
    ids = np.arange(-50_000, 50_000, dtype=np.int64)
    hashes = key_hashes(pa.table({"id": ids}), ["id"])
    assert hashes.dtype == np.uint64 and len(np.unique(hashes)) == len(ids)  # a bijection: no two ids collide
    narrow = pa.table({"id": pa.array(ids[:100], pa.int32())})
    assert (key_hashes(narrow, ["id"]) == hashes[:100]).all()
    encoded = pa.table({"id": pa.array(ids[:100]).dictionary_encode()})
    assert (key_hashes(encoded, ["id"]) == hashes[:100]).all()
    with_null = pa.table({"id": pa.array([1, None, 1, None])})
    got = key_hashes(with_null, ["id"])
    assert got[0] == got[2] and got[1] == got[3] and got[0] != got[1]


def test_composite_integer_keys_depend_on_every_column_and_its_place() -> None:
    rows = pa.table({"a": [1, 1, 2, 2, 1], "b": [1, 2, 1, 2, 1]})
    hashes = key_hashes(rows, ["a", "b"]).tolist()
    assert len(set(hashes[:4])) == 4 and hashes[0] == hashes[4]
    swapped = key_hashes(rows, ["b", "a"]).tolist()
    assert swapped[1] != hashes[1]  # (1, 2) and (2, 1) are different keys
