"""The pure transition planner: every edge of the state model, chains, ERROR handling and ordering."""

from __future__ import annotations

import pytest

from cuvee.cluster.records import SegmentState
from cuvee.server.transitions import Transition, plan_transitions, steps

S = SegmentState
A = "t__0__0__20260101T0000Z"
B = "t__0__1__20260101T0100Z"
C = "t__1__0__20260101T0000Z"


def edges(ideal: dict[str, S], current: dict[str, S], failed: dict[str, S] | None = None) -> list[list[tuple[str, S, S]]]:
    return [[(t.segment, t.from_state, t.to_state) for t in chain] for chain in plan_transitions(ideal, current, failed)]


@pytest.mark.parametrize(
    "current, target, expected",
    [
        (None, S.CONSUMING, [(S.OFFLINE, S.CONSUMING)]),
        (None, S.ONLINE, [(S.OFFLINE, S.ONLINE)]),
        (None, S.OFFLINE, []),
        (None, S.DROPPED, []),
        (S.OFFLINE, S.CONSUMING, [(S.OFFLINE, S.CONSUMING)]),
        (S.OFFLINE, S.ONLINE, [(S.OFFLINE, S.ONLINE)]),
        (S.OFFLINE, S.OFFLINE, []),
        (S.OFFLINE, S.DROPPED, [(S.OFFLINE, S.DROPPED)]),
        (S.CONSUMING, S.CONSUMING, []),
        (S.CONSUMING, S.ONLINE, [(S.CONSUMING, S.ONLINE)]),
        (S.CONSUMING, S.OFFLINE, [(S.CONSUMING, S.OFFLINE)]),
        (S.CONSUMING, S.DROPPED, [(S.CONSUMING, S.OFFLINE), (S.OFFLINE, S.DROPPED)]),
        (S.ONLINE, S.ONLINE, []),
        (S.ONLINE, S.CONSUMING, []),
        (S.ONLINE, S.OFFLINE, [(S.ONLINE, S.OFFLINE)]),
        (S.ONLINE, S.DROPPED, [(S.ONLINE, S.OFFLINE), (S.OFFLINE, S.DROPPED)]),
        (S.ERROR, S.OFFLINE, [(S.ERROR, S.OFFLINE)]),
        (S.ERROR, S.DROPPED, [(S.ERROR, S.DROPPED)]),
        (S.ERROR, S.ONLINE, [(S.OFFLINE, S.ONLINE)]),
        (S.ERROR, S.CONSUMING, [(S.OFFLINE, S.CONSUMING)]),
    ],
)
def test_every_edge(current: S | None, target: S, expected: list[tuple[S, S]]) -> None:
    assert steps(current, target) == expected


def test_error_is_not_retried_while_the_failed_target_stands() -> None:
    assert steps(S.ERROR, S.CONSUMING, failed_target=S.CONSUMING) == []
    assert steps(S.ERROR, S.ONLINE, failed_target=S.CONSUMING) == [(S.OFFLINE, S.ONLINE)]
    assert edges({A: S.ONLINE}, {A: S.ERROR}, {A: S.ONLINE}) == []
    assert edges({}, {A: S.ERROR}, {A: S.ONLINE}) == [[(A, S.ERROR, S.DROPPED)]]


def test_segments_not_in_the_ideal_state_are_dropped() -> None:
    assert edges({}, {A: S.ONLINE, B: S.CONSUMING, C: S.OFFLINE}) == [
        [(A, S.ONLINE, S.OFFLINE), (A, S.OFFLINE, S.DROPPED)],
        [(B, S.CONSUMING, S.OFFLINE), (B, S.OFFLINE, S.DROPPED)],
        [(C, S.OFFLINE, S.DROPPED)],
    ]


def test_nothing_to_do_when_current_matches_ideal() -> None:
    assert edges({A: S.ONLINE, B: S.CONSUMING}, {A: S.ONLINE, B: S.CONSUMING}) == []


def test_commit_before_next_consumer_and_releases_first() -> None:
    """A partition's commit: segment A goes ONLINE before B starts consuming; a release elsewhere comes first."""
    plan = edges({A: S.ONLINE, B: S.CONSUMING, C: S.OFFLINE}, {A: S.CONSUMING, C: S.CONSUMING})
    assert plan == [
        [(C, S.CONSUMING, S.OFFLINE)],
        [(A, S.CONSUMING, S.ONLINE)],
        [(B, S.OFFLINE, S.CONSUMING)],
    ]


def test_downloads_before_new_consumers_and_by_partition_then_sequence() -> None:
    d = "t__10__0__20260101T0000Z"  # partition 10 sorts after partition 1 numerically, not as text
    plan = edges({C: S.CONSUMING, d: S.CONSUMING, B: S.ONLINE, A: S.ONLINE}, {})
    assert plan == [
        [(A, S.OFFLINE, S.ONLINE)],
        [(B, S.OFFLINE, S.ONLINE)],
        [(C, S.OFFLINE, S.CONSUMING)],
        [(d, S.OFFLINE, S.CONSUMING)],
    ]


def test_non_llc_names_are_planned_too() -> None:
    plan = plan_transitions({"uploaded_segment_1": S.ONLINE}, {})
    assert plan == [[Transition("uploaded_segment_1", S.OFFLINE, S.ONLINE)]]
    assert str(plan[0][0]) == "uploaded_segment_1: OFFLINE→ONLINE"
