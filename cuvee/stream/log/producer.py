"""StreamProducer over the embedded log: buffers per partition and appends each batch in one locked write."""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Iterable

from cuvee.spi.stream import PartitionNotFoundError, StreamProducer, partition_for_key
from cuvee.stream.log.frames import Record
from cuvee.stream.log.partition import PartitionWriter
from cuvee.stream.log.topic import TopicStore, TopicView


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class LogProducer(StreamProducer):
    """Produces to a topic of the embedded log.

    Messages are buffered and appended when ``batch_messages`` or ``batch_bytes`` is reached, and on ``flush``/
    ``close``: a message is visible to consumers once its batch is appended. Keyed messages go to
    ``partition_for_key`` (murmur2, as Kafka's producers); messages without a key go round-robin. The partition count
    is re-read (when ``topic.json`` changed) at the start of every batch, so a grown topic is seen. Every
    ``retention_check_interval_ms`` the producer applies the topic's retention to the partitions it wrote (None:
    never; retention stays callable through ``LogAdmin.apply_retention``). With ``fsync`` every append is synced to
    disk (survives a power cut); without, it survives the process. Safe to share between threads."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        topic: str,
        batch_messages: int = 5_000,
        batch_bytes: int = 4 * 1024 * 1024,
        retention_check_interval_ms: int | None = 60_000,
        clock_ms: Callable[[], int] = wall_clock_ms,
        fsync: bool = False,
    ):
        self.fsync = fsync
        self.view = TopicView(TopicStore(log_dir), topic)
        self.topic = topic
        self.batch_messages = batch_messages
        self.batch_bytes = batch_bytes
        self.retention_check_interval_ms = retention_check_interval_ms
        self.clock_ms = clock_ms
        self._pending: dict[int, list[Record]] = {}
        self._pending_count = 0
        self._pending_bytes = 0
        self._partitions = self.view.meta().partitions
        self._round_robin = itertools.count(random.randrange(1 << 16))
        self._writers: dict[int, PartitionWriter] = {}
        self._written_since_retention: set[int] = set()
        self._last_retention_ms = clock_ms()
        self._lock = threading.Lock()

    def produce(
        self, value: bytes, key: bytes | None = None, partition: int | None = None, timestamp_ms: int | None = None
    ) -> None:
        with self._lock:
            self._add(value, key, partition, timestamp_ms)

    def produce_many(self, records: Iterable[tuple[bytes | None, bytes]]) -> int:
        count = 0
        with self._lock:
            for key, value in records:
                self._add(value, key, None, None)
                count += 1
        return count

    def _add(self, value: bytes, key: bytes | None, partition: int | None, timestamp_ms: int | None) -> None:
        if not isinstance(value, bytes) or not (key is None or isinstance(key, bytes)):
            raise TypeError("message keys and values must be bytes")
        if self._pending_count == 0:
            self._partitions = self.view.meta().partitions
        if partition is None:
            partition = (
                next(self._round_robin) % self._partitions if key is None else partition_for_key(key, self._partitions)
            )
        elif not 0 <= partition < self._partitions:
            self._partitions = self.view.meta().partitions
            if not 0 <= partition < self._partitions:
                raise PartitionNotFoundError(
                    f"topic {self.topic!r} has {self._partitions} partitions; there is no partition {partition}"
                )
        self._pending.setdefault(partition, []).append(
            (key, value, self.clock_ms() if timestamp_ms is None else timestamp_ms)
        )
        self._pending_count += 1
        self._pending_bytes += len(value) + (len(key) if key else 0)
        if self._pending_count >= self.batch_messages or self._pending_bytes >= self.batch_bytes:
            self._append_pending()

    def flush(self) -> None:
        with self._lock:
            self._append_pending()

    def _append_pending(self) -> None:
        if not self._pending:
            return
        segment_bytes = self.view.meta().settings.segment_bytes
        for partition in sorted(self._pending):
            records = self._pending[partition]
            self._writer(partition).append(records, segment_bytes, self.fsync)
            # Forget a partition's records only once they are appended: a failed flush can be retried.
            del self._pending[partition]
            self._pending_count -= len(records)
            self._written_since_retention.add(partition)
        self._pending_bytes = 0
        self._maybe_apply_retention()

    def _writer(self, partition: int) -> PartitionWriter:
        writer = self._writers.get(partition)
        if writer is None:
            writer = self._writers[partition] = PartitionWriter(self.view.partition_dir(partition), self.topic, partition)
        return writer

    def _maybe_apply_retention(self) -> None:
        if self.retention_check_interval_ms is None:
            return
        now = self.clock_ms()
        if now - self._last_retention_ms < self.retention_check_interval_ms:
            return
        self._last_retention_ms = now
        settings = self.view.meta().settings
        if settings.retention_bytes is not None or settings.retention_ms is not None:
            for partition in sorted(self._written_since_retention):
                self._writer(partition).apply_retention(settings.retention_bytes, settings.retention_ms, now)
        self._written_since_retention.clear()

    def close(self) -> None:
        self.flush()
