"""Pushed segments: balanced by segment count, never two replicas on one server, re-pushes keep their servers."""

from __future__ import annotations

from collections import Counter

import pytest

from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.offline_assignment import assign_offline_segment, place_offline_segments, replicas
from cuvee.cluster.records import IdealState, SegmentState


def test_segments_spread_evenly_with_distinct_replicas() -> None:
    ideal = place_offline_segments(IdealState("t_OFFLINE"), [f"s{i}" for i in range(30)], 2, ["a", "b", "c"])
    per_server = Counter(inst for replicas in ideal.segments.values() for inst in replicas)
    assert sorted(per_server.values()) == [20, 20, 20]
    assert all(len(set(r)) == 2 and set(r.values()) == {SegmentState.ONLINE} for r in ideal.segments.values())


def test_a_repush_keeps_its_servers_and_replaces_only_ineligible_ones() -> None:
    ideal = IdealState("t_OFFLINE").with_segments_in("s", ["a", "b"], SegmentState.ONLINE)
    assert assign_offline_segment(ideal, "s", 2, ["a", "b", "c"]) == ("a", "b")
    assert assign_offline_segment(ideal, "s", 2, ["a", "c", "d"]) in {("a", "c"), ("a", "d")}


def test_too_few_servers() -> None:
    with pytest.raises(AssignmentError, match="only 1 eligible"):
        assign_offline_segment(IdealState("t_OFFLINE"), "s", 2, ["a"])


def test_a_dim_tables_segments_go_to_every_eligible_server() -> None:
    servers = ["a", "b", "c"]
    assert replicas(2, False, servers) == 2
    assert replicas(2, True, servers) == 3 and replicas(1, True, ["a", "a"]) == 1
    ideal = place_offline_segments(IdealState("d_OFFLINE"), ["s0", "s1"], replicas(1, True, servers), servers)
    assert {name: sorted(r) for name, r in ideal.segments.items()} == {"s0": servers, "s1": servers}


def test_a_dim_table_without_an_eligible_server_is_refused_like_any_table() -> None:
    assert replicas(3, True, []) == 1
    with pytest.raises(AssignmentError, match="only 0 eligible"):
        assign_offline_segment(IdealState("d_OFFLINE"), "s", replicas(3, True, []), [])


def test_segments_of_one_partition_share_the_partitions_servers_whatever_the_table() -> None:
    servers = ["a", "b", "c", "d"]
    orders = place_offline_segments(IdealState("orders_OFFLINE"), ["o1", "o2", "o3"], 2, servers,
                                    {"o1": 1, "o2": 1, "o3": 3})
    customers = place_offline_segments(IdealState("customers_OFFLINE"), ["c1", "c3", "cx"], 2, servers,
                                       {"c1": 1, "c3": 3})  # cx spans partitions: placed by load
    assert set(orders.segments["o1"]) == set(orders.segments["o2"]) == set(customers.segments["c1"]) == {"c", "d"}
    assert set(orders.segments["o3"]) == set(customers.segments["c3"]) == {"c", "d"}  # (3 * 2) % 4 = 2: c, d
    assert len(customers.segments["cx"]) == 2
