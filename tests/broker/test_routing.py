"""Routing from the external view: ONLINE preferred, at most one CONSUMING segment per partition, balanced."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.broker.routing import route
from cuvee.cluster.records import SegmentState
from tests.broker.helpers import segment_name

ON, CO, OFF, ERR = SegmentState.ONLINE, SegmentState.CONSUMING, SegmentState.OFFLINE, SegmentState.ERROR
ALL = frozenset({"A", "B", "C"})


def routed(table) -> dict[str, str]:
    return {seg: inst for inst, segs in table.servers.items() for seg in segs}


def test_steady_state_routes_every_committed_segment_and_the_consuming_one() -> None:
    s0, s1, s2 = (segment_name(0, i) for i in range(3))
    view = {s0: {"A": ON, "B": ON}, s1: {"A": ON, "B": ON}, s2: {"A": CO, "B": CO}}
    table = route(view, ALL, 0)
    assert set(routed(table)) == {s0, s1, s2}
    assert table.consuming == {s2}
    assert table.unavailable == () and table.held_back == ()


def test_mid_commit_online_on_one_replica_is_read_from_that_replica_only() -> None:
    """N ONLINE on A, still CONSUMING on B; N+1 already CONSUMING on A: N from A, N+1 consuming."""
    n, n1 = segment_name(0, 4), segment_name(0, 5)
    view = {n: {"A": ON, "B": CO}, n1: {"A": CO}}
    for request in range(6):
        table = route(view, ALL, request)
        assert routed(table)[n] == "A"
        assert table.consuming == {n1}
        assert n not in table.consuming


def test_next_consuming_segment_waits_until_the_previous_one_is_online_somewhere() -> None:
    """N+1 CONSUMING before N is ONLINE anywhere: read N (consuming), hold N+1 back."""
    n, n1 = segment_name(2, 7), segment_name(2, 8)
    view = {n: {"A": CO, "B": CO}, n1: {"A": CO, "B": CO}}
    table = route(view, ALL, 3)
    assert set(routed(table)) == {n}
    assert table.consuming == {n}
    assert table.held_back == (n1,)


def test_committed_segments_after_a_blocked_one_are_still_routed() -> None:
    early, blocked, later = segment_name(0, 1), segment_name(0, 2), segment_name(0, 3)
    view = {early: {"A": ON}, blocked: {"A": ERR, "B": OFF}, later: {"B": ON}, segment_name(0, 4): {"A": CO}}
    table = route(view, ALL, 0)
    assert routed(table) == {early: "A", later: "B"}
    assert table.unavailable == (blocked,)
    assert table.held_back == (segment_name(0, 4),)
    assert table.consuming == frozenset()


def test_unavailable_instances_are_never_chosen() -> None:
    s0, s1 = segment_name(0, 0), segment_name(0, 1)
    view = {s0: {"A": ON, "B": ON}, s1: {"A": CO, "B": CO}}
    for request in range(5):
        table = route(view, frozenset({"B"}), request)
        assert routed(table) == {s0: "B", s1: "B"}


def test_a_segment_whose_replicas_are_all_gone_is_unavailable() -> None:
    s0, s1 = segment_name(0, 0), segment_name(0, 1)
    view = {s0: {"A": ON}, s1: {"A": CO}}
    table = route(view, frozenset({"B"}), 0)
    assert table.servers == {}
    assert table.unavailable == (s0,)
    assert table.held_back == (s1,)


def test_offline_and_error_replicas_are_skipped_for_online_ones() -> None:
    s0 = segment_name(1, 0)
    view = {s0: {"A": OFF, "B": ERR, "C": ON}}
    assert routed(route(view, ALL, 0)) == {s0: "C"}
    assert routed(route(view, ALL, 1)) == {s0: "C"}


def test_partitions_are_independent() -> None:
    p0 = [segment_name(0, i) for i in range(2)]
    p1 = [segment_name(1, i) for i in range(3)]
    view = {p0[0]: {"A": ON}, p0[1]: {"A": CO}, p1[0]: {"B": ON}, p1[1]: {"B": CO}, p1[2]: {"B": CO}}
    table = route(view, ALL, 0)
    assert set(routed(table)) == {p0[0], p0[1], p1[0], p1[1]}
    assert table.consuming == {p0[1], p1[1]}
    assert table.held_back == (p1[2],)


def test_non_llc_segments_stand_alone() -> None:
    view = {"events_OFFLINE_0": {"A": ON}, "events_OFFLINE_1": {"B": ON, "A": OFF}, "pushed": {"A": OFF}}
    table = route(view, ALL, 0)
    assert routed(table) == {"events_OFFLINE_0": "A", "events_OFFLINE_1": "B"}
    assert table.unavailable == ("pushed",)


def test_replicas_are_balanced_within_and_across_requests() -> None:
    segments = {segment_name(p, s): {"A": ON, "B": ON, "C": ON} for p in range(4) for s in range(6)}
    for request in range(3):
        load = Counter(routed(route(segments, ALL, request)).values())
        assert load == {"A": 8, "B": 8, "C": 8}
    picks = {route(segments, ALL, r).servers["A"] for r in range(3)}
    assert len(picks) == 3, "consecutive requests rotate the replica chosen per segment"


def test_empty_view_routes_nothing() -> None:
    table = route({}, ALL, 0)
    assert table.servers == {} and table.num_segments == 0


STATES = st.sampled_from([ON, CO, OFF, ERR])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["A", "B", "C"]), STATES, max_size=3), min_size=1, max_size=6),
       st.frozensets(st.sampled_from(["A", "B", "C"])), st.integers(0, 50))
def test_invariants_for_any_view_of_one_partition(replicas, available, request) -> None:
    names = [segment_name(0, i) for i in range(len(replicas))]
    view = dict(zip(names, replicas))
    table = route(view, available, request)
    chosen = routed(table)
    # every segment ONLINE on an available replica is routed, to an ONLINE replica
    for name, states in view.items():
        online = {i for i, s in states.items() if s is ON and i in available}
        if online:
            assert chosen.get(name) in online
    # at most one consuming segment, read from a CONSUMING replica, and it is the first segment ONLINE nowhere
    assert len(table.consuming) <= 1
    not_online = [n for n in names if not any(s is ON and i in available for i, s in view[n].items())]
    for name in table.consuming:
        assert view[name][chosen[name]] is CO
        assert name == not_online[0]
    # nothing is routed twice, and every segment is accounted for exactly once
    accounted = list(chosen) + list(table.unavailable) + list(table.held_back)
    assert sorted(accounted) == sorted(names)
    assert all(inst in available for inst in table.servers)


def test_a_consuming_segment_is_read_from_the_same_replica_by_every_query() -> None:
    """Replicas consume at different speeds; reading one replica keeps a client's fresh rows from vanishing."""
    from cuvee.broker.routing import route
    from cuvee.cluster.records import SegmentState

    view = {f"t__{p}__0__20261121T1647Z": {"s1": SegmentState.CONSUMING, "s2": SegmentState.CONSUMING} for p in range(8)}
    tables = [route(view, {"s1", "s2"}, request_number=r) for r in range(6)]
    assert all(t.servers == tables[0].servers for t in tables)
    assert set(tables[0].servers) == {"s1", "s2"}, "consuming segments should still spread across replicas"


