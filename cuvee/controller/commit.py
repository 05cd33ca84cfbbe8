"""The lead controller's three commit steps (DESIGN.md section 4), each a compare-and-set, each safe to re-run.

(1) segment metadata IN_PROGRESS -> DONE with end offset and download URI; (2) the next segment's metadata from
the end offset, with the next row threshold; (3) the ideal state: committed segment ONLINE, next one CONSUMING on
the same instances. Steps 2 and 3 derive everything from the DONE record, so ``finish`` can complete a commit
that stopped after step 1 (a crashed controller, a metadata-store error; later the repair task). Before step 3 the
age of step 1 is checked against ``max_segment_completion_ms``: a commit that took too long is left to repair, so a
slow controller and the repair never both place a next segment. Fault points sit between the steps for failure
tests.

Pauseless tables (``ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled``) run a commit start
first, when the committer's segmentCommitStart is accepted (``start_next``): the segment's end offset is fixed in
its metadata (IN_PROGRESS -> COMMITTING), the next segment's metadata is created from it (step 2) and placed
CONSUMING on the same instances, the committing segment staying CONSUMING. The steps above then run at commitEnd
as for any table (step 1 takes COMMITTING at the same end offset to DONE; steps 2 and 3 find the next segment in
place). The commit start is best effort: whatever of it did not land, commitEnd does.

Pause and resume race with commits, so whether a next segment is placed is decided from the ``paused`` flag of the
very ideal state step 3 compare-and-sets: unpaused at that moment, the next segment's metadata is created first
(idempotent) and placed in that same update; paused, none is placed (resume does it later). Step 2's early read
of ``paused`` is only a guess that saves a retry. Any interleaving with pause/resume thus ends with exactly one
consuming segment per unpaused partition.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cuvee.cluster.assignment import (
    Placement,
    complete_in_ideal_state,
    mark_committing,
    mark_done,
    next_segment_name,
    next_segment_record,
    place_on_tagged,
    placement_pool,
    server_tag,
    start_successor_in_ideal_state,
    successor_in,
)
from cuvee.cluster.errors import ClusterStateError
from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.cluster.threshold import EACH, CommittedSegment, SizeLearner, SizePolicy
from cuvee.config import TableConfig, TableType
from cuvee.controller.catalog import Catalog
from cuvee.controller.completion_types import CommitSegmentMetadata, CommitStarted
from cuvee.controller.faults import (
    COMMIT_AFTER_STEP1,
    COMMIT_AFTER_STEP2,
    COMMIT_AFTER_STEP3,
    COMMIT_BEFORE_STEP1,
    COMMIT_START_AFTER_NEXT,
    COMMIT_START_AFTER_PIN,
    FaultInjected,
    fault,
)
from cuvee.controller.pinned import repin_unplaced
from cuvee.controller.table_setup import next_row_threshold
from cuvee.errors import CuveeError
from cuvee.metrics.controller import ControllerMetrics
from cuvee.segment.partitioning import as_declared
from cuvee.story import StoryWriter
from cuvee.spi.metastore import MetadataStoreError

log = logging.getLogger(__name__)


class CommitAbandoned(CuveeError):
    """The commit stopped before step 3 on purpose (leadership lost, too old); repair finishes it later."""


class _NextSegmentMissing(Exception):
    """Raised from inside step 3's update function: the table is unpaused in the ideal state being updated, but
    the next segment's metadata was not created (``paused`` was read as true earlier). Carries that ideal state."""

    def __init__(self, ideal: IdealState):
        super().__init__("the next segment's metadata is missing")
        self.ideal = ideal


@dataclass(frozen=True)
class CommitOutcome:
    """What a commit did: the committed record and the partition's next segment in the ideal state (None when
    the table was paused at step 3)."""

    done: SegmentRecord
    next_segment: str | None


def realtime_name(raw_table: str) -> str:
    return raw_table + TableType.REALTIME.suffix


def keeps_partitions_together(config: TableConfig) -> bool:
    """Queries read each partition from one replica group (upsert tables; ``strictReplicaGroup`` routing): a
    partition's segments must stay on the same servers, so placement at commit and rebalance leave them be."""
    return config.is_upsert or config.routing.instance_selector_type == "strictReplicaGroup"


