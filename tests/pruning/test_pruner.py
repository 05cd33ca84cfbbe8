"""The pure pruner: a segment is ruled out only when its min/max, partitions or bloom filter prove no row passes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.pruning import SegmentFacts, Work, may_match, pruned
from cuvee.pruning.pruner import BLOOM_COST
from cuvee.segment.indexes import value_hashes
from cuvee.segment.metadata import ColumnMetadata
from cuvee.segment.partitioning import SegmentPartitions
from tests.pruning.helpers import where_of


def column(name: str, data_type: str, low: Any, high: Any, *, nulls: int = 0, single: bool = True,
           bloom: bool = False) -> ColumnMetadata:
    return ColumnMetadata(name, data_type, single, 10, low, high, False, nulls, True, False, False, bloom, 0, 100, 1)


FACTS = SegmentFacts(100, {
    "i": column("i", "INT", 10, 20),
    "l": column("l", "LONG", 2**40, 2**40 + 5),
    "d": column("d", "DOUBLE", -1.5, 2.5),
    "s": column("s", "STRING", "bb", "dd"),
})


def hash_of(value: Any) -> int:
    return int(value_hashes(pa.array([value]))[0])


def keeps(condition: str, facts: SegmentFacts = FACTS) -> bool:
    predicate = where_of(condition)
    assert predicate is not None, condition
    return may_match(predicate, facts)


def test_min_max_ranges() -> None:
    for condition in ("i = 10", "i = 20", "i < 11", "i <= 10", "i > 19", "i >= 20", "i BETWEEN 0 AND 10",
                      "i IN (1, 15)", "d = 2.5", "d > 2", "d < -1.4", "s = 'cc'", "s >= 'dd'", "s < 'bba'",
                      "l = 1099511627776", "i = 15.5", "d > 2.5", "d < -1.5"):  # a decimal at a bound: unsure
        assert keeps(condition), condition
    for condition in ("i = 9", "i = 21", "i < 10", "i <= 9", "i > 20", "i >= 21", "i BETWEEN 21 AND 30",
                      "i IN (1, 2, 30)", "d = 3", "d > 2.5000001", "d < -1.5000001", "s = 'a'", "s > 'dd'", "s < 'bb'",
                      "l = 1099511627775", "i = 20.5"):
        assert not keeps(condition), condition


def test_connectives() -> None:
    assert keeps("i = 15 AND s = 'cc'")
    assert not keeps("i = 15 AND s = 'zz'")
    assert keeps("i = 99 OR s = 'cc'")
    assert not keeps("i = 99 OR s = 'zz'")
    assert not keeps("(i = 99 OR s = 'zz') AND abs(d) > 1")  # an unknown part of an AND never keeps alone


def test_doubt_keeps_the_segment() -> None:
    assert keeps("i = '99'")  # a string against a number: DuckDB casts
    assert keeps("s = 5")
    assert keeps("m2 = 99")  # a column the segment does not store (added later: read as its default)
    with_nulls = SegmentFacts(100, {"i": column("i", "INT", 10, 20, nulls=3)})
    assert keeps("i = 99", with_nulls)  # a NULL reads as the column's default null value
    multi = SegmentFacts(100, {"i": column("i", "INT", 10, 20, single=False)})
    assert keeps("i = 99", multi)
    nan = SegmentFacts(100, {"d": column("d", "DOUBLE", 1.0, "NaN")})
    assert keeps("d > 1000", nan)  # DuckDB sorts NaN above every number
    timestamps = SegmentFacts(100, {"i": column("i", "TIMESTAMP", 10, 20)})
    assert keeps("i = 99", timestamps)


def test_empty_segment_matches_nothing() -> None:
    assert not keeps("i = 15", SegmentFacts(0, FACTS.columns))


def test_bloom_filter_rules_out_values() -> None:
    probed: list[tuple[str, Any]] = []
    present = {hash_of(12): 12, hash_of("cc"): "cc", hash_of(13): 13, hash_of(99): 99, hash_of("bz"): "bz",
               hash_of("cd"): "cd"}

    def bloom(name: str, hashes: np.ndarray) -> bool:
        values = [present[h] for h in hashes.tolist()]
        probed.extend((name, v) for v in values)
        return any(v in (12, "cc") for v in values)

    columns = {"i": column("i", "INT", 10, 20, bloom=True), "s": column("s", "STRING", "bb", "dd", bloom=True),
               "d": column("d", "DOUBLE", 0.0, 9.0, bloom=True)}
    facts = SegmentFacts(100, columns, bloom=bloom)
    assert keeps("i = 12", facts) and keeps("s IN ('bz', 'cc')", facts)
    assert not keeps("i = 13", facts) and not keeps("s IN ('bz', 'cd')", facts)
    assert not keeps("i IN (13, 99)", facts)
    assert ("i", 99) not in probed  # outside min/max: never probed
    assert keeps("i > 13", facts)  # ranges never ask the bloom filter
    assert keeps("d = 3", facts)  # float columns: not probed


def test_partitions_rule_out_values() -> None:
    facts = SegmentFacts(100, {"l": column("l", "LONG", 0, 100)},
                         partitions=SegmentPartitions("l", "Modulo", 4, (1,)))
    assert keeps("l = 5", facts) and keeps("l IN (2, 9)", facts)
    assert not keeps("l = 6", facts) and not keeps("l IN (2, 8)", facts)
    assert keeps("l = 6.0", facts)  # a float: the partition function hashes the value's text, unsure
    murmur = SegmentFacts(100, {"s": column("s", "STRING", "a", "z")},
                          partitions=SegmentPartitions("s", "Murmur", 8, (3,)))
    from cuvee.segment.partitioning import PartitionSpec, partitions
    import pyarrow as pa
    values = [f"k{n}" for n in range(40)]
    parts = partitions(pa.array(values), PartitionSpec("s", "Murmur", 8)).tolist()
    inside = [v for v, p in zip(values, parts) if p == 3]
    outside = [v for v, p in zip(values, parts) if p != 3]
    assert inside and outside
    assert keeps(f"s = '{inside[0]}'", murmur)
    assert not keeps(f"s = '{outside[0]}'", murmur)


def test_pruned_lists_the_ruled_out() -> None:
    predicate = where_of("i = 25")
    other = SegmentFacts(100, {"i": column("i", "INT", 21, 30)})
    assert pruned(predicate, [("a", FACTS), ("b", other), ("c", None)]) == ["a"]
    assert pruned(None, [("a", FACTS)]) == []


def test_decimal_literals_allow_for_duckdbs_casts() -> None:
    """DuckDB's DECIMAL -> DOUBLE/FLOAT casts are not correctly rounded: a literal within a few ulps (of the column's
    precision) of a bound keeps the segment."""
    facts = SegmentFacts(100, {"d": column("d", "DOUBLE", 0.5143972981506163, 0.9),
                               "f": column("f", "FLOAT", 0.0, 0.8500000238418579),
                               "g": column("g", "FLOAT", 240.70285034179688, 300.0)})
    for condition in ("d <= 0.514397298150616225", "d = 0.514397298150616225", "f > 0.8500000238418579",
                      "g = 240.702858", "g <= 240.702858"):
        assert keeps(condition, facts), condition
    for condition in ("d < 0.5143", "f > 0.850001", "g < 240.7028"):
        assert not keeps(condition, facts), condition


def test_a_query_hashes_each_in_list_once_and_its_work_is_bounded() -> None:
    calls: list[int] = []

    def bloom(name: str, hashes: np.ndarray) -> bool:
        calls.append(len(hashes))
        return False

    facts = SegmentFacts(100, {"s": column("s", "STRING", "a", "z", bloom=True)}, bloom=bloom)
    predicate = where_of("s IN ('b', 'c', 'd')")
    assert predicate is not None
    work = Work()
    assert not any(may_match(predicate, facts, work) for _ in range(10))
    assert calls == [3] * 10  # one probe a segment, of every value at once
    assert len(work._hashes) == 1  # hashed once for the query
    # a budget for two segments' checks (3 values and a probe each): the third segment is kept unprobed
    small = Work(2 * (3 + BLOOM_COST))
    calls.clear()
    assert [may_match(predicate, facts, small) for _ in range(3)] == [False, False, True]
    assert calls == [3, 3]


def test_an_in_list_of_64_values_or_more_prunes_by_membership_partitions_and_bloom() -> None:
    """A long IN list (planned as raw text: ``cuvee.query.prescan``) is read back and checked value by value:
    a segment whose [min, max] falls between its values, whose partitions none of them falls in, or whose bloom
    filter rules them all out is skipped."""
    steps = ", ".join(str(v) for v in range(0, 1000, 25))  # 0, 25, ... : none in [10, 20]
    assert not keeps(f"i IN ({steps}, {', '.join(str(v) for v in range(1000, 1040))})")  # 80 values
    assert keeps(f"i IN ({steps}, 15, {', '.join(str(v) for v in range(1000, 1040))})")
    strings = ", ".join(f"'k{n:03}'" for n in range(100))  # 'k000'...: all above 'dd'
    assert not keeps(f"s IN ({strings})") and keeps(f"s IN ({strings}, 'cc')")
    partitioned = SegmentFacts(100, {"l": column("l", "LONG", 0, 1000)},
                               partitions=SegmentPartitions("l", "Modulo", 4, (1,)))
    evens = ", ".join(str(v) for v in range(0, 200, 2))
    assert not keeps(f"l IN ({evens})", partitioned) and keeps(f"l IN ({evens}, 9)", partitioned)
    probed: list[int] = []

    def bloom(name: str, hashes: np.ndarray) -> bool:
        probed.append(len(hashes))
        return False

    blooming = SegmentFacts(100, {"i": column("i", "INT", 0, 50, bloom=True)}, bloom=bloom)
    assert not keeps(f"i IN ({', '.join(str(v) for v in range(40, 140))})", blooming)
    assert probed == [11]  # only the values inside [min, max] are probed


def test_a_100k_value_in_list_prunes_within_a_bounded_time() -> None:
    """Past ``MAX_IN_VALUES`` distinct values the list prunes by its range; reading it and checking 1,000
    segments stays far below a query's time."""
    import time

    from cuvee.pruning.predicate import MAX_IN_VALUES

    values = ", ".join(str(v) for v in range(100, 100 + 3 * 100_000, 3))
    began = time.perf_counter()
    predicate = where_of(f"i IN ({values})")
    segments = [(n, SegmentFacts(100, {"i": column("i", "INT", n * 10, n * 10 + 5)})) for n in range(1000)]
    out = pruned(predicate, segments)
    took = time.perf_counter() - began
    assert out == list(range(10))  # below the list's smallest value
    assert MAX_IN_VALUES < 100_000 and took < 2.0, took
    shorter = ", ".join(str(v) for v in range(100, 100 + 3 * MAX_IN_VALUES, 3))  # membership, by bisection
    began = time.perf_counter()
    out = pruned(where_of(f"i IN ({shorter})"), segments)
    assert time.perf_counter() - began < 1.0
    # [n*10, n*10 + 5] holds a multiple of 3 past 100 + ... unless it falls in a gap: every segment checked
    expected = [n for n, f in segments if not any(100 <= v <= 100 + 3 * (MAX_IN_VALUES - 1) and (v - 100) % 3 == 0
                                                  for v in range(n * 10, n * 10 + 6))]
    assert out == expected and len(expected) > 10


def test_an_in_lists_partitions_are_computed_once_per_query() -> None:
    """The broker checks every routed segment's partitions: the list's values are hashed once for the query."""
    import pyarrow as pa

    from cuvee.segment.partitioning import PartitionSpec, partitions

    values = [f"k{n}" for n in range(100)]
    of = partitions(pa.array(values), PartitionSpec("s", "Murmur", 8)).tolist()
    predicate = where_of(f"s IN ({', '.join(repr(v) for v, p in zip(values, of) if p in (1, 2))})")
    assert predicate is not None
    work = Work()
    segments = [SegmentFacts(-1, {"s": column("s", "STRING", None, None)},
                             partitions=SegmentPartitions("s", "Murmur", 8, (p,))) for p in range(8)] * 20
    assert [may_match(predicate, facts, work) for facts in segments[:8]] == [p in (1, 2) for p in range(8)]
    assert all(may_match(predicate, facts, work) == (facts.partitions.single in (1, 2)) for facts in segments)
    assert len(work._partitions) == 1
    odd = SegmentFacts(100, {"s": column("s", "STRING", None, None)},
                       partitions=SegmentPartitions("s", "Modulo", 8, (3,)))  # Modulo of strings: unsure
    assert may_match(predicate, odd, work)
