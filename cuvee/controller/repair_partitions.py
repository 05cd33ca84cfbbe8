"""Repair duty: consumers for stream partitions added after the table was created (DESIGN.md section 5).

The pure ``missing_partitions`` compares the stream's partition count with the partitions the ideal state has
segments for; the shell ``add_partitions`` gives each missing one its first (sequence 0) consuming segment from the
partition's **earliest** offset still in the stream, whatever the table's ``auto.offset.reset`` says: that setting
is where a new *table* starts, and a partition added to the topic later holds only rows the table has never seen,
produced in the (up to a repair interval) before this pass noticed it. Starting at the latest offset would drop
them (Pinot's bug #7741, fixed there the same way in #7756). Placed by ``cuvee.cluster.assignment`` on the live
tagged servers. Metadata
is written first, then the ideal state in one compare-and-set that re-checks the premise (not paused, partition
still without segments); when the premise fails the new metadata is deleted, so a later pass starts clean.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from cuvee.cluster.assignment import (
    eligible_instances,
    partitions_with_segments,
    plan_consuming_segments,
    server_tag,
)
from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.records import IdealState
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import OffsetReset, TableConfig
from cuvee.controller.table_setup import read_start_offsets
from cuvee.errors import CuveeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewPartition:
    """Stream ``partition`` got its first consuming segment."""

    partition: int


def missing_partitions(ideal: IdealState, partition_count: int) -> list[int]:
    """Stream partitions (``0..partition_count-1``) with no segment in ``ideal``; none while paused."""
    if ideal.paused:
        return []
    return sorted(set(range(partition_count)) - partitions_with_segments(ideal))


def place_new_partitions(new_ideal: IdealState, segments: dict[int, str]) -> Callable[[IdealState], IdealState]:
    """The ideal state update adding ``segments`` (partition -> new segment) as planned in ``new_ideal``; a
    partition that meanwhile got a segment, or a paused table, is left alone."""

    def update(ideal: IdealState) -> IdealState:
        if ideal.paused:
            return ideal
        taken = partitions_with_segments(ideal)
        for partition, name in sorted(segments.items()):
            if partition not in taken:
                ideal = ideal.with_segment(name, new_ideal.segments[name])
        return ideal

    return update


def add_partitions(store: ClusterStore, config: TableConfig, now_ms: int, may_act: Callable[[], bool],
                   autotuned: tuple[int, float | None] | None = None) -> list[int]:
    """Create the first consuming segment of every new stream partition; returns the partitions placed.
    ``autotuned``: on an auto-tuned table, the row threshold the learner gives a first segment and its bytes per
    row. Raises CuveeError when the stream cannot be read or too few servers are live (the caller counts it)."""
    stream = config.stream
    assert stream is not None
    table = config.name_with_type
    found = store.ideal_state(table)
    if found is None or found.record.paused:
        return []
    offsets = read_start_offsets(stream, OffsetReset.SMALLEST)  # BadRequest (a CuveeError): stream unreadable
    missing = missing_partitions(found.record, len(offsets))
    if not missing or not may_act():
        return []
    live = eligible_instances(store.instances(), set(store.live_instance_ids()), server_tag(config.tenants.server))
    version = SchemaVersions(store).pin(schema_name_of(config))  # the new segments are built under it
    try:
        plan = plan_consuming_segments(
            table, {p: offsets[p] for p in missing}, config.replication, live, now_ms, existing=found.record,
            flush_rows=stream.flush_threshold_rows,
            autotuned_rows=(autotuned[0] if autotuned else stream.flush_autotune_initial_rows) if stream.auto_tuned
            else None,
            time_threshold_ms=stream.flush_threshold_time_ms, schema_version=version,
            index_config=config.indexing.extra)
    except AssignmentError as exc:
        raise CuveeError(f"cannot place consuming segments for new partitions {missing}: {exc}") from None
    learned = autotuned[1] if autotuned and stream.auto_tuned else None
    records = [dataclasses.replace(r, bytes_per_row=learned) for r in plan.segments if r.partition in missing]
    created = [r for r in records if store.create_segment(table, r)[1]]
    placed: list[int] = []
    stored = None
    if may_act():
        stored = store.update_ideal_state(
            table, place_new_partitions(plan.ideal_state, {r.partition: r.segment_name for r in records}))
    for record in records:
        if stored is not None and record.segment_name in stored.record.segments:
            placed.append(record.partition)
            log.warning("repair: %s has new stream partition %d: %s consumes from offset %s on %s", table,
                        record.partition, record.segment_name, record.start_offset,
                        ", ".join(stored.record.instances_of(record.segment_name)))
        elif record in created:  # premise failed: no orphan metadata
            store.delete(store.paths.segment(table, record.segment_name))
    return placed
