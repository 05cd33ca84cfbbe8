"""Placing consuming segments on servers, and the pure halves of the controller's commit steps.

Table creation gives each stream partition one consuming segment on ``replicas`` distinct servers, sprayed
round-robin over the tagged live servers sorted by id, as Pinot does: replica r of partition p goes to server
(p * replicas + r) mod n. Consecutive slots are distinct whenever n >= replicas, so no server ever holds two
replicas of a partition, and every server ends with ceil(p*q/n) or floor(p*q/n) consuming segments.

A segment's row threshold is the table's ``flush.threshold.rows`` divided by the number of the table's consuming
segments on the busiest server (the seed's rule), so that one server's consuming rows stay within the setting.

The commit helpers are update functions for ``ClusterStore.update``: each returns its input unchanged when its
step has already been applied (so a re-run is a no-op) and raises RequirementFailedError when the base record is
in a state the step must not touch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cuvee.cluster.errors import AssignmentError, RequirementFailedError
from cuvee.cluster.records import IdealState, InstanceInfo, SegmentRecord, SegmentState, SegmentStatus
from cuvee.config.table import raw_table_name
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.partitioning import SegmentPartitions, stream_partition_metadata

REALTIME_TAG_SUFFIX = "_REALTIME"


def server_tag(tenant: str) -> str:
    """The tag of the servers that consume a tenant's realtime tables (``DefaultTenant_REALTIME``)."""
    return tenant + REALTIME_TAG_SUFFIX


def eligible_instances(instances: Iterable[InstanceInfo], live: Collection[str], tag: str) -> list[str]:
    """Ids of the live instances carrying ``tag``, sorted: the order the round-robin walks."""
    return sorted(i.instance_id for i in instances if i.instance_id in live and i.has_tag(tag))


def assign_partition(partition: int, replicas: int, instances: Sequence[str]) -> tuple[str, ...]:
    """The ``replicas`` distinct instances for one partition's consuming segment (instances sorted by id)."""
    if replicas < 1:
        raise AssignmentError(f"replicas must be at least 1, got {replicas}")
    if len(set(instances)) != len(instances):
        raise AssignmentError(f"instance list has duplicates: {list(instances)}")
    if len(instances) < replicas:
        raise AssignmentError(
            f"cannot place {replicas} replicas on {len(instances)} tagged live server(s) "
            f"({', '.join(instances) or 'none'}): a partition's replicas need distinct servers; "
            "start more servers or lower replicasPerPartition"
        )
    n = len(instances)
    return tuple(instances[(partition * replicas + r) % n] for r in range(replicas))


