"""Rebalancing a realtime table's committed segments onto the servers tagged now. Pure: plans and ideal-state
update functions; ``cuvee.controller.rebalance`` carries them out.

Each committed (ONLINE) segment's target is where its partition's consuming segment would be placed now
(``assign_partition`` over the live tagged servers, as ``place_on_tagged`` does at commits), so a partition's
segments end up together. A move is made before it is broken: first the segment is ONLINE on its old and its new
replicas together, and only once every new replica serves it (the external view says ONLINE) are the old ones
dropped, so queries never lose a segment. Consuming segments are not moved: they move at their commits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from cuvee.cluster.assignment import assign_partition
from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.records import IdealState, SegmentState
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

ONLINE = SegmentState.ONLINE


@dataclass(frozen=True)
class Move:
    segment: str
    current: tuple[str, ...]
    target: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"segment": self.segment, "from": list(self.current), "to": list(self.target)}


def plan_rebalance(ideal: IdealState, replication: int, tagged_live: Collection[str]) -> list[Move]:
    """The moves that put every committed LLC segment on its partition's target replicas. Raises
    AssignmentError when there are fewer live tagged servers than replicas."""
    pool = sorted(tagged_live)
    moves = []
    for segment, replicas in sorted(ideal.segments.items()):
        if not replicas or any(state is not ONLINE for state in replicas.values()):
            continue  # consuming (moves at its commit), or mid-transition
        try:
            partition = LLCSegmentName.parse(segment).partition
        except InvalidSegmentNameError:
            continue
        target = assign_partition(partition, replication, pool)
        current = tuple(sorted(replicas))
        if set(target) != set(current):
            moves.append(Move(segment, current, tuple(sorted(target))))
    return moves


def add_targets(moves: list[Move]) -> Callable[[IdealState], IdealState]:
    """Phase 1: each moved segment ONLINE on its current and target replicas together (a segment that changed
    since the plan, or left, is left alone)."""

    def update(ideal: IdealState) -> IdealState:
        for move in moves:
            replicas = ideal.segments.get(move.segment)
            if replicas is None or tuple(sorted(replicas)) != move.current:
                continue
            ideal = ideal.with_segments_in(move.segment, sorted({*move.current, *move.target}), ONLINE)
        return ideal

    return update


def drop_sources(moves: list[Move], served: Mapping[str, Collection[str]]) -> Callable[[IdealState], IdealState]:
    """Phase 2: each moved segment on its target replicas only, once ``served`` (segment -> instances the
    external view shows ONLINE) holds every target; a segment not there yet keeps all its replicas."""

    def update(ideal: IdealState) -> IdealState:
        for move in moves:
            replicas = ideal.segments.get(move.segment)
            if replicas is None or set(replicas) != {*move.current, *move.target}:
                continue
            if set(move.target) <= set(served.get(move.segment, ())):
                ideal = ideal.with_segments_in(move.segment, move.target, ONLINE)
        return ideal

    return update


def check_replication(replication: int, tagged_live: Collection[str]) -> None:
    if len(tagged_live) < replication:
        raise AssignmentError(f"{len(tagged_live)} live tagged server(s) cannot hold {replication} replicas")


__all__ = ["Move", "add_targets", "check_replication", "drop_sources", "plan_rebalance"]