class SegmentCommitter:
    """Runs commit steps against one cluster. ``may_act()`` is checked before each step: a controller that lost
    leadership stops at once. Auto-tuned tables learn their row threshold in a per-table SizeLearner."""

    def __init__(
        self,
        store: ClusterStore,
        clock_ms: Callable[[], int],
        max_segment_completion_ms: int,
        may_act: Callable[[], bool] = lambda: True,
        metrics: ControllerMetrics | None = None,
        story: StoryWriter | None = None,
        place_archive: Callable[[str, str, str], str] | None = None,
    ):
        """``place_archive(table, segment, location)``: moves a committer's upload into the segment's place in
        the deep store and returns the URI to record ("" when it cannot: peers serve the segment)."""
        self.place_archive = place_archive
        self.store = store
        self.catalog = Catalog(store)
        self.clock_ms = clock_ms
        self.max_segment_completion_ms = max_segment_completion_ms
        self.may_act = may_act
        self.metrics = metrics
        self.story = story
        self._learners: dict[str, SizeLearner] = {}
        self._lock = threading.Lock()

    def commit(self, action: CommitSegmentMetadata, *, forced: bool = False) -> bool:
        """All three steps for the FSM's action; True when the segment is committed and the ideal state flipped.
        False when a step failed or stopped, a metadata-store error included (step 1 may have landed)."""
        table = realtime_name(action.segment.table)
        started = time.perf_counter()
        outcome = "failed"
        try:
            done = self._commit(table, action, forced)
            outcome = "committed" if done else "failed"
            return done
        finally:
            if self.metrics is not None:
                self.metrics.commits.labels(table, outcome).inc()
                self.metrics.commit_seconds.labels(table).observe(time.perf_counter() - started)

    def _commit(self, table: str, action: CommitSegmentMetadata, forced: bool) -> bool:
        try:
            self._check_leader()
            fault(COMMIT_BEFORE_STEP1)
            location = self._archive_location(table, action)
            config = self.catalog.find_table(table)
            step1 = mark_done(
                end_offset=action.end_offset,
                total_docs=action.total_docs,
                size_bytes=action.size_bytes,
                crc=action.crc,
                download_uri=location,
                now_ms=self.clock_ms(),
                time_min=action.time_min,
                time_max=action.time_max,
                # kept only when computed by the function the table declares now: nothing else is pruned by
                partitions=as_declared(config.indexing.extra, action.partitions) if config is not None else None,
            )
            done = self.store.update_segment(table, action.segment.name, step1).record
            fault(COMMIT_AFTER_STEP1)
            outcome = self._finish(table, done, forced=forced)
            if self.story is not None:
                self.story.record(table, action.segment.name, "committed", committer=action.instance,
                                  endOffset=done.end_offset, totalDocs=done.total_docs, crc=done.crc,
                                  sizeBytes=done.size_bytes, downloadUri=done.download_uri or "(peers only)",
                                  nextSegment=outcome.next_segment or "(none: paused)", forced=forced)
            return True
        except (ClusterStateError, MetadataStoreError, CommitAbandoned, FaultInjected) as exc:
            log.warning("commit of %s by %s at offset %d stopped: %s", action.segment, action.instance,
                        action.end_offset, exc)
            if self.story is not None:
                self.story.record(table, action.segment.name, "commitStopped", committer=action.instance,
                                  endOffset=action.end_offset, reason=type(exc).__name__)
            return False

    def _archive_location(self, table: str, action: CommitSegmentMetadata) -> str:
        """Where the committed archive is: the committer's upload moved into the segment's place. Not moved when
        the segment is DONE already (a retried or late commitEnd: the archive in place is the committed build's
        and must not be overwritten — at another end offset this commit is refused)."""
        location = action.location
        if not location or self.place_archive is None:
            return location
        found = self.store.find_segment(table, action.segment.name)
        if found is not None and found.record.status is SegmentStatus.DONE:
            if found.record.end_offset != action.end_offset:
                raise CommitAbandoned(f"{action.segment.name} is already DONE at end offset "
                                      f"{found.record.end_offset}, not {action.end_offset}")
            return found.record.download_uri or ""
        return self.place_archive(table, action.segment.name, location)

    def start_next(self, action: CommitStarted) -> str | None:
        """A pauseless table's commit start (see the module docstring); the placed next segment, or None when the
        table is not pauseless, is paused, or a step failed (logged: commitEnd's steps do it again)."""
        table = realtime_name(action.segment.table)
        name = action.segment.name
        try:
            config = self.catalog.find_table(table)
            if config is None or config.stream is None or not config.ingestion.pauseless_consumption:
                return None
            self._check_leader()
            record = self.store.update_segment(table, name, mark_committing(action.end_offset, self.clock_ms())).record
            fault(COMMIT_START_AFTER_PIN)
            if record.status is not SegmentStatus.COMMITTING:
                return None  # already DONE: the commit itself placed the next segment
            ideal = self.store.ideal_state(table)
            if ideal is None:
                raise CommitAbandoned(f"table {table} has no ideal state")
            if ideal.record.paused:
                return None  # resume, or the commit's step 3, places it
            next_name = self._create_next(table, config, ideal.record, record, False, self.clock_ms())
            self._check_leader()
            repin_unplaced(self.store, config, next_name)  # a reload since its record was made: today's version
            place = self._placement(config, record)

            def update(current: IdealState) -> IdealState:
                return current if current.paused else start_successor_in_ideal_state(name, next_name, place)(current)

            stored = self.store.update_ideal_state(table, update)
            fault(COMMIT_START_AFTER_NEXT)
            placed = successor_in(stored.record, name)
            log.info("commit of %s started at offset %d; %s consumes meanwhile", name, action.end_offset,
                     placed or "(paused) nothing")
            return placed
        except (ClusterStateError, MetadataStoreError, CommitAbandoned, FaultInjected) as exc:
            log.warning("commit start of %s by %s at offset %d stopped (commitEnd will finish it): %s", name,
                        action.instance, action.end_offset, exc)
            return None

    def finish(self, table: str, segment: str) -> CommitOutcome:
        """Steps 2 and 3 of a segment whose step 1 landed (re-running a finished commit changes nothing)."""
        done = self.store.segment(table, segment).record
        if done.status is not SegmentStatus.DONE:
            raise CommitAbandoned(f"segment {segment} is {done.status.value}, not DONE: step 1 has not run")
        return self._finish(table, done, forced=False, check_age=False)

    def _finish(self, table: str, done: SegmentRecord, *, forced: bool, check_age: bool = True) -> CommitOutcome:
        config = self.catalog.find_table(table)
        if config is None or config.stream is None:
            raise CommitAbandoned(f"table {table} is gone")
        ideal = self.store.ideal_state(table)
        if ideal is None:
            raise CommitAbandoned(f"table {table} has no ideal state")
        now = self.clock_ms()
        next_name: str | None = None
        if not ideal.record.paused:  # step 2; step 3 re-checks ``paused`` in its own compare-and-set
            next_name = self._create_next(table, config, ideal.record, done, forced, now)
        fault(COMMIT_AFTER_STEP2)
        self._check_leader()
        if next_name is not None:  # a reload since step 2 force-committed only what consumes: pin it to the
            repin_unplaced(self.store, config, next_name)  # schema now, as no server consumes it yet
        if check_age and done.commit_time_ms is not None:
            age = self.clock_ms() - done.commit_time_ms
            if age > self.max_segment_completion_ms:
                raise CommitAbandoned(
                    f"step 1 of {done.segment_name} is {age} ms old (> {self.max_segment_completion_ms}); "
                    "leaving step 3 to repair"
                )
        placed = self._complete(table, config, done, forced, next_name, now)
        fault(COMMIT_AFTER_STEP3)
        log.info("committed %s at offset %s; next %s", done.segment_name, done.end_offset, placed or "(paused)")
        return CommitOutcome(done, placed)

    def _create_next(
        self, table: str, config: TableConfig, ideal: IdealState, done: SegmentRecord, forced: bool, now: int
    ) -> str:
        """Step 2: the next segment's metadata (create-if-absent, so the name of an earlier attempt is reused, with
        the schema version it named, which ``repin_unplaced`` brings to the schema's version now)."""
        stream = config.stream
        assert stream is not None
        self._check_leader()
        next_name = next_segment_name(done, self.store.segment_names(table), now)
        rows, learned = self._next_rows(config, ideal, done, forced)
        version = SchemaVersions(self.store).pin(schema_name_of(config))
        record = dataclasses.replace(next_segment_record(done, next_name, rows, now, stream.flush_threshold_time_ms,
                                                         version, index_config=config.indexing.extra),
                                     bytes_per_row=learned)
        if not self.store.create_segment(table, record)[1]:  # an earlier attempt's, maybe under an older schema
            repin_unplaced(self.store, config, next_name)
        return next_name

    def _complete(
        self, table: str, config: TableConfig, done: SegmentRecord, forced: bool, next_name: str | None, now: int
    ) -> str | None:
        """Step 3, deciding from the ``paused`` flag of the ideal state it updates. Returns the placed successor."""
        committed = done.segment_name
        place = self._placement(config, done)

        def update(ideal: IdealState) -> IdealState:
            missing = next_name is None and successor_in(ideal, committed) is None
            if not ideal.paused and missing and ideal.instances_of(committed):
                raise _NextSegmentMissing(ideal)
            return complete_in_ideal_state(committed, None if ideal.paused else next_name, place)(ideal)

        while True:
            try:
                stored = self.store.update_ideal_state(table, update)
            except _NextSegmentMissing as missing:  # resumed since step 2 read ``paused``: create it, try again
                next_name = self._create_next(table, config, missing.ideal, done, forced, now)
                self._check_leader()
                continue
            return successor_in(stored.record, committed)

    def _next_rows(self, config: TableConfig, ideal: IdealState, done: SegmentRecord,
                   forced: bool) -> tuple[int, float | None]:
        """The next segment's row threshold, and on auto-tuned tables the learned bytes per row it came from."""
        stream = config.stream
        assert stream is not None
        if not stream.auto_tuned:
            return next_row_threshold(stream, ideal, done), None
        with self._lock:
            learner = self._learner_for(config)
            if done.status is SegmentStatus.COMMITTING:  # its size is not known yet: learned from at commitEnd
                rows = learner.threshold_before_size(done.row_threshold or stream.flush_autotune_initial_rows,
                                                     done.partition)
                return rows, learner.rate(done.partition)
            committed = CommittedSegment(
                partition=done.partition or 0,
                rows=done.total_docs,
                size_bytes=done.size_bytes,
                row_threshold=done.row_threshold or stream.flush_autotune_initial_rows,
                forced=forced,
            )
            learner, rows = learner.on_commit(committed)
            self._learners[config.name_with_type] = learner
            return rows, learner.rate(committed.partition)

    def _placement(self, config: TableConfig, done: SegmentRecord) -> Placement | None:
        """Where the partition's next consuming segment goes: among the servers tagged for the table now
        (``place_on_tagged``), so added capacity takes new consuming segments at their commits. Tables whose
        queries read a partition from one replica group (upsert, strictReplicaGroup) keep them where the partition's
        other segments are; None: with the committed segment."""
        if keeps_partitions_together(config) or done.partition is None:
            return None
        tagged, pool = self._tagged_and_pool(config)
        return place_on_tagged(done.partition, config.replication, pool, tagged)

    def placement_pool(self, config: TableConfig) -> list[str]:
        """The servers the table's partitions are spread over now (``cuvee.cluster.assignment.placement_pool``)."""
        return self._tagged_and_pool(config)[1]

    def _tagged_and_pool(self, config: TableConfig) -> tuple[set[str], list[str]]:
        tag = server_tag(config.tenants.server)
        tagged = {i.instance_id for i in self.store.instances() if i.has_tag(tag)}
        ideal = self.store.ideal_state(config.name_with_type)
        holding = {i for replicas in ideal.record.segments.values() for i in replicas} if ideal is not None else set()
        return tagged, placement_pool(tagged, set(self.store.live_instance_ids()), holding)

    def forget_learners(self) -> None:
        """On becoming leader: what this controller learned before may be older than what the last leader
        recorded in segment metadata since."""
        with self._lock:
            self._learners.clear()

    def autotuned_rows(self, config: TableConfig, partition: int | None = None) -> tuple[int, float | None]:
        """A segment that follows no commit on an auto-tuned table (a new stream partition's first, one repair
        re-creates for ``partition``): desiredSize / R once R is known, else the initial guess; and R."""
        with self._lock:
            learner = self._learner_for(config)
        return learner.first_threshold(partition), learner.rate(partition)

    def _learner_for(self, config: TableConfig) -> SizeLearner:
        """This table's learner; a controller that has none yet (it just became leader) takes R from the consuming
        segments' metadata (each records the R its threshold came from: its partition's under "each"), so
        learning goes on where the last leader left it; the table-wide R is then the newest of them. A learner
        whose table config changed since keeps its R's under the new policy. Under the lock."""
        table = config.name_with_type
        stream = config.stream
        assert stream is not None
        policy = SizePolicy(stream.flush_threshold_segment_size_bytes, stream.flush_autotune_initial_rows,
                            learning=stream.flush_autotune_learning)
        found = self._learners.get(table)
        if found is not None:
            if found.policy != policy:
                found = self._learners[table] = dataclasses.replace(found, policy=policy)
            return found
        newest: SegmentRecord | None = None
        by_partition: dict[int, float] = {}
        ideal = self.store.ideal_state(table)  # the consuming segments carry the newest R: a few reads, not all
        consuming = ideal.record.segments_in(SegmentState.CONSUMING) if ideal is not None else []
        for name in consuming:
            versioned = self.store.find_segment(table, name)
            record = versioned.record if versioned is not None else None
            if record is None or record.bytes_per_row is None:
                continue
            if record.partition is not None:
                by_partition[record.partition] = record.bytes_per_row
            if newest is None or record.creation_time_ms > newest.creation_time_ms:
                newest = record
        learner = SizeLearner(policy).with_rates(newest.bytes_per_row if newest is not None else None,
                                                 by_partition if policy.learning == EACH else {})
        self._learners[table] = learner
        return learner

    def learner(self, table: str) -> SizeLearner | None:
        with self._lock:
            return self._learners.get(table)

    def _check_leader(self) -> None:
        if not self.may_act():
            raise CommitAbandoned("this controller is no longer the leader")