def test_strict_replica_group_reads_a_partition_from_one_replica() -> None:
    p0 = [segment_name(0, i) for i in range(3)]  # committed segments and a consuming one
    p1 = [segment_name(1, i) for i in range(2)]  # committed segments only
    view = {**{s: {"A": ON, "B": ON} for s in p0[:2] + p1}, p0[2]: {"A": CO, "B": CO}}
    used: dict[int, set[str]] = {0: set(), 1: set()}
    for request in range(6):
        table = route(view, ALL, request, strict=True)
        where = routed(table)
        assert set(where) == set(p0 + p1) and table.unavailable == ()
        for partition, names in ((0, p0), (1, p1)):
            replicas = {where[s] for s in names}
            assert len(replicas) == 1, "a partition's segments must come from one replica"
            used[partition] |= replicas
    assert len(used[0]) == 1  # consuming: the same replica every query (a key's value never goes back)
    assert used[1] == {"A", "B"}  # committed only: balanced between queries
    loose = routed(route(view, ALL, 1))
    assert len({loose[s] for s in p0[:2]}) == 2  # without strict, committed segments spread per segment


def test_strict_routing_never_mixes_replicas_within_a_partition() -> None:
    s0, s1, s2 = (segment_name(0, i) for i in range(3))
    view = {s0: {"A": ON, "B": ON}, s1: {"A": ON, "B": OFF}, s2: {"A": CO, "B": CO}}
    for request in range(4):
        assert set(routed(route(view, ALL, request, strict=True)).values()) == {"A"}  # only A holds all three
    split = {s0: {"A": ON}, s1: {"B": ON}, s2: {"A": CO}}  # no replica holds all: the one holding most, rest 305
    table = route(split, ALL, 0, strict=True)
    assert routed(table) == {s0: "A", s2: "A"} and table.unavailable == (s1,)


def test_only_an_upsert_table_reads_a_replica_still_consuming_a_committed_segment() -> None:
    """Mid-commit, B still consumes s1 that A has committed. An upsert server reads its partition whole and
    consistently, so B may be chosen; a strict table without upsert must never read the lagging copy (committed
    rows would be missed), so only A serves the partition."""
    s0, s1, s2 = (segment_name(0, i) for i in range(3))
    view = {s0: {"A": ON, "B": ON}, s1: {"A": ON, "B": CO}, s2: {"A": CO, "B": CO}}
    for request in range(4):
        assert set(routed(route(view, ALL, request, strict=True)).values()) == {"A"}
        upsert = route(view, ALL, request, hold_back=False, strict=True, upsert=True)
        assert upsert.unavailable == () and len(set(routed(upsert).values())) == 1
        assert set(routed(upsert)) == {s0, s1, s2}
