"""The leader's periodic repair task (DESIGN.md section 5; Pinot's RealtimeSegmentValidationManager), first duties.

Shaped like Pinot's ControllerPeriodicTask: every ``interval`` seconds, while this controller leads, each realtime
table is planned by the pure ``plan_repairs`` (ideal state + segment metadata + ``now`` -> repairs) and the shell
carries the repairs out:

* ``FinishCommit``: a segment whose metadata is DONE but which no replica holds ONLINE in the ideal state (commit
  step 1 landed, step 2 or 3 did not), once its commit is older than ``max_segment_completion_seconds`` (younger,
  the committing controller may still finish it: both would place a next segment). Runs the committer's
  idempotent ``finish``.
* ``RecreateConsuming``: the partition's latest segment is IN_PROGRESS and every replica is OFFLINE (all consumers
  gave up). A new segment (next sequence) consumes from the same start offset, or from the stream's earliest offset
  when retention removed it: a warning, and the lost offsets are counted (``GET /tables/{t}/repairStatus``). The
  abandoned segment leaves the ideal state in the same update, and its metadata goes: brokers would otherwise
  report it unavailable (305) and hold back the partition's later segments for as long as it stayed.
* ``RestartCommitting``: a segment is COMMITTING (a pauseless commit started; its successor consumes from its end
  offset) but every replica gave up (all OFFLINE), and its commit start is older than
  ``max_segment_completion_seconds``. It goes CONSUMING again on the live tagged servers, which consume exactly
  its offsets and commit it (a successor cannot be made instead: the next sequence exists).
* ``CreateSuccessor``: the latest segment is DONE and ONLINE with no successor (a commit while paused and a resume
  that did not finish): a new segment from its end offset.
* ``NewPartition`` (``repair_partitions``): the stream has more partitions than the ideal state has segments for:
  each new one gets its first consuming segment from the table's ``auto.offset.reset`` offset.
* ``UploadPeerOnly`` (``repair_upload``, only with a deep store): a DONE segment with an empty download URI that a
  live server holds ONLINE is fetched from it, CRC-checked, put into the deep store and its URI set.
* ``NameCrc``: the ideal state names a CRC for a committed segment (one an upsert compaction swapped, or one
  pushed) that is not the CRC its record has: the writer died between the record and the ideal state
  (``cuvee.controller.api_compaction``, ``segment_push``). The record's CRC is named, so the replicas reload the
  copy on record. Both writers write the record first and the ideal state second under the table's lock
  (``TABLE_LOCKS``), which this repair takes too, so it never names a CRC a writer is about to replace.

New segments go on the live tagged servers (``cuvee.cluster.assignment``), metadata before ideal state; the ideal
state update re-checks the plan's premise (not paused, still the latest, still all OFFLINE) inside its
compare-and-set, so a run racing a commit or a pause changes nothing. Nothing is planned for a paused table
except finishing commits (``finish`` itself places no next segment while paused). A second run finds nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from cuvee.cluster.assignment import (
    assign_partition,
    eligible_instances,
    new_segment_record,
    next_segment_name,
    server_tag,
)
from cuvee.cluster.errors import AssignmentError, ClusterStateError
from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.commit import CommitAbandoned, SegmentCommitter
from cuvee.controller.faults import FaultInjected
from cuvee.controller.periodic import PeriodicTask, camel_keys
from cuvee.controller.pinned import repin_unplaced
from cuvee.controller.repair_partitions import NewPartition, add_partitions
from cuvee.controller.repair_plan import (
    CreateSuccessor,
    FinishCommit,
    RecreateConsuming,
    Repair,
    RestartCommitting,
    place_successor,
    plan_repairs,
)
from cuvee.controller.repair_upload import PeerUploader, UploadError, UploadPeerOnly, plan_uploads
from cuvee.controller.table_locks import TABLE_LOCKS, TableBusy
from cuvee.controller.table_setup import next_row_threshold
from cuvee.errors import CuveeError
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.spi.deepstore import DeepStore
from cuvee.spi.metastore import MetadataStoreError
from cuvee.story import StoryWriter
from cuvee.stream import open_consumer

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)

__all__ = ["CreateSuccessor", "Done", "FinishCommit", "NameCrc", "RecreateConsuming", "RepairTask",
           "RestartCommitting", "plan_crc_names", "plan_repairs", "router"]


@dataclass(frozen=True)
class NameCrc:
    """The ideal state names ``named`` for ``segment``; its record has ``crc``."""

    segment: str
    named: int
    crc: int


def plan_crc_names(ideal: IdealState, records: Mapping[str, SegmentRecord]) -> list[NameCrc]:
    """Committed segments whose CRC in the ideal state is not their record's (a swap or push cut short). A segment
    the ideal state names no CRC for is left alone: committed stream segments have none, and never change."""
    out = []
    for segment, named in sorted(ideal.crcs.items()):
        record = records.get(segment)
        if segment not in ideal.segments or record is None or record.is_consuming or record.crc is None:
            continue
        if record.crc != named:
            out.append(NameCrc(segment, named, record.crc))
    return out


Done = Repair | NewPartition | UploadPeerOnly | NameCrc  # what a pass reports it carried out


# ---- the shell ----------------------------------------------------------------------------------------------


@dataclass
class TableRepairStats:
    """Counters per table since this controller started (inspectable through ``repairStatus``)."""

    runs: int = 0
    commits_finished: int = 0
    segments_recreated: int = 0
    commits_restarted: int = 0
    successors_created: int = 0
    data_loss_events: int = 0
    offsets_lost: int = 0
    partitions_added: int = 0
    segments_uploaded: int = 0
    upload_failures: int = 0
    crcs_named: int = 0
    failures: int = 0
    last_error: str = ""


class RepairTask(PeriodicTask):
    """``start()`` / ``stop()`` the periodic thread; ``run_once()`` one pass over every realtime table (tests
    and the thread). ``should_run()`` (leader and connected) is checked before each table and each repair, and
    the committer checks its own ``may_act`` before each step, so leadership loss stops it at once."""

    def __init__(
        self,
        store: ClusterStore,
        committer: SegmentCommitter,
        clock_ms: Callable[[], int],
        max_completion_ms: int,
        interval: float,
        should_run: Callable[[], bool],
        *,
        stop_timeout: float = 5.0,
        deep_store: DeepStore | None = None,
        download_timeout: float = 30.0,
        peer_headers: Mapping[str, str] | None = None,
        story: StoryWriter | None = None,
        peer_verify: ssl.SSLContext | bool = True,
    ):
        super().__init__("repair", interval, should_run, stop_timeout)
        self.store = store
        self.committer = committer
        self.clock_ms = clock_ms
        self.max_completion_ms = max_completion_ms
        self.deep_store = deep_store  # None: no deep store configured, peer-only segments stay peer-only
        self.download_timeout = download_timeout
        self.peer_headers = dict(peer_headers or {})
        self.story = story
        self.peer_verify = peer_verify  # what a server needs to know the controller downloads
        self.stats: dict[str, TableRepairStats] = {}
        self.passes = 0
        self.failed_passes = 0
        self.received_bytes = 0  # segment archive bytes fetched from peers to upload them (peer-only segments)
        self._run_lock = threading.Lock()

    def run_pass(self) -> None:
        try:
            self.run_once()
        except Exception:  # noqa: BLE001  (the thread must survive anything; the next pass retries)
            self.failed_passes += 1
            log.exception("repair pass failed")

    def run_once(self) -> list[Done]:
        """One pass; returns the repairs carried out."""
        done: list[Done] = []
        with self._run_lock:
            catalog = Catalog(self.store)
            for name in catalog.table_names():
                if not self.should_run():
                    break
                config = catalog.find_table(name)
                if config is None:
                    continue
                self._serve_schema(config)
                if not config.is_realtime or config.stream is None:
                    continue
                done.extend(self._repair_table(config))
            self.passes += 1
        return done

    def _serve_schema(self, config: TableConfig) -> None:
        """A table without a served schema version gets the schema's version now (``SchemaVersions``), so its
        replicas, restarted ones included, serve one schema (rev9 #5 on tables from before versions)."""
        try:
            SchemaVersions(self.store).serve_if_missing(config)
        except (ClusterStateError, MetadataStoreError, CuveeError) as exc:  # the schema is gone: nothing to serve
            log.warning("repair: no served schema version written for %s: %s", config.name_with_type, exc)

    def run_table(self, config: TableConfig) -> list[Done]:
        """One pass over one realtime table now (``POST /tables/{table}/repair``), under the pass lock."""
        with self._run_lock:
            return self._repair_table(config)

    def _repair_table(self, config: TableConfig) -> list[Done]:
        table = config.name_with_type
        stats = self.stats.setdefault(table, TableRepairStats())
        stats.runs += 1
        found = self.store.ideal_state(table)
        if found is None:
            return []
        records = {}
        for segment in found.record.segments:
            versioned = self.store.find_segment(table, segment)
            if versioned is not None:
                records[segment] = versioned.record
        done: list[Done] = []
        for repair in plan_repairs(found.record, records, self.clock_ms(), self.max_completion_ms):
            if not self.should_run():
                break
            try:
                if self._apply(config, repair, records, stats):
                    done.append(repair)
            except (CommitAbandoned, FaultInjected, ClusterStateError, MetadataStoreError, CuveeError) as exc:
                stats.failures += 1
                stats.last_error = f"{repair}: {exc}"
                log.warning("repair of %s failed (%s): %s", table, repair, exc)
        if self.should_run():
            done.extend(self.name_crcs(table, found.record, records, stats))
        if self.should_run():
            done.extend(self._add_partitions(config, stats))
        if self.should_run() and self.deep_store is not None:
            done.extend(self._upload_peer_only(config, found.record, records, stats))
        return done

    def name_crcs(self, table: str, ideal: IdealState, records: Mapping[str, SegmentRecord],
                  stats: TableRepairStats | None = None) -> list[Done]:
        """``NameCrc`` repairs, each re-checked under the table's lock against the record as it is then."""
        stats = stats if stats is not None else self.stats.setdefault(table, TableRepairStats())
        done: list[Done] = []
        for item in plan_crc_names(ideal, records):
            if not self.should_run():
                break
            try:
                with TABLE_LOCKS.hold(table, timeout_seconds=1.0):  # busy: a push or swap runs; next pass
                    found = self.store.find_segment(table, item.segment)
                    crc = found.record.crc if found is not None and not found.record.is_consuming else None
                    if crc is None:
                        continue

                    def named(current: IdealState, segment: str = item.segment, crc: int = crc,
                              seen: int | None = item.named) -> IdealState:
                        if segment not in current.segments or current.crcs.get(segment) != seen:
                            return current  # changed since planned (a push of a deposed leader, say): next pass
                        return current.with_crcs({segment: crc})

                    stored = self.store.update_ideal_state(table, named)
            except (TableBusy, ClusterStateError, MetadataStoreError, CuveeError) as exc:
                stats.failures += 1
                stats.last_error = f"{item}: {exc}"
                log.warning("repair of %s: naming the CRC of %s failed (next pass retries): %s", table,
                            item.segment, exc)
                continue
            if stored.record.crcs.get(item.segment) == crc and crc != item.named:
                stats.crcs_named += 1
                log.warning("repair: %s/%s: the ideal state named CRC %s, its record %s (a swap or push cut "
                            "short); the replicas reload the copy on record", table, item.segment, item.named, crc)
                done.append(NameCrc(item.segment, item.named, crc))
        return done

    def _add_partitions(self, config: TableConfig, stats: TableRepairStats) -> list[Done]:
        try:
            first = self.committer.autotuned_rows(config) if config.stream is not None and config.stream.auto_tuned \
                else None
            added = add_partitions(self.store, config, self.clock_ms(), self.should_run, autotuned=first)
        except (ClusterStateError, MetadataStoreError, CuveeError) as exc:
            stats.failures += 1
            stats.last_error = f"new partitions: {exc}"
            log.warning("repair of %s: adding new stream partitions failed: %s", config.name_with_type, exc)
            return []
        stats.partitions_added += len(added)
        return [NewPartition(p) for p in added]

    def _upload_peer_only(self, config: TableConfig, ideal: IdealState, records: Mapping[str, SegmentRecord],
                          stats: TableRepairStats) -> list[Done]:
        assert self.deep_store is not None
        table = config.name_with_type
        live = set(self.store.live_instance_ids())
        uploader = PeerUploader(self.store, self.deep_store, self.download_timeout, self.peer_headers,
                                self.peer_verify)
        done: list[Done] = []
        for item in plan_uploads(ideal, self.store.external_view(table), records, live):
            if not self.should_run():
                break
            try:
                uploader.upload(table, item, records[item.segment])
            except (UploadError, ClusterStateError, MetadataStoreError, CuveeError) as exc:
                stats.failures += 1
                stats.upload_failures += 1
                stats.last_error = f"{item}: {exc}"
                log.warning("repair of %s: peer-only upload failed (next pass retries): %s", table, exc)
                continue
            finally:
                self.received_bytes += uploader.received_bytes
                uploader.received_bytes = 0
            stats.segments_uploaded += 1
            done.append(item)
        return done

    def _apply(self, config: TableConfig, repair: Repair, records: Mapping[str, SegmentRecord],
               stats: TableRepairStats) -> bool:
        table = config.name_with_type
        if isinstance(repair, FinishCommit):
            outcome = self.committer.finish(table, repair.segment)
            stats.commits_finished += 1
            log.warning("repair finished the half-done commit of %s (next %s)", repair.segment,
                        outcome.next_segment or "none: paused")
            return True
        if isinstance(repair, RestartCommitting):
            restarted = self._restart_committing(config, repair)
            stats.commits_restarted += 1 if restarted else 0
            return restarted
        start = repair.start_offset
        if isinstance(repair, RecreateConsuming):
            start = self._available_offset(config, repair, stats)
        placed = self._create(config, repair.latest, records[repair.latest], start, all_offline=isinstance(
            repair, RecreateConsuming))
        if placed and isinstance(repair, RecreateConsuming):
            stats.segments_recreated += 1
        elif placed:
            stats.successors_created += 1
        return placed

    def _restart_committing(self, config: TableConfig, repair: RestartCommitting) -> bool:
        """The segment CONSUMING on live tagged servers, if the ideal state still has every replica OFFLINE."""
        table = config.name_with_type
        record = self.store.segment(table, repair.segment).record
        if record.status is not SegmentStatus.COMMITTING:
            return False
        instances = self._instances_for(config, repair.partition)

        def update(ideal: IdealState) -> IdealState:
            replicas = ideal.segments.get(repair.segment)
            if ideal.paused or not replicas or set(replicas.values()) != {SegmentState.OFFLINE}:
                return ideal
            return ideal.with_segments_in(repair.segment, instances, SegmentState.CONSUMING)

        if not self.should_run():
            return False
        stored = self.store.update_ideal_state(table, update)
        restarted = SegmentState.CONSUMING in stored.record.segments.get(repair.segment, {}).values()
        if restarted:
            log.warning("repair: %s's commit stalled with every replica OFFLINE; %s consumes offsets %s..%s again "
                        "on %s to commit it", table, repair.segment, record.start_offset, record.end_offset,
                        ", ".join(instances))
        return restarted

    def _instances_for(self, config: TableConfig, partition: int) -> tuple[str, ...]:
        tag = server_tag(config.tenants.server)
        live = eligible_instances(self.store.instances(), set(self.store.live_instance_ids()), tag)
        try:
            return assign_partition(partition, config.replication, live)
        except AssignmentError as exc:
            raise CuveeError(f"cannot place a consuming segment for partition {partition}: {exc}") from None

    def _available_offset(self, config: TableConfig, repair: RecreateConsuming, stats: TableRepairStats) -> int:
        """The start offset if the stream still has it, else its earliest offset (the gap is lost data)."""
        assert config.stream is not None
        with open_consumer(config.stream.properties) as consumer:
            earliest = consumer.earliest_offset(repair.partition)
        if earliest <= repair.start_offset:
            return repair.start_offset
        stats.data_loss_events += 1
        stats.offsets_lost += earliest - repair.start_offset
        log.warning(
            "DATA LOSS: %s partition %d: offsets %d..%d are gone from the stream (retention); the new consuming "
            "segment after %s starts at %d", config.name_with_type, repair.partition, repair.start_offset,
            earliest - 1, repair.latest, earliest)
        return earliest

    def _create(self, config: TableConfig, latest: str, record: SegmentRecord, start: int, *, all_offline: bool
                ) -> bool:
        """Metadata, then the ideal state (which re-checks the premise). True when the new segment was placed."""
        stream = config.stream
        assert stream is not None
        table = config.name_with_type
        partition = LLCSegmentName.parse(latest).partition
        ideal = self.store.ideal_state(table)
        assert ideal is not None
        instances = self._instances_for(config, partition)
        if config.is_upsert:  # the consuming segment goes where the partition's keys are, if those replicas live
            live = set(self.store.live_instance_ids())
            holders = tuple(sorted(i for i in ideal.record.segments.get(latest, {}) if i in live))
            instances = holders or instances
        now = self.clock_ms()
        successor = next_segment_name(record, self.store.segment_names(table), now)
        learned = None
        if stream.auto_tuned:  # what the learner says now, not the abandoned segment's threshold
            rows, learned = self.committer.autotuned_rows(config, partition)
        else:
            rows = next_row_threshold(stream, ideal.record, record)
        llc = LLCSegmentName.parse(successor)
        version = SchemaVersions(self.store).pin(schema_name_of(config))  # built under the schema as it is now
        new = dataclasses.replace(
            new_segment_record(successor, partition, llc.sequence, start, rows, stream.flush_threshold_time_ms, now,
                               version, index_config=config.indexing.extra),
            bytes_per_row=learned)
        if not self.should_run():
            return False
        _, created = self.store.create_segment(table, new)
        if not created:  # a leftover (a commit or a repair that died before placing it): it starts where this
            repin_unplaced(self.store, config, successor, start)  # repair found data, under the schema now
        stored = None
        if self.should_run():
            stored = self.store.update_ideal_state(table, place_successor(latest, successor, instances,
                                                                          all_offline=all_offline))
        placed = stored is not None and successor in stored.record.segments
        if not placed and created:  # the premise failed: no orphan metadata a later commit could pick up
            self.store.delete(self.store.paths.segment(table, successor))
        if placed:
            log.warning("repair: %s partition %d consumes %s from offset %d on %s", table, partition, successor,
                        start, ", ".join(instances))
            if self.story is not None:
                kind = "repair.recreatedConsuming" if all_offline else "repair.createdSuccessor"
                self.story.record(table, latest, kind, successor=successor, startOffset=start)
                self.story.record(table, successor, "createdByRepair", after=latest, startOffset=start,
                                  replicas=", ".join(instances))
        if placed and all_offline:
            self._forget_abandoned(table, latest)
        return placed

    def _forget_abandoned(self, table: str, segment: str) -> None:
        """The metadata of a segment that left the ideal state without committing, if it is still IN_PROGRESS
        (best effort: a leftover record is in no ideal state, and nothing reads it)."""
        found = self.store.find_segment(table, segment)
        if found is not None and found.record.status is SegmentStatus.IN_PROGRESS:
            self.store.delete(self.store.paths.segment(table, segment), expected_version=found.version)
            self.store.delete(self.store.paths.story(table, segment))

    def status(self, table: str) -> dict[str, Any]:
        stats = self.stats.get(table, TableRepairStats())
        return {"table": table, "passes": self.passes, "failedPasses": self.failed_passes, **camel_keys(asdict(stats))}


def router(ctl: Controller) -> APIRouter:
    """``GET /tables/{table}/repairStatus``: this controller's repair counters for the REALTIME table;
    ``POST /tables/{table}/repair``: repair it now (the leader only), answering what was done."""
    api = APIRouter()

    @api.post("/tables/{table}/repair")
    def repair_now(table: str) -> dict[str, Any]:
        ctl.require_leader()
        config = Catalog(ctl.store).realtime(table)
        done = ctl.repair.run_table(config)
        return {"table": config.name_with_type, "repairs": [str(repair) for repair in done],
                **ctl.repair.status(config.name_with_type)}

    @api.get("/tables/{table}/repairStatus")
    def repair_status(table: str) -> dict[str, Any]:
        config = Catalog(ctl.store).realtime(table)  # 404 when there is none
        return {**ctl.repair.status(config.name_with_type), "leader": ctl.is_leader,
                "intervalSeconds": ctl.config.repair_interval_seconds}

    return api
