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
