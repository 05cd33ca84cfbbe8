"""Which state transitions this server must make: a pure function of what the ideal state wants and what it holds.

The state model is Pinot's (DESIGN.md §3): OFFLINE→CONSUMING, CONSUMING→ONLINE, CONSUMING→OFFLINE, OFFLINE→ONLINE,
ONLINE→OFFLINE, OFFLINE→DROPPED. Longer moves are chains (ONLINE→DROPPED is ONLINE→OFFLINE, OFFLINE→DROPPED). A
segment absent from the ideal state (or no longer placed on this server) is to be DROPPED.

ERROR replicas whose target still stands are retried with exponential backoff (a metadata blip or a deep store
that was down must not leave a segment unserved until restart): the shell keeps, per segment, when the next retry
is due (``ErrorBackoff``) and passes ``now`` and those due times in, so the planner stays pure. A retry releases
what the failed attempt left behind first (ERROR→OFFLINE), then makes the transition again. When the target
changes the replica is retried from OFFLINE at once (e.g. a failed consumer whose segment then commits is
downloaded); it is cleaned up when the target becomes OFFLINE or DROPPED.

Order: releases first (they free memory and stop consumers), then commits (CONSUMING→ONLINE), then downloads, then
new consumers; within a kind, by partition and sequence, so a partition's segment N is submitted for ONLINE before
N+1 is submitted to start (submission order only: the chains run in a pool, and nothing waits for N to be ONLINE;
a pauseless table's N+1 starts while N is still CONSUMING, mid-commit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cuvee.cluster.records import SegmentState
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

S = SegmentState


@dataclass(frozen=True)
class ErrorBackoff:
    """When an ERROR replica is retried: ``initial_seconds`` after the first failure, doubling, capped."""

    initial_seconds: float
    max_seconds: float

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failure in a row (1-based)."""
        if failures < 1:
            return 0.0
        return min(self.initial_seconds * 2 ** min(failures - 1, 62), self.max_seconds)


@dataclass(frozen=True)
class RetryState:
    """One segment's failures in a row and when the next retry is due (on the shell's clock)."""

    failures: int
    due: float

    def after_failure(self, now: float, backoff: ErrorBackoff) -> RetryState:
        failures = self.failures + 1
        return RetryState(failures, now + backoff.delay(failures))


NO_FAILURES = RetryState(0, 0.0)


@dataclass(frozen=True)
class Transition:
    segment: str
    from_state: SegmentState
    to_state: SegmentState

    def __str__(self) -> str:
        return f"{self.segment}: {self.from_state.value}→{self.to_state.value}"


# (from, to) → rank: lower runs first.
_RANK = {
    (S.CONSUMING, S.OFFLINE): 0,
    (S.ONLINE, S.OFFLINE): 0,
    (S.ERROR, S.OFFLINE): 0,
    (S.OFFLINE, S.DROPPED): 1,
    (S.ERROR, S.DROPPED): 1,
    (S.CONSUMING, S.ONLINE): 2,
    (S.OFFLINE, S.ONLINE): 3,
    (S.ONLINE, S.ONLINE): 3,  # reload: a pushed segment replaced under its name (new CRC)
    (S.OFFLINE, S.CONSUMING): 4,
}


def steps(current: SegmentState | None, target: SegmentState, failed_target: SegmentState | None = None, *,
          retry_due: bool = False) -> list[tuple[SegmentState, SegmentState]]:
    """The chain of (from, to) steps taking one replica from ``current`` (None: not held) to ``target``.

    ``retry_due``: an ERROR replica whose ``failed_target`` still stands may be tried again now."""
    if current is S.ERROR:
        if target in (S.OFFLINE, S.DROPPED):
            return [(S.ERROR, target)]
        if target == failed_target:
            return [(S.ERROR, S.OFFLINE), (S.OFFLINE, target)] if retry_due else []
        current = S.OFFLINE
    if current is None:
        if target is S.CONSUMING:
            return [(S.OFFLINE, S.CONSUMING)]
        if target is S.ONLINE:
            return [(S.OFFLINE, S.ONLINE)]
        return []  # nothing held, nothing wanted (OFFLINE/DROPPED)
    if current == target:
        return []
    if current is S.OFFLINE:
        return [(S.OFFLINE, target)]
    if current is S.CONSUMING:
        if target is S.ONLINE:
            return [(S.CONSUMING, S.ONLINE)]
        if target is S.OFFLINE:
            return [(S.CONSUMING, S.OFFLINE)]
        return [(S.CONSUMING, S.OFFLINE), (S.OFFLINE, S.DROPPED)]
    if current is S.ONLINE:
        if target is S.CONSUMING:
            return []  # no such edge: a committed segment never consumes again
        if target is S.OFFLINE:
            return [(S.ONLINE, S.OFFLINE)]
        return [(S.ONLINE, S.OFFLINE), (S.OFFLINE, S.DROPPED)]
    raise ValueError(f"unexpected current state {current}")


def _order_key(segment: str) -> tuple[str, int, int, str]:
    try:
        name = LLCSegmentName.parse(segment)
    except InvalidSegmentNameError:
        return ("", 0, 0, segment)
    return (name.table, name.partition, name.sequence, segment)


def plan_transitions(
    ideal_for_me: Mapping[str, SegmentState],
    current: Mapping[str, SegmentState],
    failed: Mapping[str, SegmentState] | None = None,
    *,
    now: float = 0.0,
    retry_due: Mapping[str, float] | None = None,
) -> list[list[Transition]]:
    """The chains of transitions to run for one table, ordered; each chain belongs to one segment and runs in order.

    ``ideal_for_me``: segment → the state the ideal state wants on this server (segments not placed here absent);
    ``current``: segment → what this server holds (not-held segments absent); ``failed``: segment → the target
    whose transition ended in ERROR; ``retry_due``: segment → when (on the caller's clock, like ``now``) an ERROR
    replica of an unchanged target is to be retried (absent: not retried).
    """
    failed = failed or {}
    retry_due = retry_due or {}
    chains: list[list[Transition]] = []
    for segment in set(ideal_for_me) | set(current):
        target = ideal_for_me.get(segment, S.DROPPED)
        due = retry_due.get(segment)
        chain = [Transition(segment, a, b) for a, b in
                 steps(current.get(segment), target, failed.get(segment), retry_due=due is not None and now >= due)]
        if chain:
            chains.append(chain)
    chains.sort(key=lambda c: (_RANK[(c[0].from_state, c[0].to_state)], _order_key(c[0].segment)))
    return chains
