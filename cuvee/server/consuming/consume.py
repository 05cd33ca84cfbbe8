"""The partition consumer: fetch from the stream, decode, append to the mutable segment, track offsets.

Offsets are exact so that replicas agree: a segment ending at the row limit ends one past the offset of the row
that filled it (not at the fetch batch's end), and a catch-up ends at exactly the offset the controller named.
Bad messages below the offset reached are counted in the segment's BadRecordLog (those beyond belong to the next
segment, which will see them again). Data lost to retention (OffsetOutOfRangeError) is counted
(``messages_lost``), logged loudly, and consumption goes on from the earliest offset still in the stream. The
count travels with segmentConsumed: this copy is incomplete, and the controller commits a complete replica's copy
when there is one (otherwise it would pick this one for its larger end offset, and lose for good the rows the
complete replicas hold).

A decoder that cannot decode at all for now (``DecoderUnavailable``: its schema registry does not answer) leaves
the offset where it is; the same messages are fetched again after a backoff until it can, so an outage of the
registry delays rows and never turns them into bad records.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cuvee.decode import BadRecordLog, Decoder, DecoderUnavailable
from cuvee.decode.base import BadRecord
from cuvee.decode.transform import RowTransformer
from cuvee.metrics.server import IngestionMeter
from cuvee.protocol.completion import StopReason
from cuvee.segment.mutable import MutableSegment
from cuvee.segment.mutable.segment import BeforePublish
from cuvee.segment.mutable.buffers import GrowingArray
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.spi.stream import OffsetOutOfRangeError, StreamConsumer, StreamError

log = logging.getLogger(__name__)


class ConsumeError(Exception):
    """Consuming cannot go on (the stream kept failing, or appending failed): the replica gives up."""


@dataclass
class EndCriteria:
    """When normal consumption stops. ``deadline`` is on the injected clock (seconds); ``force`` and ``paused``
    are read every fetch."""

    row_limit: int
    deadline: float | None
    force: Callable[[], bool]
    paused: Callable[[], bool]
    memory_limit: Callable[[], int | None] | None = None  # bytes this segment may use now (its budget share)


_FIRST_BUDGETED_FETCH = 1024  # rows read first under a memory share, before their size per row is known


def _rows_that_fit(limit: int, used: int, rows: int) -> int:
    """How many more rows to fetch under a memory share of ``limit`` bytes: as many as the rows so far say fit
    (one more, so the share is reached and the segment ends), else a first small read. A whole fetch of 10,000
    rows read after the share was nearly full overshot it by far on a loaded machine (CI, stop 19)."""
    if not rows:
        return _FIRST_BUDGETED_FETCH
    return max(1, int((limit - used) * rows / max(used, 1)) + 1)


class PartitionConsumer:
    """Reads one stream partition into one mutable segment. Used by one thread at a time."""

    def __init__(
        self,
        *,
        open_stream: Callable[[], StreamConsumer],
        partition: int,
        start_offset: int,
        decoder: Decoder,
        segment: MutableSegment,
        bad_records: BadRecordLog,
        bytes_used: Callable[[], dict[str, int]] | None = None,
        config: ConsumerConfig,
        clock: Callable[[], float],
        interrupted: threading.Event,
        name: str,
        transformer: RowTransformer | None = None,
    ):
        self._open_stream = open_stream
        self._stream: StreamConsumer | None = None  # opened on first fetch, in the consuming thread
        self.partition = partition
        self.start_offset = start_offset
        self.offset = start_offset  # the next offset to consume
        self.effective_start = start_offset  # moves up if retention removed the first messages before we read them
        self.decoder = decoder
        self.segment = segment
        # what the rows use per column, checked against a memory limit (the segment's buffers, and what its sealed
        # blocks keep: ``ConsumingScan.bytes_used``)
        self._bytes_used = segment.bytes_used if bytes_used is None else bytes_used
        self.bad_records = bad_records
        self.config = config
        self.clock = clock
        self.interrupted = interrupted
        self.transformer = transformer  # the table's ingestion transforms and filter, if any
        # The stream offset of every row appended, in order (8 bytes a row): which rows lie below an offset.
        self.row_offsets = GrowingArray(np.int64, 1024)
        # Where this segment must end because the partition's next segment starts there on this server (set by
        # ``ConsumingSegment.cap``): consumption stops at it and rows at or past it are not served.
        self.cap: int | None = None
        self.rows_filtered = 0  # rows the filter dropped (offsets consumed, rows not kept)
        # Runs between writing a batch's rows and publishing them (upsert tables: MutableSegment.append)
        self.before_publish: BeforePublish | None = None
        # Runs after a batch's rows are published, with the published row count (ConsumingScan.published)
        self.after_publish: Callable[[int], None] | None = None
        # Runs on a batch before it is stored: (rows, offsets) -> (rows to store, their offsets, offsets skipped,
        # counted as filtered). Upsert tables drop or mark out-of-order rows here.
        self.before_write: Callable[[pa.RecordBatch, np.ndarray], tuple[pa.RecordBatch, np.ndarray, np.ndarray]] \
            | None = None
        # Runs on the rows about to be stored, before they are (a partitioned table's check of the rows' partitions
        # against the stream partition: ``cuvee.pruning.stream_partitions``); raising stops consumption
        self.before_append: Callable[[pa.RecordBatch], None] | None = None
        # True only while the loop is parked by a pause: nothing is being fetched or appended. This (not the pause
        # request) is what "PAUSED" reports, so rows produced after a consumer reports PAUSED stay in the stream.
        self.parked = False
        self.name = name
        self.messages_lost = 0
        self.meter: IngestionMeter | None = None  # the server's ingestion counters (cuvee.metrics.server)
        self._progress: deque[tuple[float, int]] = deque()  # (clock, rows) after each batch of the last minute
        self.last_message_ms: int | None = None
        self.caught_up_ms: int | None = None  # clock time of the last fetch that found nothing newer
        self.stream_errors = 0
        # Why the decoder cannot decode now (None while it can), and how many tries in a row have failed
        self.decoder_unavailable: str | None = None
        self.decoder_retries = 0
        # The stream's latest offset as last seen (a fetch that found nothing newer, or a look every
        # ``lag_check_seconds`` while behind): the offset lag this replica reports (None: not known yet).
        self.upstream_offset: int | None = None
        self._upstream_checked = float("-inf")

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    @property
    def rows(self) -> int:
        return self.segment.num_docs

    def rows_per_second(self) -> float:
        """Rows stored per second over the last minute (0 before two batches)."""
        progress = list(self._progress)
        if len(progress) < 2 or progress[-1][0] <= progress[0][0]:
            return 0.0
        return (progress[-1][1] - progress[0][1]) / (progress[-1][0] - progress[0][0])

    def rows_below(self, offset: int) -> int:
        """How many of the rows appended so far have a stream offset below ``offset`` (they are a prefix)."""
        known = min(self.segment.num_docs, self.row_offsets.size)
        return int(np.searchsorted(self.row_offsets.head(known), offset, side="left"))

    def consume(self, end: EndCriteria) -> StopReason | None:
        """Consume until an end criterion holds; None if interrupted first. Raises ConsumeError."""
        while True:
            self.parked = False
            if self.interrupted.is_set():
                return None
            cap = self.cap
            if cap is not None and self.offset >= cap:  # the next segment starts there: a fixed end
                return StopReason.ROW_LIMIT if self.offset == cap else StopReason.TIME_LIMIT
            if end.force():
                return StopReason.FORCE_COMMIT
            if self.rows >= end.row_limit:
                return StopReason.ROW_LIMIT
            if end.deadline is not None and self.clock() >= end.deadline:
                return StopReason.TIME_LIMIT
            fitting = None
            if end.memory_limit is not None and (limit := end.memory_limit()) is not None:
                used = sum(self._bytes_used().values()) if self.rows else 0
                if self.rows and used >= limit:
                    return StopReason.MEMORY_LIMIT
                fitting = _rows_that_fit(limit, used, self.rows)
            if end.paused():
                self.parked = True
                self.interrupted.wait(self.config.fetch_max_wait_seconds)
                continue
            self._step(row_limit=end.row_limit, target=None, max_rows=fitting)

    def catch_up(self, target: int, timeout: float) -> bool:
        """Consume up to exactly ``target`` (the mutable segment's capacity allowing); True if reached.
        ``timeout`` is in real seconds: the stream may never deliver the offset."""
        deadline = time.monotonic() + timeout
        while self.offset < target:
            if self.interrupted.is_set() or time.monotonic() >= deadline or self.segment.is_full:
                return False
            self._step(row_limit=None, target=target)
        return self.offset == target

    @property
    def records_lag(self) -> int | None:
        """How many offsets the stream holds beyond this replica's position (as of the last look)."""
        return None if self.upstream_offset is None else max(self.upstream_offset - self.offset, 0)

    def _check_upstream(self, caught_up_at: int | None) -> None:
        """``caught_up_at``: the fetch found nothing from there on (so that is the latest offset now)."""
        if caught_up_at is not None:
            self.upstream_offset = max(caught_up_at, self.upstream_offset or 0)
            return
        now = self.clock()
        if now - self._upstream_checked < self.config.lag_check_seconds or self._stream is None:
            return
        self._upstream_checked = now
        try:
            self.upstream_offset = self._stream.latest_offset(self.partition)
        except StreamError as exc:  # the lag stays as last known; fetching reports stream trouble itself
            log.debug("%s: could not read the stream's latest offset: %s", self.name, exc)

    # ---- one fetch ----

    def _step(self, *, row_limit: int | None, target: int | None, max_rows: int | None = None) -> None:
        want = self.config.fetch_max_messages if max_rows is None else min(self.config.fetch_max_messages, max_rows)
        if target is not None:
            want = min(want, target - self.offset)
        try:
            if self._stream is None:
                self._stream = self._open_stream()
            batch = self._stream.fetch(self.partition, self.offset, want, int(self.config.fetch_max_wait_seconds * 1000))
        except OffsetOutOfRangeError as exc:
            self._lost(exc)
            return
        except StreamError as exc:
            self._stream_error(exc)
            return
        self.stream_errors = 0
        self._check_upstream(batch.next_offset if not len(batch) else None)
        fetched = len(batch)
        cap = self.cap  # read again: it may have been set while the fetch waited
        if cap is not None:
            target = cap if target is None else min(target, cap)
        if target is not None:
            batch = batch.below(target)
        next_offset = batch.next_offset
        if not len(batch):
            self.offset = max(self.offset, next_offset)
            self.caught_up_ms = int(self.clock() * 1000)
            return
        try:
            result = self.decoder.decode(batch.values, batch.offsets)
        except DecoderUnavailable as exc:
            self._decoder_unavailable(exc)
            return
        self.decoder_unavailable, self.decoder_retries = None, 0
        good, offsets = result.batch, result.offsets
        dropped = offsets[:0]
        if self.transformer is not None:
            failed: list[tuple[int, str]] = []  # (offset, why): counted as bad records, never a crash loop
            try:
                transformed = self.transformer.apply(good, offsets)
            except Exception as exc:  # noqa: BLE001 - the whole batch's rows are bad
                log.exception("%s: the ingestion transforms failed on a batch at offset %d", self.name, self.offset)
                why = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
                failed = [(int(o), why) for o in offsets]
                good, offsets = good.slice(0, 0), offsets[:0]
            else:  # continueOnError unset/false: as Pinot, a row whose transform failed is skipped
                failed = [(int(offsets[row]), why) for row, why in transformed.failed]
                good, offsets, dropped = transformed.batch, transformed.offsets, transformed.dropped_offsets
            if failed:
                raw = dict(zip(batch.offsets, batch.values))
                result.bad.extend(BadRecord.of(o, f"ingestion transform failed: {why}", raw[o]) for o, why in failed)
                result.bad.sort(key=lambda b: b.offset)
        if self.before_write is not None and good.num_rows:
            try:
                good, offsets, skipped = self.before_write(good, offsets)
            except Exception as exc:  # noqa: BLE001 - reported as this replica's consume failure, never a dead thread
                raise ConsumeError(f"{self.name}: preparing rows at offset {self.offset} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
            dropped = np.concatenate([np.asarray(dropped, np.int64), np.asarray(skipped, np.int64)])
        kept = good.num_rows
        room = self.segment.capacity - self.rows
        if row_limit is not None:
            room = min(room, row_limit - self.rows)
        if good.num_rows > room:
            good, offsets = good.slice(0, room), offsets[:room]
        # The rows' offsets are recorded before the rows are published: a capped reader counts the rows it may
        # see by them (``rows_below``), and a published row it could not count would vanish from its answer (an
        # upsert table's valid doc among them: a key missing from a query).
        if self.before_append is not None and good.num_rows:
            try:
                self.before_append(good)
            except Exception as exc:  # noqa: BLE001 - reported as this replica's consume failure, never a dead thread
                raise ConsumeError(f"{self.name}: checking rows at offset {self.offset} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
        recorded = self.row_offsets.size
        self.row_offsets.append(np.asarray(offsets, dtype=np.int64))
        try:
            taken = self.segment.append(good, offsets, before_publish=self.before_publish) if good.num_rows else 0
        except (ValueError, RuntimeError) as exc:
            self.row_offsets.truncate(recorded)
            raise ConsumeError(f"{self.name}: cannot append rows at offset {self.offset}: {exc}") from exc
        self.row_offsets.truncate(recorded + taken)
        if taken and self.after_publish is not None:
            self.after_publish(self.segment.num_docs)
        if taken < kept:
            # Stopped inside the batch (row limit or capacity): end right after the last row taken.
            reached = int(offsets[taken - 1]) + 1 if taken else self.offset
        else:
            reached = next_offset
            if len(batch) < fetched or fetched < want:
                self.caught_up_ms = int(self.clock() * 1000)
        filtered = int((dropped < reached).sum())
        self.rows_filtered += filtered
        bad = [b for b in result.bad if b.offset < reached]
        if bad:
            self.bad_records.record(bad, source=self.name)
        consumed = bisect.bisect_left(batch.offsets, reached)
        if self.meter is not None:
            self.meter.batch(taken, filtered, len(bad), sum(len(v) for v in batch.values[:consumed] if v))
        now = self.clock()
        self._progress.append((now, self.rows))
        while self._progress and self._progress[0][0] < now - 60:
            self._progress.popleft()
        if consumed:
            newest = max(batch.timestamps_ms[:consumed])
            self.last_message_ms = newest if self.last_message_ms is None else max(self.last_message_ms, newest)
        self.offset = reached

    def _lost(self, exc: OffsetOutOfRangeError) -> None:
        lost = max(exc.earliest - self.offset, 0)
        self.messages_lost += lost
        if self.meter is not None:
            self.meter.lost(lost)
        log.error("%s: offsets %d..%d of %s[%d] were removed by retention before this replica read them (%d "
                  "messages): this copy is incomplete; continuing from %d (the controller commits a complete "
                  "replica's copy if there is one, else this one: DATA LOSS)", self.name, self.offset,
                  exc.earliest - 1, exc.topic, exc.partition, lost, exc.earliest)
        self.offset = max(self.offset, exc.earliest)
        if self.rows == 0:
            self.effective_start = self.offset

    def _decoder_unavailable(self, exc: DecoderUnavailable) -> None:
        """Nothing of the batch was decoded: the offset stays, and the same messages are fetched again after a
        backoff, for as long as it takes (a schema registry outage delays rows, it never drops them)."""
        self.decoder_retries += 1
        self.decoder_unavailable = str(exc)
        delay = min(self.config.stream_error_backoff_seconds * 2 ** min(self.decoder_retries - 1, 30),
                    self.config.decoder_retry_max_seconds)
        log.warning("%s: cannot decode the messages at offset %d (attempt %d, retrying in %.2fs): %s", self.name,
                    self.offset, self.decoder_retries, delay, exc)
        self.interrupted.wait(delay)

    def _stream_error(self, exc: StreamError) -> None:
        self.stream_errors += 1
        if self.stream_errors > self.config.stream_error_retries:
            raise ConsumeError(f"{self.name}: the stream failed {self.stream_errors} times in a row: {exc}") from exc
        delay = self.config.stream_error_backoff_seconds * 2 ** (self.stream_errors - 1)
        log.warning("%s: stream error at offset %d (attempt %d, retrying in %.2fs): %s", self.name, self.offset,
                    self.stream_errors, delay, exc)
        self.interrupted.wait(delay)
