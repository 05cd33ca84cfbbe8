"""Placing a join of two tables partitioned alike on the servers (``cuvee.broker.colocation``). Pure: each
partition goes to one live server holding it ONLINE for both tables; anything that could lose or double rows
leaves the join to the broker (None)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from cuvee.broker.cluster_view import TableEntry
from cuvee.broker.colocation import place_join
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.query import TableInfo
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions

ON, OFF = SegmentState.ONLINE, SegmentState.OFFLINE
SPEC = PartitionSpec("k", "Murmur", 4)


def _entry(name: str, segments: dict[str, tuple[tuple[int, ...], dict[str, SegmentState]]],
           spec: PartitionSpec | None = SPEC, **extra: object) -> TableEntry:
    view = ExternalView(name, {s: replicas for s, (_, replicas) in segments.items()})
    parts = {s: SegmentPartitions("k", "Murmur", 4, p) for s, (p, _) in segments.items()}
    return TableEntry(name, TableInfo(name, ("k",)), pa.schema([("k", pa.string())]), view, partition_spec=spec,
                      partitions=parts, **extra)  # type: ignore[arg-type]


LEFT = _entry("orders_OFFLINE", {"o0": ((0,), {"a": ON, "b": ON}), "o1": ((1,), {"b": ON}),
                                 "o1b": ((1,), {"b": ON}), "empty": ((), {"a": ON})})
RIGHT = _entry("customers_OFFLINE", {"c0": ((0,), {"a": ON, "b": ON}), "c1": ((1,), {"b": ON}),
                                     "c3": ((3,), {"a": ON})})


def test_each_partition_goes_to_one_server_holding_both_sides_and_checks_what_it_holds() -> None:
    placed = place_join(LEFT, "k", RIGHT, "k", {"a", "b"}, True)
    assert placed is not None
    assert placed.servers == {"a": (("o0",), ("c0",)), "b": (("o1", "o1b"), ("c1",))}  # p0 on a (0 % 2), p1 on b
    assert placed.partitions == {"a": (0,), "b": (1,)}
    check = placed.colocation("b")
    assert check.partitions == (1,) and check.columns == {"orders_OFFLINE": "k", "customers_OFFLINE": "k"}
    # only the live holders count: with a down, p0 goes to b
    assert place_join(LEFT, "k", RIGHT, "k", {"b"}, True).servers == {  # type: ignore[union-attr]
        "b": (("o0", "o1", "o1b"), ("c0", "c1"))}


def test_the_join_stays_at_the_broker_when_rows_could_be_missed_or_counted_twice() -> None:
    assert place_join(LEFT, "k", RIGHT, "k", {"a", "b"}, False) is None  # key types differ
    assert place_join(LEFT, "other", RIGHT, "k", {"a", "b"}, True) is None  # not the partition column
    other = dataclasses.replace(RIGHT, partition_spec=PartitionSpec("k", "Murmur", 8))
    assert place_join(LEFT, "k", other, "k", {"a", "b"}, True) is None  # another number of partitions
    spans = _entry("customers_OFFLINE", {"c01": ((0, 1), {"a": ON, "b": ON})})
    assert place_join(LEFT, "k", spans, "k", {"a", "b"}, True) is None  # a segment of two partitions
    stale = dataclasses.replace(RIGHT, partition_spec=PartitionSpec("k", "Murmur", 4),
                                partitions={**RIGHT.partitions, "c1": SegmentPartitions("k", "Modulo", 4, (1,))})
    assert place_join(LEFT, "k", stale, "k", {"a", "b"}, True) is None  # recorded under another function
    unknown = dataclasses.replace(RIGHT, partitions={**RIGHT.partitions, "c1": None})
    assert place_join(LEFT, "k", unknown, "k", {"a", "b"}, True) is None  # partitions never recorded
    nowhere = _entry("customers_OFFLINE", {"c0": ((0,), {"a": OFF}), "c1": ((1,), {"b": ON})})
    assert place_join(LEFT, "k", nowhere, "k", {"a", "b"}, True) is None  # a segment ONLINE nowhere
    apart = _entry("customers_OFFLINE", {"c0": ((0,), {"c": ON}), "c1": ((1,), {"b": ON})})
    assert place_join(LEFT, "k", apart, "k", {"a", "b", "c"}, True) is None  # p0's sides share no server
    assert place_join(dataclasses.replace(LEFT, upsert=True), "k", RIGHT, "k", {"a", "b"}, True) is None
    realtime = dataclasses.replace(LEFT, name="orders_REALTIME")
    assert place_join(realtime, "k", RIGHT, "k", {"a", "b"}, True) is None
    expected = dataclasses.replace(LEFT, expected=frozenset({"o0", "o1", "o1b", "empty", "o9"}))
    assert place_join(expected, "k", RIGHT, "k", {"a", "b"}, True) is None  # o9 expected, in no server's view


def test_a_segment_lineage_hides_is_not_read() -> None:
    hidden = dataclasses.replace(RIGHT, hidden=frozenset({"c1"}))
    placed = place_join(LEFT, "k", hidden, "k", {"a", "b"}, True)
    assert placed is not None and placed.servers["b"] == (("o1", "o1b"), ())
