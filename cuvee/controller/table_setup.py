"""Realtime table creation (issue item 2) and the segment bookkeeping around pause/resume.

Creation reads the stream's partition count and start offsets (``auto.offset.reset`` smallest/largest), places one
sequence-0 consuming segment per partition with ``cuvee.cluster.assignment`` over the live servers tagged
``<serverTenant>_REALTIME``, and writes the segment records BEFORE the ideal state: a server told to consume must
find its start offset. Everything that can fail for the user's reasons (stream unreadable, too few servers) is
checked before anything is written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from cuvee.cluster.assignment import (
    TablePlan,
    complete_in_ideal_state,
    eligible_instances,
    next_segment_name,
    next_segment_record,
    plan_consuming_segments,
    rows_per_segment,
    server_tag,
)
from cuvee.cluster.errors import AssignmentError, RequirementFailedError
from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import OffsetReset, StreamConfig, TableConfig, TableType, raw_table_name
from cuvee.controller.errors import BadGateway, BadRequest
from cuvee.controller.pinned import repin_unplaced
from cuvee.errors import CuveeError
from cuvee.maintenance.config import REALTIME_TO_OFFLINE
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.stream import open_consumer

log = logging.getLogger(__name__)


def read_start_offsets(stream: StreamConfig, reset: OffsetReset | None = None) -> dict[int, int]:
    """Partition -> the offset a brand-new table starts at (earliest for ``smallest``, latest for ``largest``);
    ``reset`` overrides the table's ``auto.offset.reset`` (a new partition of a grown topic always starts at its
    earliest offset: ``cuvee.controller.repair_partitions``)."""
    reset = stream.offset_reset if reset is None else reset
    try:
        with open_consumer(stream.properties) as consumer:
            count = consumer.partition_count()
            if reset is OffsetReset.SMALLEST:
                return {p: consumer.earliest_offset(p) for p in range(count)}
            return {p: consumer.latest_offset(p) for p in range(count)}
    except CuveeError as exc:
        raise BadRequest(f"cannot read stream topic {stream.topic_name!r}: {exc}") from None
    except Exception:  # noqa: BLE001 - an OS error's text would tell a caller what exists on this host
        log.exception("reading the start offsets of stream topic %r failed", stream.topic_name)
        raise BadRequest(f"cannot read stream topic {stream.topic_name!r} at the configured location") from None


def latest_offsets(stream: StreamConfig, partitions: set[int]) -> dict[int, int]:
    """Partition -> latest offset in the stream (for lag reports); a stream failure is a 502."""
    return stream_offsets(stream, partitions, earliest=False)


def stream_offsets(stream: StreamConfig, partitions: set[int], *, earliest: bool) -> dict[int, int]:
    """Partition -> the stream's earliest (or latest) offset now; a stream failure is a 502."""
    try:
        with open_consumer(stream.properties) as consumer:
            if earliest:
                return {p: consumer.earliest_offset(p) for p in sorted(partitions)}
            return {p: consumer.latest_offset(p) for p in sorted(partitions)}
    except CuveeError as exc:
        raise BadGateway(f"cannot read stream topic {stream.topic_name!r}: {exc}") from None


def plan_table(store: ClusterStore, table: TableConfig, offsets: Mapping[int, int], now_ms: int,
               schema_version: int | None = None) -> TablePlan:
    """Consuming segments for every partition, placed on the tagged live servers (400 when too few), each
    built under ``schema_version`` of the table's schema."""
    stream = table.stream
    assert stream is not None
    tag = server_tag(table.tenants.server)
    instances = eligible_instances(store.instances(), set(store.live_instance_ids()), tag)
    try:
        return plan_consuming_segments(
            table.name_with_type,
            offsets,
            table.replication,
            instances,
            now_ms,
            flush_rows=stream.flush_threshold_rows,
            autotuned_rows=stream.flush_autotune_initial_rows if stream.auto_tuned else None,
            time_threshold_ms=stream.flush_threshold_time_ms,
            schema_version=schema_version,
            index_config=table.indexing.extra,
        )
    except AssignmentError as exc:
        raise BadRequest(f"table {table.name_with_type}: {exc} (servers must carry tag {tag!r})") from None


def write_plan(store: ClusterStore, table: str, plan: TablePlan) -> None:
    """Segment records first, then the ideal state; safe to re-run (existing records and segments are kept)."""
    for record in plan.segments:
        store.create_segment(table, record)

    def merge(ideal: IdealState) -> IdealState:
        for segment, replicas in plan.ideal_state.segments.items():
            if segment not in ideal.segments:
                ideal = ideal.with_segment(segment, replicas)
        return ideal

    store.update_ideal_state(table, merge)


