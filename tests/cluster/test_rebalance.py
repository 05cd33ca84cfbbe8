"""Planning a rebalance of committed segments, and its two make-before-break ideal-state steps. Pure."""

from __future__ import annotations

import pytest

from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.offline_assignment import replicas
from cuvee.cluster.rebalance import add_targets, drop_sources, plan_offline_rebalance, plan_rebalance
from cuvee.cluster.records import IdealState, SegmentState

ON, CONS = SegmentState.ONLINE, SegmentState.CONSUMING


def _ideal(segments: dict[str, dict[str, SegmentState]]) -> IdealState:
    return IdealState("t_REALTIME", segments)


def test_committed_segments_move_to_their_partitions_targets_and_consuming_ones_stay() -> None:
    ideal = _ideal({
        "t__0__0__20261125T1200Z": {"a": ON},
        "t__1__0__20261125T1200Z": {"b": ON},
        "t__2__0__20261125T1200Z": {"a": ON},
        "t__2__1__20261125T1200Z": {"a": CONS},  # moves at its commit
        "other_segment": {"a": ON},  # not an LLC segment: left alone
    })
    moves = plan_rebalance(ideal, 1, {"a", "b", "c"})
    assert [(m.segment, m.current, m.target) for m in moves] == [("t__2__0__20261125T1200Z", ("a",), ("c",))]
    assert plan_rebalance(ideal, 1, {"a", "b"}) == []  # where creation put them
    with pytest.raises(AssignmentError):
        plan_rebalance(ideal, 2, {"a"})


def test_a_move_is_made_before_it_is_broken() -> None:
    ideal = _ideal({"t__2__0__20261125T1200Z": {"a": ON}})
    [move] = plan_rebalance(ideal, 1, {"a", "b", "c"})
    both = add_targets([move])(ideal)
    assert both.segments["t__2__0__20261125T1200Z"] == {"a": ON, "c": ON}
    assert drop_sources([move], {"t__2__0__20261125T1200Z": {"a"}})(both) == both  # c does not serve it yet
    done = drop_sources([move], {"t__2__0__20261125T1200Z": {"a", "c"}})(both)
    assert done.segments["t__2__0__20261125T1200Z"] == {"c": ON}
    changed = _ideal({"t__2__0__20261125T1200Z": {"b": ON}})  # moved by someone else since the plan
    assert add_targets([move])(changed) == changed and drop_sources([move], {})(changed) == changed


def _apply(ideal: IdealState, moves: list) -> dict[str, set[str]]:
    placed = {name: set(replicas) for name, replicas in ideal.segments.items()}
    for move in moves:
        placed[move.segment] = set(move.target)
    return placed


def test_offline_segments_spread_evenly_over_added_servers_moving_as_few_replicas_as_that_takes() -> None:
    ideal = IdealState("s_OFFLINE", {f"s_{i}": {"a": ON, "b": ON} for i in range(6)})
    moves = plan_offline_rebalance(ideal, 2, {"a", "b", "c"})
    placed = _apply(ideal, moves)
    loads = {i: sum(i in r for r in placed.values()) for i in "abc"}
    assert loads == {"a": 4, "b": 4, "c": 4}  # 12 replicas over 3 servers
    assert all(len(r) == 2 for r in placed.values())  # never two replicas on one server
    assert len(moves) == 4 and all(len(set(m.current) - set(m.target)) == 1 for m in moves)  # one replica each
    assert plan_offline_rebalance(IdealState("s_OFFLINE", {n: dict.fromkeys(r, ON) for n, r in placed.items()}),
                                  2, {"a", "b", "c"}) == []  # balanced: nothing more to do


def test_offline_replicas_leave_servers_no_longer_tagged_and_mid_transition_segments_wait() -> None:
    ideal = IdealState("s_OFFLINE", {"s_0": {"old": ON}, "s_1": {"a": ON}, "s_2": {"old": SegmentState.OFFLINE}})
    moves = plan_offline_rebalance(ideal, 1, {"a", "b"})
    assert [(m.segment, m.current, m.target) for m in moves] == [("s_0", ("old",), ("b",))]
    with pytest.raises(AssignmentError):
        plan_offline_rebalance(ideal, 3, {"a", "b"})


def test_an_offline_rebalance_run_again_after_a_stop_trims_the_extra_replicas_and_tops_up_missing_ones() -> None:
    stopped = IdealState("s_OFFLINE", {
        "s_0": {"a": ON, "b": ON, "c": ON},  # phase 1 of a stopped rebalance: old and new replicas together
        "s_1": {"a": ON, "b": ON, "c": ON},
        "s_2": {"a": ON, "b": ON},
        "s_3": {"b": ON},  # short of a replica
    })
    placed = _apply(stopped, plan_offline_rebalance(stopped, 2, {"a", "b", "c"}))
    assert all(len(replicas) == 2 for replicas in placed.values()), placed
    loads = sorted(sum(i in r for r in placed.values()) for i in "abc")
    assert loads[-1] - loads[0] <= 1 and sum(loads) == 8
    assert "b" in placed["s_3"]  # the replica it had stays


def test_a_dim_tables_rebalance_brings_every_segment_to_a_server_added_later() -> None:
    ideal = IdealState("d_OFFLINE", {f"d_{i}": {"a": ON, "b": ON} for i in range(3)})
    servers = {"a", "b", "c"}
    moves = plan_offline_rebalance(ideal, replicas(1, True, servers), servers)
    assert [(m.segment, m.current, m.target) for m in moves] == [
        (f"d_{i}", ("a", "b"), ("a", "b", "c")) for i in range(3)]  # added, nothing taken away
    assert all(set(r) == servers for r in _apply(ideal, moves).values())
    gone = plan_offline_rebalance(ideal, replicas(1, True, {"a"}), {"a"})  # b left the tenant: its copies go
    assert all(m.target == ("a",) for m in gone) and len(gone) == 3


def test_an_offline_rebalance_keeps_a_partitioned_segment_on_its_partitions_servers() -> None:
    ideal = IdealState("o_OFFLINE", {"p0": {"a": ON}, "p1": {"a": ON}, "free1": {"a": ON}, "free2": {"a": ON}})
    moves = {m.segment: m.target for m in plan_offline_rebalance(ideal, 1, {"a", "b", "c"}, {"p0": 0, "p1": 1})}
    assert "p0" not in moves and moves["p1"] == ("b",)  # partition p on the p-th server, as a push puts it
    placed = {name: moves.get(name, tuple(replicas)) for name, replicas in ideal.segments.items()}
    assert sorted(sum(1 for r in placed.values() if s in r) for s in "abc") == [1, 1, 2]  # the rest spread around
