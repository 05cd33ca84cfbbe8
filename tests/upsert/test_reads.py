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


def test_a_committed_segment_is_taken_on_the_second_read_of_a_version_of_its_valid_docs() -> None:
    cache, table, copy = ValidRowCache(), _rows(10), _Copy()
    bits = _bits([1, 4, 9])
    first = cache.read("s", copy, table, bits, committed=True)  # read once: filtered in the scan, not copied
    assert first.masked and first.table.column(VALID_COLUMN).to_pylist().count(True) == 3 and cache.nbytes == 0
    second = cache.read("s", copy, table, bits, committed=True)
    assert second.table.column("id").to_pylist() == [1, 4, 9] and not second.masked
    again = cache.read("s", copy, table, bits, committed=True)
    assert again.table is second.table and (cache.hits, cache.misses) == (1, 2)
    moved = bits - _bits([4])  # a key moved: a new version, filtered until read twice
    assert cache.read("s", copy, table, moved, committed=True).masked
    assert cache.read("s", copy, table, moved, committed=True).table.column("id").to_pylist() == [1, 9]
    other = _Copy()  # the segment replaced by another copy with equal bits: not the cached rows
    assert cache.read("s", other, table, moved, committed=True).masked
    cache.forget("s")
    assert cache.nbytes == 0 and cache.read("s", other, table, moved, committed=True).masked


def test_the_cache_keeps_within_its_budget_least_recently_read_evicted() -> None:
    table = _rows(1000)
    one = table.take(pa.array(np.arange(0, 1000, 2))).nbytes
    cache = ValidRowCache(budget_bytes=2 * one)
    copies = [_Copy() for _ in range(3)]
    bits = _bits(range(0, 1000, 2))
    for i, copy in enumerate(copies):
        for _ in range(2):
            cache.read(f"s{i}", copy, table, bits, committed=True)
    assert cache.nbytes == 2 * one
    assert not cache.read("s2", copies[2], table, bits, committed=True).masked  # kept
    assert cache.read("s0", copies[0], table, bits, committed=True).masked  # evicted first: read afresh
    assert not ValidRowCache(budget_bytes=one - 1).read("s", copies[0], table, bits, committed=True).table.num_rows \
        == 500  # rows that would not fit are never copied: filtered in the scan
    off = ValidRowCache(budget_bytes=0)
    masked = off.read("s", copies[0], table, bits, committed=True)
    assert masked.masked and off.nbytes == 0
    with pytest.raises(ValueError):
        ValidRowCache(budget_bytes=-1)


def test_dictionary_columns_are_charged_their_indices_and_dead_segments_are_dropped() -> None:
    words = pa.array([f"word-{i % 50}" * 20 for i in range(1000)]).dictionary_encode()
    table = pa.table({"w": words})
    cache, copy = ValidRowCache(), _Copy()
    bits = _bits(range(0, 1000, 4))
    for _ in range(2):
        got = cache.read("s", copy, table, bits, committed=True)
    assert got.table.num_rows == 250 and cache.nbytes == got.table.column("w").chunk(0).indices.nbytes
    del copy, got
    cache.read("t", (other := _Copy()), table, bits, committed=True)
    cache.read("t", other, table, bits, committed=True)  # a new entry: the dead segment's goes
    assert cache.nbytes == 250 * 4


def test_consuming_segments_are_filtered_in_the_scan_and_mixed_reads_share_one_shape() -> None:
    cache = ValidRowCache()
    consuming = cache.read("c", _Copy(), _rows(4), _bits([0, 3, 7]), committed=False)  # doc 7 not published yet
    assert consuming.masked and consuming.table.column(VALID_COLUMN).to_pylist() == [True, False, False, True]
    committed = cache.read("s", _Copy(), _rows(6), _bits([2, 5]), committed=True)
    tables = scan_tables([consuming, committed])
    rows = pa.concat_tables(tables)
    got = duckdb.sql(f'SELECT sum(v), count(*) FROM rows WHERE "{VALID_COLUMN}"').fetchall()
    assert got == [(0 + 30 + 20 + 50, 4)]
    clean = scan_tables([ValidRows(_rows(1), False), ValidRows(_rows(2), False)])
    assert [t.column_names for t in clean] == [["id", "v"], ["id", "v"]]
    mixed = scan_tables([committed, ValidRows(_rows(2), False)])
    assert mixed[1].column(VALID_COLUMN).to_pylist() == [True, True]
    assert valid_mask(3, _bits([])).to_pylist() == [False, False, False]
