"""ConsumingSegment: one consuming segment on one server, the I/O shell around the pure ConsumerFsm.

One thread per segment: consume to an end criterion (PartitionConsumer), then execute the FSM's actions (HTTP to
the lead controller, catch-up, build, upload, waits) and feed their outcomes back until the FSM finishes. Build and
upload run in a helper thread so the consume thread can keep the committer's lease alive (Tick events ->
extendBuildTime). ``go_online`` lets the thread finish its current step, then returns the immutable segment to
serve: this replica's own build if it matches the committed one, else a catch-up and build, else a download.

A segment whose metadata is COMMITTING (pauseless tables: its end offset is fixed and the next segment already
consumes from there) is consumed to exactly that end offset instead of the row/time criteria, which happens when a
server restarts mid-commit or repair moves the segment: going past it would double rows the next segment holds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pyarrow as pa

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.config import Schema, TableConfig
from cuvee.errors import CuveeError
from cuvee.decode import BadRecordLog
from cuvee.decode.factory import build_decoder
from cuvee.decode.transform import compile_ingestion, decode_schema
from cuvee.protocol.completion import Request, StopReason
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.pruning.stream_partitions import StrayCheck, checked_spec
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.mutable import MutableSegment
from cuvee.server.consuming import build as building
from cuvee.server.consuming.client import CompletionUnavailable, SegmentCompletionClient
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.metrics.server import IngestionMeter, ServerMetrics
from cuvee.story import StoryWriter
from cuvee.server.consuming.consume import ConsumeError, EndCriteria, PartitionConsumer
from cuvee.server.consuming.fsm import (
    Action,
    Build,
    BuildFailed,
    BuildPurpose,
    BuildSucceeded,
    CatchUp,
    CaughtUp,
    ConsumeFailed,
    ConsumerFsm,
    ConsumerState,
    EndReached,
    Event,
    Finish,
    RequestFailed,
    ResolveLeader,
    Responded,
    RetryDue,
    Send,
    Stop,
    Tick,
    Upload,
    UploadFailed,
    UploadSucceeded,
    Wait,
)
from cuvee.server.consuming.blocks import ConsumingScan, OpenBlock, SealedBlock
from cuvee.spi.deepstore import DeepStore
from cuvee.stream import open_consumer
from cuvee.upsert.table import TableUpsert

_MEMORY_REFRESH_SECONDS = 5.0  # memoryBytes (info, metrics) is recomputed at most this often
log = logging.getLogger(__name__)

_UPLOAD_SCRATCH = ".upload"


class SegmentReleasedError(CuveeError):
    """go_online could not finish because the segment was stopped meanwhile."""


class CommittedCopyUnavailable(CuveeError):
    """go_online needed the committed copy and could not download it within ``download_max_attempts``."""


class ConsumingSegment:
    """One consuming segment on this server: consume thread, completion protocol, build, upload.

    ``segment_dir`` is the directory this server keeps the table's segments in: the build lands in
    ``segment_dir/<segment name>/``. ``fetch_committed(record)`` is the shell's download (deep store, else a peer).
    """

    is_consuming = True

    def __init__(
        self,
        *,
        table: TableConfig,
        schema: Schema,
        record: SegmentRecord,
        instance_id: str,
        completion: SegmentCompletionClient,
        deep_store: DeepStore,
        segment_dir: Path,
        fetch_committed: Callable[[SegmentRecord], ImmutableSegment],
        config: ConsumerConfig,
        clock: Callable[[], float] = time.time,
        build_slots: threading.Semaphore | None = None,
        upsert: TableUpsert | None = None,
        metrics: ServerMetrics | None = None,
        story: StoryWriter | None = None,
        memory_share: Callable[[], int | None] | None = None,
        report_mixed: Callable[[str, int], None] | None = None,
    ):
        """``memory_share``: the bytes this segment may use now (its share of the server's consuming-memory
        budget); reaching it ends the segment (stop reason memoryLimit). ``report_mixed(segment, partition)``
        records, before the row is readable, that a row of another partition than the stream's arrived in a
        partitioned table's segment (``cuvee.pruning.stream_partitions``); None: not checked."""
        self._memory_share = memory_share
        if table.stream is None:
            raise ValueError(f"table {table.name_with_type} has no stream config: it cannot have consuming segments")
        if record.start_offset is None:
            raise ValueError(f"segment {record.segment_name} has no start offset in its metadata")
        committing = record.status is SegmentStatus.COMMITTING
        if committing and (record.end_offset is None or record.end_offset < record.start_offset):
            raise ValueError(f"segment {record.segment_name} is COMMITTING without a valid end offset "
                             f"({record.end_offset})")
        # COMMITTING: consume to exactly here, whatever the row and time thresholds say (see the module docstring)
        self._fixed_end: int | None = record.end_offset if committing else None
        self.table, self.schema, self.record = table, schema, record
        self.name = record.segment_name
        self.llc = LLCSegmentName.parse(self.name)
        self.partition = record.partition if record.partition is not None else self.llc.partition
        self.instance_id = instance_id
        self._completion, self._deep_store, self._fetch_committed = completion, deep_store, fetch_committed
        self._segment_dir = Path(segment_dir)
        self._config, self._clock = config, clock
        self._build_slots = build_slots  # the server's cap on segment builds running at once (None: no cap)
        self._fsm = ConsumerFsm(self.llc, instance_id, config,
                                commit_start_first=table.ingestion.pauseless_consumption)
        self.bad_records = BadRecordLog(keep_last=config.bad_records_kept)
        row_limit = record.row_threshold or config.fetch_max_messages
        self._row_limit = row_limit
        self._mutable: MutableSegment | None = MutableSegment(
            schema, table.indexing, row_limit + config.headroom_rows, name=self.name, time_column=table.time_column)
        self._scan: ConsumingScan | None = ConsumingScan(self._mutable, schema, config.scan_block_rows)
        self._interrupt = threading.Event()
        self._closing = threading.Event()  # stop() was called: a go_online download gives up
        self._force = threading.Event()
        self._paused = threading.Event()
        stream_props = dict(table.stream.properties)
        # TransformConfigError, DecoderSetupError (e.g. an unreadable descriptor file): the transition fails (ERROR)
        transformer = compile_ingestion(schema, table.ingestion)
        self._consumer = PartitionConsumer(
            open_stream=lambda: open_consumer(stream_props), partition=self.partition,
            start_offset=record.start_offset,
            decoder=build_decoder(table.stream.decoder, decode_schema(schema, transformer), source=self.name,
                                  registry_timeout_seconds=config.schema_registry_timeout_seconds),
            segment=self._mutable, bytes_used=self._scan.bytes_used, bad_records=self.bad_records, config=config,
            clock=clock,
            interrupted=self._interrupt, name=self.name,
            transformer=transformer,
        )
        self._consumer.after_publish = self._scan.published  # tail tables follow the rows (one enqueue a batch)
        self._metrics = metrics
        self._story = story
        # (when, rows, bytes per column)
        self._memory_seen: tuple[float, int, dict[str, int]] = (-_MEMORY_REFRESH_SECONDS - 1, 0, {})
        if metrics is not None:
            self._consumer.meter = IngestionMeter(metrics, table.name_with_type, self.partition)
        if upsert is not None and upsert.prepares:  # out-of-order rows dropped or marked before they are stored
            self._consumer.before_write = lambda rows, offsets: upsert.prepare(self.name, rows, offsets)
        if upsert is not None:  # the key map decides each batch's valid docs before the rows are published
            self._consumer.before_publish = lambda rows, first, publish: upsert.ingest(
                self.name, self, rows, first, publish)
        self.strays = self._stray_check(report_mixed)
        self._thread: threading.Thread | None = None
        self._gate: Callable[[threading.Event], bool] | None = None  # see set_gate
        self._lock = threading.Lock()  # guards go_online / stop against each other
        self._built: ImmutableSegment | None = None
        self._online: ImmutableSegment | None = None
        self._released = False  # stop() ran: the rows are gone
        self.consume_started: float | None = None

    def _stray_check(self, report: Callable[[str, int], None] | None) -> StrayCheck | None:
        """A partitioned table's check of each row's partition against the stream partition, wired into the
        consumer (``report`` runs on the first row of another partition, before any row of its batch is published,
        until it succeeds), under the function the segment's record names (``checked_spec``: a broker prunes the
        segment only while the table's config names the same). The batch is then held back
        ``stray_publish_grace_seconds`` (cut short by ``stop``): the brokers' time to see the report."""
        spec = checked_spec(self.record.partitions, self.schema, self.partition)
        if report is None or spec is None:
            return None
        check = StrayCheck(spec, self.partition)
        reported = threading.Event()

        def before_append(rows: pa.RecordBatch) -> None:
            if reported.is_set() or spec.column not in rows.schema.names:
                return  # reported already: nothing more to learn
            check.strays(rows.column(spec.column))
            if check.first is not None:  # a row of another partition, in this batch or one not published
                report(self.name, check.first)  # raises when it cannot: these rows are then not published
                reported.set()
                grace = self._config.stray_publish_grace_seconds
                self._tell("rowsOfOtherPartitions", partition=check.first, streamPartition=self.partition,
                           heldBackSeconds=grace)
                self._closing.wait(grace)

        self._consumer.before_append = before_append
        return check

    # ---- lifecycle ----

    def start(self) -> None:
        """OFFLINE→CONSUMING: start the consume thread."""
        if self._thread is not None:
            return
        self._tell("consumingStarted", startOffset=self._consumer.start_offset, rowLimit=self._row_limit)
        self._thread = threading.Thread(target=self._run, name=f"consume-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """CONSUMING→OFFLINE/DROPPED or shutdown: stop the thread, release the stream and the rows."""
        self._closing.set()
        self._interrupt.set()
        with self._lock:
            self._halt()
            if self._released:
                return
            self._released = True
            if not self._fsm.state.terminal:
                self._fsm.handle(Stop(), self._clock())
            self._consumer.close()
            self._mutable = None
            if self._scan is not None:
                self._scan.release()
            self._scan = None

    def force_commit(self) -> None:
        """End consumption now (reason forceCommit); ignored once the segment stopped consuming."""
        self._force.set()

    @property
    def force_requested(self) -> bool:
        """Whether a force commit was asked of this segment (by a reload, a follower's pass or the API)."""
        return self._force.is_set()

    def set_paused(self, paused: bool) -> None:
        (self._paused.set if paused else self._paused.clear)()

    def cap(self, end_offset: int) -> None:
        """The partition's next segment starts at ``end_offset`` on this server (pauseless: before this one is
        committed), so this one ends there: consumption stops at it, and queries see only the rows below it. A
        replica that had consumed past it (a later time limit) would otherwise serve rows the next segment also
        holds; it reports where it is and is told DISCARD once the segment is committed."""
        consumer = self._consumer
        if consumer.cap is None or end_offset < consumer.cap:
            consumer.cap = end_offset
            log.info("%s: capped at offset %d, where the next segment starts", self.name, end_offset)

    def halt(self) -> None:
        """Before ``stop``: stop consuming and wait for the consume thread to end (a build or a download in
        progress is cut short, as by ``stop``); the rows stay readable until ``stop``."""
        self._closing.set()
        self._halt()

    def _halt(self) -> None:
        self._interrupt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # ---- queryable view ----

    @property
    def state(self) -> ConsumerState:
        return self._fsm.state

    @property
    def num_docs(self) -> int:
        mutable = self._mutable
        return 0 if mutable is None else self._visible(mutable)

    @property
    def published_docs(self) -> int:
        """Every published row, past the cap too (what an upsert table's key map has seen)."""
        mutable = self._mutable
        return 0 if mutable is None else mutable.num_docs

    def _visible(self, mutable: MutableSegment, past_cap: bool = False) -> int:
        """The published rows a reader may see: all of them, or those below the cap (see ``cap``). An upsert
        table's readers ask for all of them (``past_cap``), filtered by the valid docs: a row past the cap may be its
        key's newest version on this replica until the next segment reads it again (and then it is no longer
        valid); a reader of every row (``skipUpsert``) stays below the cap, or it would read rows twice."""
        cap = self._consumer.cap
        return mutable.num_docs if cap is None or past_cap else self._consumer.rows_below(cap)

    @property
    def last_ingestion_ms(self) -> int | None:
        c = self._consumer
        if c.caught_up_ms is not None and (c.last_message_ms is None or c.caught_up_ms > c.last_message_ms):
            return c.caught_up_ms
        return c.last_message_ms

    def snapshot(self, *, past_cap: bool = False) -> pa.Table:
        """The rows consumed so far (a consistent prefix), in the schema's logical types."""
        mutable = self._mutable
        if mutable is None:
            return self.schema.arrow_schema().empty_table()
        return building.logical_table(mutable.snapshot(self._visible(mutable, past_cap)), self.schema)

    def to_arrow(self) -> pa.Table:
        return self.snapshot()

    def encoded_snapshot(self, *, past_cap: bool = False, columns: Collection[str] | None = None) -> pa.Table:
        """The same prefix with single-value dictionary columns left encoded: what queries read (DuckDB reads them
        as plain values, and decoding per query was the main cost of a query); sealed blocks' conversions are
        kept (``cuvee.server.consuming.blocks``); ``columns``: only those (schema order), default all."""
        mutable, scan = self._mutable, self._scan
        if mutable is None or scan is None:
            empty = self.schema.arrow_schema().empty_table()
            return empty if columns is None else empty.select([n for n in empty.schema.names if n in columns])
        return scan.table(self._visible(mutable, past_cap), columns)

    def sealed_blocks(self, count: int) -> list[SealedBlock]:
        """The sealed blocks among the first ``count`` rows a query read (``encoded_snapshot``): the rows a DuckDB
        copy of each may answer for."""
        scan = self._scan
        return [] if scan is None else scan.blocks(count)

    def open_blocks(self, count: int) -> dict[int, OpenBlock]:
        """The blocks among the first ``count`` rows a query read that a DuckDB tail table may answer for (by block
        index; ``ConsumingScan.open_blocks``)."""
        scan = self._scan
        return {} if scan is None else scan.open_blocks(count)

    def follow(self, follower: Callable[[OpenBlock, int], None]) -> None:
        """Tell ``follower`` of the rows published from now on (``ConsumingScan.follow``)."""
        scan = self._scan
        if scan is not None:
            scan.follow(follower)

    def _consumer_state(self) -> str:
        """The FSM state, except that a consuming segment whose loop is parked by a pause reports PAUSED."""
        state = self._fsm.state.value
        return "PAUSED" if self._consumer.parked and state == "CONSUMING" else state

    def info(self) -> dict[str, Any]:
        recent = self.bad_records.recent()
        return {
            "segmentName": self.name,
            "consumerState": self._consumer_state(),
            "currentOffset": self._consumer.offset,
            "startOffset": self._consumer.effective_start,
            "partition": self.partition,
            "lastConsumedTimestampMs": self._consumer.last_message_ms,
            "upstreamOffset": self._consumer.upstream_offset,  # the stream's latest, as this replica last saw it
            "recordsLag": self._consumer.records_lag,
            "rowsConsumed": self.num_docs,
            "badRecords": self.bad_records.total,
            "recentBadRecords": [{"offset": b.offset, "reason": b.reason, "rawPrefix": b.raw_prefix} for b in recent],
            "messagesLost": self._consumer.messages_lost,
            # why the decoder cannot decode now (a schema registry outage: consumption waits), else None
            "decoderUnavailable": self._consumer.decoder_unavailable,
            "decoderRetries": self._consumer.decoder_retries,
            "rowsFiltered": self._consumer.rows_filtered,
            "memoryBytes": self._memory_bytes(),
            "memoryByColumn": self._memory_by_column(),
            "rowsPerSecond": round(self._consumer.rows_per_second(), 1),
            "error": self._fsm.error,
            "uploadError": self._fsm.upload_error,
        }

    def _tell(self, kind: str, **details: Any) -> None:
        if self._story is not None:
            self._story.record(self.table.name_with_type, self.name, kind, **details)

    def _memory_bytes(self) -> int:
        return sum(self._memory_by_column().values())

    def _memory_by_column(self) -> dict[str, int]:
        """What the rows use per column (values or ids, dictionary, nulls, inverted index). Walks every column and
        index: computed at most every few seconds."""
        mutable = self._mutable
        if mutable is None:
            return {}
        now, rows = time.monotonic(), mutable.num_docs
        at, seen_rows, value = self._memory_seen
        if now - at > _MEMORY_REFRESH_SECONDS or (seen_rows == 0 and rows > 0):
            scan = self._scan  # the buffers and the multi-value columns sealed blocks keep decoded
            value = scan.bytes_used() if scan is not None else mutable.bytes_used()
            self._memory_seen = (now, rows, value)
        return value

    def story(self) -> list[Any]:
        return self._fsm.story()

    # ---- the consume thread ----

    def set_gate(self, gate: Callable[[threading.Event], bool]) -> None:
        """Before the first row: ``gate(interrupted)`` blocks until consumption may begin (an upsert table waits for
        the partition's committed segments to be served here, so every row is decided against all of them);
        False (interrupted) ends the thread."""
        self._gate = gate

    def _run(self) -> None:
        try:
            gate = self._gate
            if gate is not None and not gate(self._interrupt):
                return
            started = self.consume_started = self._clock()
            try:
                reason = self._consume_to_end(started)
            except Exception as exc:  # noqa: BLE001 - ConsumeError, or a bug: either way this replica gives up
                if not isinstance(exc, ConsumeError):
                    log.exception("%s: consuming failed unexpectedly", self.name)
                log.error("%s: giving up consumption: %s", self.name, exc)
                self._drive(self._handle(ConsumeFailed(self._consumer.offset, self._consumer.rows, str(exc))))
                return
            if reason is None:
                return
            log.info("%s: end of consumption (%s) at offset %d with %d rows", self.name, reason.value,
                     self._consumer.offset, self._consumer.rows)
            self._drive(self._handle(EndReached(self._consumer.offset, self._consumer.rows, reason,
                                                self._consumer.messages_lost)))
        except Exception:
            log.exception("%s: the consume thread failed", self.name)

    def _consume_to_end(self, started: float) -> StopReason | None:
        """Consume until this segment's end: its fixed end offset if COMMITTING, else the end criteria.
        None if interrupted; raises ConsumeError."""
        if self._fixed_end is not None:
            return self._consume_to_fixed_end(self._fixed_end)
        threshold = self.record.time_threshold_ms
        return self._consumer.consume(EndCriteria(
            row_limit=self._row_limit,
            deadline=None if threshold is None else started + threshold / 1000,
            force=self._force.is_set,
            paused=self._paused.is_set,
            memory_limit=self._memory_share,
        ))

    def _consume_to_fixed_end(self, target: int) -> StopReason | None:
        """Catch up to exactly ``target`` (pause and force commit do not apply: the end is already fixed). Short of
        it when the catch-up times out, this reports where it got to: the controller answers CATCH_UP and the FSM's
        CatchUp goes on from there."""
        reached = self._consumer.catch_up(target, self._config.catch_up_timeout_seconds)
        if self._interrupt.is_set():
            return None
        offset = self._consumer.offset
        if self._end_at_most(target):
            return StopReason.ROW_LIMIT
        if not reached:
            log.warning("%s: catching up to the fixed end offset %d stopped at %d after %.1fs; reporting that "
                        "offset (the controller answers CATCH_UP)", self.name, target, offset,
                        self._config.catch_up_timeout_seconds)
            return StopReason.TIME_LIMIT  # not decisive: a short report must not win an election at once
        return StopReason.ROW_LIMIT

    def _end_at_most(self, target: int) -> bool:
        """After a catch-up to ``target``: if retention removed the rest of the range, up to past its end, no
        replica can read it any more. Keep the rows this one has, end exactly at ``target`` (where the committed
        or next segment starts), and let the loss be reported: the controller commits a complete copy if one
        exists, else this one (the loss is then real), so the segment does not stay uncommittable for good."""
        consumer = self._consumer
        if consumer.offset <= target:
            return False
        log.error("%s: the stream no longer holds offsets up to %d (next is %d); ending there with the %d rows "
                  "read", self.name, target, consumer.offset, consumer.rows)
        consumer.offset = target
        if consumer.rows == 0:
            consumer.effective_start = target
        return True

    def _handle(self, event: Event) -> list[Action]:
        return self._fsm.handle(event, self._clock())

    def _drive(self, actions: list[Action]) -> None:
        """Execute actions in order, feeding each outcome back, until Finish or an interrupt."""
        pending = deque(actions)
        while pending:
            action = pending.popleft()
            if isinstance(action, Finish):
                log.info("%s: protocol finished in state %s", self.name, action.state.value)
                return
            if self._interrupt.is_set():
                return
            event = self._execute(action)
            if event is not None:
                pending.extend(self._handle(event))
        if not self._fsm.state.terminal and not self._interrupt.is_set():
            log.error("%s: the consumer FSM left nothing to do in state %s", self.name, self._fsm.state.value)

    def _execute(self, action: Action) -> Event | None:
        match action:
            case Send(request=request):
                return self._send(request)
            case Wait(seconds=seconds):
                self._interrupt.wait(seconds)
                return RetryDue()
            case ResolveLeader(hint=hint):
                self._completion.invalidate_leader(hint)
                return None
            case CatchUp(offset=offset):
                try:
                    self._consumer.catch_up(offset, self._config.catch_up_timeout_seconds)
                except ConsumeError as exc:
                    return ConsumeFailed(self._consumer.offset, self._consumer.rows, str(exc))
                self._end_at_most(offset)
                return CaughtUp(self._consumer.offset, self._consumer.rows, self._consumer.messages_lost)
            case Build(offset=offset, purpose=purpose):
                return self._while_leased(lambda: self._build(offset, purpose))
            case Upload():
                return self._while_leased(self._upload)
        raise AssertionError(f"unknown action {action!r}")

    def _send(self, request: Request) -> Event:
        try:
            return Responded(request.kind, self._completion.send(request))
        except CompletionUnavailable as exc:
            log.warning("%s: %s", self.name, exc)
            return RequestFailed(request.kind, str(exc))

    def _while_leased(self, work: Callable[[], Event]) -> Event:
        """Run ``work`` in a helper thread; meanwhile Tick the FSM and send the lease extensions it asks for."""
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"build-{self.name}") as pool:
            future = pool.submit(work)
            while True:
                try:
                    return future.result(timeout=self._config.lease_check_seconds)
                except concurrent.futures.TimeoutError:
                    pass
                for action in self._handle(Tick()):
                    if isinstance(action, Send):
                        for follow_up in self._handle(self._send(action.request)):
                            log.debug("%s: ignoring %r after a lease extension", self.name, follow_up)

    def _build(self, offset: int, purpose: BuildPurpose) -> Event:
        mutable = self._mutable
        if mutable is None:
            return BuildFailed("the segment was released")
        slots = self._build_slots
        # Waiting for a slot happens inside the lease (the consume thread keeps extending it meanwhile).
        while slots is not None and not slots.acquire(timeout=self._config.lease_check_seconds):
            if self._closing.is_set():  # (not the interrupt: go_online builds after interrupting the consume loop)
                return BuildFailed("stopped while waiting for a build slot")
        started = time.perf_counter()
        try:
            segment, built = building.build_from_mutable(
                mutable, table=self.table, schema=self.schema, record=self.record,
                start_offset=self._consumer.effective_start, end_offset=offset, out_dir=self._segment_dir)
        except Exception as exc:  # noqa: BLE001 - any build failure is reported to the FSM, never raised
            log.exception("%s: building the segment (%s) failed", self.name, purpose.value)
            if self._metrics is not None:
                self._metrics.build_failures.labels(self.table.name_with_type).inc()
            self._tell("buildFailed", purpose=purpose.value, endOffset=offset, error=type(exc).__name__)
            return BuildFailed(f"{type(exc).__name__}: {exc}")
        finally:
            if slots is not None:
                slots.release()
        self._built = segment
        if self._metrics is not None:
            self._metrics.build_seconds.labels(self.table.name_with_type).observe(time.perf_counter() - started)
        self._tell("built", purpose=purpose.value, endOffset=offset, totalDocs=built.total_docs, crc=built.crc,
                   seconds=round(time.perf_counter() - started, 3))
        log.info("%s: built (%s) %d docs, crc %d, end offset %d", self.name, purpose.value, built.total_docs,
                 built.crc, offset)
        return BuildSucceeded(built)

    def _upload(self) -> Event:
        segment = self._built
        if segment is None:
            return UploadFailed("nothing was built")
        started = time.perf_counter()
        try:
            uri = building.upload(segment, self._deep_store, self.table.name_with_type,
                                  self._segment_dir / _UPLOAD_SCRATCH)
        except Exception as exc:  # noqa: BLE001 - deep-store bypass: commit without a location
            if self._metrics is not None:
                self._metrics.upload_failures.labels(self.table.name_with_type).inc()
            self._tell("uploadFailed", error=type(exc).__name__)
            log.error("%s: upload to the deep store failed, committing without a download URI (peers will "
                      "serve it): %s", self.name, exc)
            return UploadFailed(f"{type(exc).__name__}: {exc}")
        if self._metrics is not None:
            self._metrics.upload_seconds.labels(self.table.name_with_type).observe(time.perf_counter() - started)
        self._tell("uploaded", location=uri, seconds=round(time.perf_counter() - started, 3))
        return UploadSucceeded(uri)

    # ---- CONSUMING→ONLINE ----

    def go_online(self, record: SegmentRecord) -> ImmutableSegment:
        """The immutable segment to serve for committed ``record``: our own build if its end offset and CRC match,
        else our build after catching up (if behind and the stream still has the data), else fetch_committed.
        Blocks until ready; idempotent."""
        with self._lock:
            if self._online is not None:
                return self._online
            self._halt()  # the thread finishes its current step (an HTTP call, a build) and ends
            self._online = self._resolve_online(record)
            self._consumer.close()  # the rows stay queryable until the shell swaps and calls stop()
            return self._online

    def _resolve_online(self, record: SegmentRecord) -> ImmutableSegment:
        if record.end_offset is None:
            raise ValueError(f"go_online({record.segment_name}): the record has no end offset (not committed)")
        if self._matches(record):
            assert self._built is not None
            log.info("%s: ONLINE with this replica's own copy (crc %s)", self.name, record.crc)
            return self._built
        mutable = self._mutable
        if mutable is not None and self._consumer.offset <= record.end_offset:
            if self._consumer.offset < record.end_offset and not self._closing.is_set():
                self._interrupt.clear()  # the catch-up below runs on this thread
                try:
                    # stop() sets _closing, then _interrupt: had it run between the check above and the clear,
                    # its interrupt would be lost and it would wait out a whole catch-up; seen here, it is not
                    if not self._closing.is_set():
                        self._consumer.catch_up(record.end_offset, self._config.catch_up_timeout_seconds)
                except ConsumeError as exc:
                    log.warning("%s: catching up to %d for go_online failed: %s", self.name, record.end_offset, exc)
                finally:
                    self._interrupt.set()
            if self._consumer.offset == record.end_offset:
                event = self._build(record.end_offset, BuildPurpose.KEEP)
                if isinstance(event, BuildSucceeded) and self._matches(record):
                    log.info("%s: ONLINE with a copy built after catching up to %d", self.name, record.end_offset)
                    return self._built  # type: ignore[return-value]
        if self._built is not None:
            log.info("%s: this replica's copy (crc %s, %d docs) differs from the committed one (crc %s); "
                     "downloading", self.name, self._built.crc, self._built.total_docs, record.crc)
            building.remove_build(self._built.path)
            self._built = None
        return self._download(record)

    def _matches(self, record: SegmentRecord) -> bool:
        built = self._built
        return (built is not None and built.metadata.end_offset == record.end_offset
                and (record.crc is None or built.crc == record.crc))

    def _download(self, record: SegmentRecord) -> ImmutableSegment:
        """fetch_committed, retried with backoff up to ``download_max_attempts``; then CommittedCopyUnavailable
        (the transition fails into ERROR, and the follower retries it later), so no transition worker is held."""
        delay = self._config.download_retry_initial_seconds
        attempts = self._config.download_max_attempts
        for attempt in range(1, attempts + 1):
            if self._closing.is_set():
                raise SegmentReleasedError(f"{self.name}: stopped while downloading the committed segment")
            try:
                return self._fetch_committed(record)
            except Exception as exc:  # noqa: BLE001 - retried with backoff, up to the configured attempts
                if attempt == attempts:
                    raise CommittedCopyUnavailable(
                        f"{self.name}: could not download the committed segment in {attempts} attempt(s): {exc}"
                    ) from exc
                log.warning("%s: download attempt %d/%d failed (retrying in %.1fs): %s", self.name, attempt,
                            attempts, delay, exc)
            if self._closing.wait(delay):
                raise SegmentReleasedError(f"{self.name}: stopped while downloading the committed segment")
            delay = min(delay * 2, self._config.download_retry_max_seconds)
        raise AssertionError("unreachable: download_max_attempts is at least 1")

