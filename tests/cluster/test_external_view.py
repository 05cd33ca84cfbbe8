from __future__ import annotations

from cuvee.cluster.external_view import merge_external_view
from cuvee.cluster.records import CurrentState, ExternalView, SegmentState

T = "events_REALTIME"
C, O, OFF, ERR, DROP = (SegmentState.CONSUMING, SegmentState.ONLINE, SegmentState.OFFLINE, SegmentState.ERROR,
                        SegmentState.DROPPED)


def test_merges_live_instances_only() -> None:
    states = [
        CurrentState("b", T, {"s0": O, "s1": C, "s2": DROP}),
        CurrentState("a", T, {"s1": C, "s0": ERR, "s3": OFF}),
        CurrentState("dead", T, {"s0": O}),
        CurrentState("a", "other_REALTIME", {"x": O}),
    ]
    view = merge_external_view(T, states, live={"a", "b"})
    assert view == ExternalView(T, {"s0": {"a": ERR, "b": O}, "s1": {"a": C, "b": C}, "s3": {"a": OFF}})
    assert view.instances_in("s0", O) == ("b",)
    assert view.instances_in("s1", C) == ("a", "b")
    assert list(view.segments) == ["s0", "s1", "s3"]


def test_same_inputs_in_any_order_give_equal_bytes() -> None:
    a = CurrentState("a", T, {"s1": C, "s0": O})
    b = CurrentState("b", T, {"s0": O})
    one = merge_external_view(T, [a, b], {"a", "b"})
    two = merge_external_view(T, [b, a], ["b", "a"])
    assert one.encode() == two.encode()


def test_no_live_instances_gives_an_empty_view() -> None:
    assert merge_external_view(T, [CurrentState("a", T, {"s0": O})], live=set()) == ExternalView(T, {})