def rows_per_segment(flush_rows: int, ideal: IdealState) -> int:
    """``flush_rows`` divided by the partitions consuming on the busiest instance of ``ideal`` (at least 1 row).
    Partitions, not segments: while a pauseless commit is in flight a partition has two CONSUMING segments, and
    counting both would halve the next threshold."""
    if flush_rows <= 0:
        raise ValueError(
            f"flush_rows must be positive (0 means auto-tuned: use cuvee.cluster.threshold), got {flush_rows}"
        )
    partitions: dict[str, set[str]] = {}
    for segment, replicas in ideal.segments.items():
        try:
            name = LLCSegmentName.parse(segment)
            key = f"{name.table}\x00{name.partition}"
        except InvalidSegmentNameError:
            key = segment
        for inst, state in replicas.items():
            if state is SegmentState.CONSUMING:
                partitions.setdefault(inst, set()).add(key)
    busiest = max((len(keys) for keys in partitions.values()), default=1)
    return max(1, flush_rows // busiest)


def partitions_with_segments(ideal: IdealState) -> set[int]:
    """Stream partitions that already have any LLC segment in the ideal state."""
    found = set()
    for segment in ideal.segments:
        try:
            found.add(LLCSegmentName.parse(segment).partition)
        except InvalidSegmentNameError:
            continue
    return found


@dataclass(frozen=True)
class TablePlan:
    """New consuming segments for a realtime table: their metadata records and the ideal state that places them."""

    ideal_state: IdealState
    segments: tuple[SegmentRecord, ...]


def plan_consuming_segments(
    table: str,
    start_offsets: Mapping[int, int],
    replicas: int,
    instances: Sequence[str],
    now_ms: int,
    *,
    existing: IdealState | None = None,
    flush_rows: int = 0,
    autotuned_rows: int | None = None,
    time_threshold_ms: int | None = None,
    schema_version: int | None = None,
    index_config: Mapping[str, Any] | None = None,
) -> TablePlan:
    """Sequence-0 consuming segments for the partitions of ``start_offsets`` (partition -> start offset) that
    have no segment in ``existing`` yet: table creation, or partitions the stream added later.

    ``table`` is the name with type; ``instances`` the eligible ids (see ``eligible_instances``). Row thresholds
    are ``flush_rows`` split by the busiest instance's consuming count in the resulting ideal state, or
    ``autotuned_rows`` when ``flush_rows`` is 0. ``now_ms`` (epoch ms) names the segments and stamps creation;
    ``schema_version``: the table's schema version they are built under; ``index_config``: the table's
    ``tableIndexConfig`` (its partitioning is recorded in each record: ``new_segment_record``).
    """
    ideal = existing if existing is not None else IdealState(table)
    if ideal.table != table:
        raise ValueError(f"ideal state of {ideal.table} passed for table {table}")
    if flush_rows <= 0 and autotuned_rows is None:
        raise ValueError("flush_rows is 0 (auto-tuned) but no autotuned_rows was given")
    ordered = sorted(instances)
    taken = partitions_with_segments(ideal)
    names: list[tuple[int, str]] = []
    for partition in sorted(start_offsets):
        if partition in taken:
            continue
        name = LLCSegmentName.create(raw_table_name(table), partition, 0, now_ms).name
        ideal = ideal.with_segments_in(name, assign_partition(partition, replicas, ordered), SegmentState.CONSUMING)
        names.append((partition, name))
    rows = rows_per_segment(flush_rows, ideal) if flush_rows > 0 else autotuned_rows
    assert rows is not None
    records = tuple(
        new_segment_record(name, partition, 0, start_offsets[partition], rows, time_threshold_ms, now_ms,
                           schema_version, index_config=index_config)
        for partition, name in names
    )
    return TablePlan(ideal, records)


def new_segment_record(
    segment_name: str,
    partition: int,
    sequence: int,
    start_offset: int,
    row_threshold: int,
    time_threshold_ms: int | None,
    now_ms: int,
    schema_version: int | None = None,
    *,
    index_config: Mapping[str, Any] | None = None,
) -> SegmentRecord:
    """Metadata of a segment about to be consumed (IN_PROGRESS from ``start_offset``, built under
    ``schema_version`` of the table's schema: ``cuvee.cluster.schemas``). A table partitioned by its
    ``index_config`` (``tableIndexConfig``) records the partition function the segment is checked under and may be
    pruned by: its stream partition alone (``stream_partition_metadata``)."""
    if row_threshold < 1:
        raise ValueError(f"row threshold must be at least 1, got {row_threshold}")
    return SegmentRecord(
        segment_name=segment_name,
        status=SegmentStatus.IN_PROGRESS,
        creation_time_ms=now_ms,
        partition=partition,
        sequence=sequence,
        start_offset=start_offset,
        row_threshold=row_threshold,
        time_threshold_ms=time_threshold_ms,
        schema_version=schema_version,
        partitions=stream_partition_metadata(index_config, partition) if index_config is not None else None,
    )


# ---- commit steps (DESIGN.md section 4) -------------------------------------------------------------------


def mark_done(
    *,
    end_offset: int,
    total_docs: int,
    size_bytes: int,
    crc: int,
    download_uri: str,
    now_ms: int,
    time_min: int | None = None,
    time_max: int | None = None,
    partitions: SegmentPartitions | None = None,
) -> Callable[[SegmentRecord], SegmentRecord]:
    """Commit step 1 as an update function: IN_PROGRESS (or COMMITTING at the same end offset) -> DONE with the end
    offset and where to download."""

    def update(record: SegmentRecord) -> SegmentRecord:
        if record.status is SegmentStatus.DONE:
            if record.end_offset == end_offset:
                return record
            raise RequirementFailedError(
                f"segment {record.segment_name} is already DONE at end offset {record.end_offset}, not {end_offset}"
            )
        _check_committable(record, end_offset)
        return record.committed(
            end_offset=end_offset,
            total_docs=total_docs,
            size_bytes=size_bytes,
            crc=crc,
            download_uri=download_uri,
            now_ms=now_ms,
            time_min=time_min,
            time_max=time_max,
            partitions=partitions,
        )

    return update


def mark_committing(end_offset: int, now_ms: int) -> Callable[[SegmentRecord], SegmentRecord]:
    """Pauseless commit start as an update function: IN_PROGRESS -> COMMITTING with the end offset fixed (the next
    segment will start there). Re-running it, or running it on a segment already DONE at that offset, changes
    nothing; any other end offset is refused."""

    def update(record: SegmentRecord) -> SegmentRecord:
        if record.status is SegmentStatus.DONE and record.end_offset == end_offset:
            return record
        _check_committable(record, end_offset)
        if record.status is SegmentStatus.COMMITTING:
            return record
        return record.committing(end_offset=end_offset, now_ms=now_ms)

    return update


def _check_committable(record: SegmentRecord, end_offset: int) -> None:
    """A segment may end at ``end_offset``: it is IN_PROGRESS, or COMMITTING at exactly that offset."""
    if record.status is SegmentStatus.COMMITTING:
        if record.end_offset != end_offset:
            raise RequirementFailedError(
                f"segment {record.segment_name} is COMMITTING at end offset {record.end_offset}, not {end_offset} "
                "(its next segment already starts there)"
            )
    elif record.status is not SegmentStatus.IN_PROGRESS:
        raise RequirementFailedError(f"segment {record.segment_name} is {record.status.value}, not IN_PROGRESS")
    if record.start_offset is not None and end_offset < record.start_offset:
        raise RequirementFailedError(
            f"segment {record.segment_name}: end offset {end_offset} is before start offset {record.start_offset}"
        )


def next_segment_name(done: SegmentRecord, existing_names: Iterable[str], now_ms: int) -> str:
    """The name of the segment after ``done``: the one already created (commit step 2 re-run after a crash, maybe
    in a later minute) or a new one stamped ``now_ms``."""
    current = LLCSegmentName.parse(done.segment_name)
    for name in existing_names:
        try:
            other = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
        if (other.table, other.partition, other.sequence) == (current.table, current.partition, current.sequence + 1):
            return name
    return current.next(now_ms).name


def next_segment_record(
    done: SegmentRecord, next_name: str, row_threshold: int, now_ms: int, time_threshold_ms: int | None = None,
    schema_version: int | None = None, *, index_config: Mapping[str, Any] | None = None,
) -> SegmentRecord:
    """Commit step 2: the next segment of the partition, consuming from where ``done`` ended (DONE, or COMMITTING:
    its end offset is fixed), built under ``schema_version`` (the schema's version now, not ``done``'s)."""
    if done.status not in (SegmentStatus.DONE, SegmentStatus.COMMITTING) or done.end_offset is None:
        raise RequirementFailedError(
            f"segment {done.segment_name} is not DONE or COMMITTING with an end offset; no next segment")
    name = LLCSegmentName.parse(next_name)
    previous = LLCSegmentName.parse(done.segment_name)
    if (name.table, name.partition, name.sequence) != (previous.table, previous.partition, previous.sequence + 1):
        raise ValueError(f"{next_name} does not follow {done.segment_name}")
    threshold_ms = time_threshold_ms if time_threshold_ms is not None else done.time_threshold_ms
    return new_segment_record(
        next_name, name.partition, name.sequence, done.end_offset, row_threshold, threshold_ms, now_ms, schema_version,
        index_config=index_config,
    )


def successor_in(ideal: IdealState, segment: str) -> str | None:
    """The segment of ``segment``'s partition with the next sequence number in ``ideal`` (any name), or None."""
    current = LLCSegmentName.parse(segment)
    for name in ideal.segments:
        try:
            other = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
        if (other.table, other.partition, other.sequence) == (current.table, current.partition, current.sequence + 1):
            return name
    return None


Placement = Callable[[tuple[str, ...]], tuple[str, ...]]
"""Where a partition's next consuming segment goes, given the instances of the segment before it."""


def placement_pool(tagged: Collection[str], live: Collection[str], holding: Collection[str]) -> list[str]:
    """The servers a table's partitions are spread over: those tagged for it that are live or hold any of its
    segments. A server that is down for a while but holds segments stays in (so a restart reshuffles nothing); a
    registered id that is gone and holds nothing drops out. Sorted: the order the round-robin walks."""
    return sorted(i for i in tagged if i in live or i in holding)


def place_on_tagged(partition: int, replicas: int, pool: Sequence[str], tagged: Collection[str]) -> Placement:
    """The partition's replicas over ``pool`` (``placement_pool``), the previous segment's replicas joining it
    while they keep the tag. With the same servers this is where table creation put the partition; a server tagged
    since takes its share; a server untagged gets no new consuming segment; too few servers: where the previous
    segment is."""

    def place(previous: tuple[str, ...]) -> tuple[str, ...]:
        candidates = sorted(set(pool) | {i for i in previous if i in tagged})
        try:
            return assign_partition(partition, replicas, candidates)
        except AssignmentError:
            return previous

    return place


def complete_in_ideal_state(committed: str, next_segment: str | None,
                            place: Placement | None = None) -> Callable[[IdealState], IdealState]:
    """Commit step 3 as an update function: ``committed`` ONLINE on its instances and ``next_segment`` CONSUMING
    on the same ones (no next segment when the table is paused). Other segments are left as they are, so commits
    of other partitions racing on the same node merge through the retry. A partition never gets a second
    successor: if one is already placed (maybe named in another minute by a racing finisher), it is kept."""

    def update(ideal: IdealState) -> IdealState:
        instances = ideal.instances_of(committed)
        if not instances:
            raise RequirementFailedError(f"segment {committed} is not in the ideal state of {ideal.table}")
        updated = ideal.with_segments_in(committed, instances, SegmentState.ONLINE)
        if next_segment is not None and successor_in(ideal, committed) is None:
            target = place(tuple(instances)) if place is not None else instances
            updated = updated.with_segments_in(next_segment, target, SegmentState.CONSUMING)
        return updated

    return update


def start_successor_in_ideal_state(committing: str, next_segment: str,
                                   place: Placement | None = None) -> Callable[[IdealState], IdealState]:
    """Pauseless commit start as an update function: ``next_segment`` CONSUMING on the instances of
    ``committing``, which stays as it is (CONSUMING until its commit ends). As in ``complete_in_ideal_state``, a
    partition never gets a second successor."""

    def update(ideal: IdealState) -> IdealState:
        instances = ideal.instances_of(committing)
        if not instances:
            raise RequirementFailedError(f"segment {committing} is not in the ideal state of {ideal.table}")
        if successor_in(ideal, committing) is not None:
            return ideal
        target = place(tuple(instances)) if place is not None else instances
        return ideal.with_segments_in(next_segment, target, SegmentState.CONSUMING)

    return update
