"""Rebalancing a table's committed segments onto the servers tagged now. Pure: plans and ideal-state update
functions; ``cuvee.controller.rebalance`` carries them out.

Realtime: each committed (ONLINE) segment's target is where its partition's consuming segment would be placed now
(``assign_partition`` over the live tagged servers, as ``place_on_tagged`` does at commits), so a partition's
segments end up together. Offline (``plan_offline_rebalance``): segments spread evenly over the tagged servers,
moving as few replicas as that takes. A move is made before it is broken: first the segment is ONLINE on its old and its new
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


def plan_offline_rebalance(ideal: IdealState, replication: int, eligible: Collection[str],
                           partitions: Mapping[str, int] | None = None) -> list[Move]:
    """The moves that spread an offline table's ONLINE segments evenly over ``eligible`` servers, moving as few
    replicas as that takes: each segment first gets exactly ``replication`` replicas (those on servers no longer
    eligible go, extra ones — a stopped rebalance's — leave the busiest servers, missing ones go to the servers
    holding fewest), then one
    replica at a time goes from the most loaded server to the least loaded until they differ by at most one; never
    two replicas of a segment on one server. A segment of one partition (``partitions``: segment -> its rows'
    partition, a partitioned table's) goes to that partition's servers instead, as a push places it, so tables
    partitioned alike stay colocated; the others spread around them. Raises AssignmentError when there are fewer
    eligible servers than replicas."""
    pool = sorted(set(eligible))
    check_replication(replication, pool)
    placed = {name: set(replicas) for name, replicas in sorted(ideal.segments.items())
              if replicas and all(state is ONLINE for state in replicas.values())}
    fixed = {name: set(assign_partition(partitions[name], replication, pool)) for name in placed
             if partitions and name in partitions}
    load = dict.fromkeys(pool, 0)
    for replicas in fixed.values():
        for instance in replicas:
            load[instance] += 1
    for name in fixed:
        del placed[name]
    for replicas in placed.values():
        for instance in replicas:
            if instance in load:
                load[instance] += 1

    def least_loaded(exclude: set[str]) -> str | None:
        spare = [i for i in pool if i not in exclude]
        return min(spare, key=lambda i: (load[i], i)) if spare else None

    for replicas in placed.values():  # exactly ``replication`` replicas, all on eligible servers
        replicas.difference_update(replicas - set(pool))  # their servers are no longer tagged or alive
        while len(replicas) > replication:  # e.g. a stopped rebalance's old and new replicas: keep the idlest
            busiest = max(replicas, key=lambda i: (load[i], i))
            replicas.discard(busiest)
            load[busiest] -= 1
        while len(replicas) < replication and (to := least_loaded(replicas)) is not None:
            replicas.add(to)
            load[to] += 1
    while True:  # each step lowers the spread, so this ends
        busiest = max(pool, key=lambda i: (load[i], i))
        moved = False
        for idlest in sorted(pool, key=lambda i: (load[i], i)):
            if load[busiest] - load[idlest] <= 1:
                break
            segment = next((n for n, r in placed.items() if busiest in r and idlest not in r), None)
            if segment is not None:
                placed[segment] = (placed[segment] - {busiest}) | {idlest}
                load[busiest] -= 1
                load[idlest] += 1
                moved = True
                break
        if not moved:
            break
    return [Move(name, tuple(sorted(ideal.segments[name])), tuple(sorted(replicas)))
            for name, replicas in sorted({**placed, **fixed}.items()) if replicas != set(ideal.segments[name])]


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


__all__ = ["Move", "add_targets", "check_replication", "drop_sources", "plan_offline_rebalance", "plan_rebalance"]
