"""What queries read of upsert segments: only valid rows, from the cache while a committed segment's valid docs stay
the same version, through the scan's filter column otherwise."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from pyroaring import FrozenBitMap

from cuvee.upsert.reads import VALID_COLUMN, ValidRowCache, ValidRows, scan_tables, valid_mask


class _Copy:
    """A segment copy as the views name it (held weakly by the cache)."""


def _rows(n: int) -> pa.Table:
    return pa.table({"id": np.arange(n), "v": np.arange(n) * 10})


def _bits(docs: list[int] | range) -> FrozenBitMap:
    return FrozenBitMap(docs)


def test_all_valid_and_none_valid_segments_need_no_filter() -> None:
    cache, table = ValidRowCache(), _rows(5)
    whole = cache.read("s", _Copy(), table, _bits(range(5)), committed=False)
    assert whole.table is table and not whole.masked
    empty = cache.read("s", _Copy(), table, _bits([]), committed=True)
    assert empty.table.num_rows == 0 and not empty.masked
    assert cache.hits == cache.misses == 0


def test_a_committed_segment_is_taken_once_per_version_of_its_valid_docs() -> None:
    cache, table, copy = ValidRowCache(), _rows(10), _Copy()
    bits = _bits([1, 4, 9])
    first = cache.read("s", copy, table, bits, committed=True)
    assert first.table.column("id").to_pylist() == [1, 4, 9] and not first.masked
    again = cache.read("s", copy, table, bits, committed=True)
    assert again.table is first.table and (cache.hits, cache.misses) == (1, 1)
    moved = cache.read("s", copy, table, bits - _bits([4]), committed=True)  # a key moved: a new version
    assert moved.table.column("id").to_pylist() == [1, 9] and cache.misses == 2
    other = _Copy()  # the segment replaced by another copy with equal bits: not the cached rows
    cache.read("s", other, table, bits - _bits([4]), committed=True)
    assert cache.misses == 3 and cache.nbytes == moved.table.nbytes


def test_the_cache_keeps_within_its_budget_least_recently_read_evicted() -> None:
    table = _rows(1000)
    one = table.take(pa.array(np.arange(0, 1000, 2))).nbytes
    cache = ValidRowCache(budget_bytes=2 * one)
    copies = [_Copy() for _ in range(3)]
    bits = _bits(range(0, 1000, 2))
    for i, copy in enumerate(copies):
        cache.read(f"s{i}", copy, table, bits, committed=True)
    assert cache.nbytes <= 2 * one
    cache.read("s2", copies[2], table, bits, committed=True)
    cache.read("s0", copies[0], table, bits, committed=True)  # evicted first
    assert (cache.hits, cache.misses) == (1, 4)
    off = ValidRowCache(budget_bytes=0)
    masked = off.read("s", copies[0], table, bits, committed=True)
    assert masked.masked and off.nbytes == 0
    with pytest.raises(ValueError):
        ValidRowCache(budget_bytes=-1)


def test_consuming_segments_are_filtered_in_the_scan_and_mixed_reads_share_one_shape() -> None:
    cache = ValidRowCache()
    consuming = cache.read("c", _Copy(), _rows(4), _bits([0, 3, 7]), committed=False)  # doc 7 not published yet
    assert consuming.masked and consuming.table.column(VALID_COLUMN).to_pylist() == [True, False, False, True]
    committed = cache.read("s", _Copy(), _rows(6), _bits([2, 5]), committed=True)
    tables = scan_tables([consuming, committed])
    rows = pa.concat_tables(tables)
    got = duckdb.sql(f'SELECT sum(v), count(*) FROM rows WHERE "{VALID_COLUMN}"').fetchall()
    assert got == [(0 + 30 + 20 + 50, 4)]
    assert scan_tables([committed, ValidRows(_rows(2), False)])[1].column_names == ["id", "v"]
    assert valid_mask(3, _bits([])).to_pylist() == [False, False, False]