def delete_table_state(store: ClusterStore, table: str) -> None:
    """Ideal state first (servers drop the segments), then segment metadata, lineage, the external view, the
    last rebalance's record, the reload and force-commit jobs, the served schema version (the schema's versions
    stay: ``cuvee.cluster.schemas``), the consuming segments reported to hold other partitions' rows (a recreated
    table's segments may take their names) and the maintenance tasks' watermarks — for an OFFLINE half also the
    REALTIME half's RealtimeToOfflineSegmentsTask watermark, which says what the offline half holds: kept, a
    recreated offline half would get only rows after it, and the time boundary would hide the rest."""
    paths = store.paths
    store.delete(paths.ideal_state(table))
    store.delete(paths.segments(table))
    store.delete(paths.lineage(table))
    store.delete(paths.external_view(table))
    store.delete(paths.rebalance(table))
    store.delete(paths.tasks(table))
    store.delete(paths.jobs(table))
    store.delete(paths.served_schema(table))
    store.delete(paths.mixed_partitions(table))
    if table.endswith(TableType.OFFLINE.suffix):
        store.delete(paths.task(raw_table_name(table) + TableType.REALTIME.suffix, REALTIME_TO_OFFLINE))


def next_row_threshold(stream: StreamConfig, ideal: IdealState, done: SegmentRecord) -> int:
    """The row threshold of a partition's next segment with a fixed flush size (the seed's rule)."""
    if stream.flush_threshold_rows > 0:
        return rows_per_segment(stream.flush_threshold_rows, ideal)
    return max(1, done.row_threshold or stream.flush_autotune_initial_rows)


def latest_segments(ideal: IdealState) -> dict[int, LLCSegmentName]:
    """Each partition's latest LLC segment in the ideal state."""
    latest: dict[int, LLCSegmentName] = {}
    for name in ideal.segments:
        try:
            llc = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
        if llc.partition not in latest or llc.sequence > latest[llc.partition].sequence:
            latest[llc.partition] = llc
    return latest


def resume_partitions(store: ClusterStore, table: TableConfig, now_ms: int,
                      start_offsets: Mapping[int, int] | None = None
                      ) -> list[tuple[str, SegmentRecord, SegmentRecord]]:
    """After a resume: give every partition whose latest segment was committed while paused (so no next segment
    was made) a new consuming segment on the same instances, from its end offset, or from ``start_offsets`` (a
    resume's ``consumeFrom``) where it names the partition, built under the schema's version now. Returns each new
    segment's name, the committed segment it follows and the new segment's record as stored.

    The next segment's record may exist already without being in the ideal state: a pause landed between steps 2
    and 3 of a commit, or a controller died in an earlier consumeFrom between the record and the ideal state. It is
    reused, its schema version set to the schema's now and, with ``start_offsets``, its start offset to what this
    resume asks, by compare-and-set (``repin_unplaced``): no server consumes it yet (it is in no ideal state, and ``consumeFrom`` runs only while the
    table is paused with nothing consuming, so no commit or repair places it meanwhile)."""
    stream = table.stream
    assert stream is not None
    name = table.name_with_type
    created: list[tuple[str, SegmentRecord, SegmentRecord]] = []
    found = store.ideal_state(name)
    if found is None:
        return created
    version: int | None = None
    for llc in latest_segments(found.record).values():
        replicas = found.record.segments.get(llc.name, {})
        if SegmentState.ONLINE not in replicas.values():
            continue
        done = store.find_segment(name, llc.name)
        if done is None or done.record.status is not SegmentStatus.DONE:
            continue
        current = store.ideal_state(name)
        assert current is not None
        if version is None:
            version = SchemaVersions(store).pin(schema_name_of(table))
        next_name = next_segment_name(done.record, store.segment_names(name), now_ms)
        rows = next_row_threshold(stream, current.record, done.record)
        record = next_segment_record(done.record, next_name, rows, now_ms, schema_version=version,
                                     index_config=table.indexing.extra)
        start = start_offsets.get(llc.partition) if start_offsets is not None else None
        if start is not None:
            record = dataclasses.replace(record, start_offset=start)
        stored, new = store.create_segment(name, record)
        placed_record = stored.record
        if not new:  # a leftover: it starts where this resume asks, under the schema's version now
            before = stored.record.start_offset
            placed_record = repin_unplaced(store, table, next_name, start) or stored.record
            if start is not None and placed_record.start_offset == start != before:
                log.warning("%s partition %d: %s was created earlier (from offset %s) and never placed; it starts "
                            "at offset %d as this resume asks", name, llc.partition, next_name, before, start)
        store.update_ideal_state(name, complete_in_ideal_state(llc.name, next_name))
        created.append((next_name, done.record, placed_record))
        log.info("resumed %s: partition %d consumes %s from offset %s", name, llc.partition, next_name,
                 placed_record.start_offset)
    return created
