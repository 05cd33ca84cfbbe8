"""The repair task's pure plan: ideal state + segment metadata + ``now`` -> the repairs one table needs, and
the ideal-state update that places a new segment only if the plan's premise still holds. See repair.py for what
each repair does and why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.controller.table_setup import latest_segments
from cuvee.protocol.segment_name import LLCSegmentName


@dataclass(frozen=True)
class FinishCommit:
    segment: str


@dataclass(frozen=True)
class RecreateConsuming:
    """``latest`` (IN_PROGRESS, all replicas OFFLINE) gets a successor consuming from ``start_offset``."""

    partition: int
    latest: str
    start_offset: int


@dataclass(frozen=True)
class CreateSuccessor:
    """``latest`` (DONE, ONLINE) has no successor: one consuming from its end offset."""

    partition: int
    latest: str
    start_offset: int


@dataclass(frozen=True)
class RestartCommitting:
    """``segment`` (COMMITTING, all replicas OFFLINE) goes CONSUMING again on live servers."""

    partition: int
    segment: str


Repair = FinishCommit | RecreateConsuming | CreateSuccessor | RestartCommitting


def plan_repairs(
    ideal: IdealState, records: Mapping[str, SegmentRecord], now_ms: int, max_completion_ms: int
) -> list[Repair]:
    """What one table needs. ``records``: the table's segment metadata by name (segments of the ideal state
    without metadata are left alone: nothing safe can be derived for them)."""
    repairs: list[Repair] = []
    for name in sorted(ideal.segments):
        record = records.get(name)
        if record is None or record.status is not SegmentStatus.DONE:
            continue
        if SegmentState.ONLINE in ideal.segments[name].values():
            continue
        committed_at = record.commit_time_ms if record.commit_time_ms is not None else record.creation_time_ms
        if now_ms - committed_at > max_completion_ms:
            repairs.append(FinishCommit(name))
    if ideal.paused:
        return repairs
    for name in sorted(ideal.segments):
        record = records.get(name)
        if record is None or record.status is not SegmentStatus.COMMITTING or not ideal.segments[name]:
            continue
        started = record.commit_time_ms if record.commit_time_ms is not None else record.creation_time_ms
        if set(ideal.segments[name].values()) == {SegmentState.OFFLINE} and now_ms - started > max_completion_ms:
            repairs.append(RestartCommitting(LLCSegmentName.parse(name).partition, name))
    for partition, llc in sorted(latest_segments(ideal).items()):
        record = records.get(llc.name)
        replicas = ideal.segments[llc.name]
        if record is None or not replicas:
            continue
        states = set(replicas.values())
        if record.status is SegmentStatus.IN_PROGRESS and states == {SegmentState.OFFLINE}:
            repairs.append(RecreateConsuming(partition, llc.name, record.start_offset or 0))
        elif record.status is SegmentStatus.DONE and SegmentState.ONLINE in states and record.end_offset is not None:
            repairs.append(CreateSuccessor(partition, llc.name, record.end_offset))
    return repairs


def place_successor(latest: str, successor: str, instances: tuple[str, ...], *, all_offline: bool
                    ) -> Callable[[IdealState], IdealState]:
    """The ideal state update of a new segment: unchanged unless the plan's premise still holds in the very
    ideal state being updated (not paused, ``latest`` still its partition's latest, and, when ``all_offline``,
    all its replicas OFFLINE). With ``all_offline`` the abandoned ``latest`` leaves the ideal state in the same
    update: it never committed, its successor re-reads its offsets, and left in place (OFFLINE everywhere) it
    would make brokers report it unavailable and hold back every later segment of the partition."""

    def update(ideal: IdealState) -> IdealState:
        if ideal.paused or latest not in ideal.segments:
            return ideal
        partition = LLCSegmentName.parse(latest).partition
        current = latest_segments(ideal).get(partition)
        if current is None or current.name != latest:
            return ideal
        if all_offline:
            if set(ideal.segments[latest].values()) != {SegmentState.OFFLINE}:
                return ideal
            ideal = ideal.without_segment(latest)
        return ideal.with_segments_in(successor, instances, SegmentState.CONSUMING)

    return update
