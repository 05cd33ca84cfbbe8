"""StreamConsumer over the embedded log."""

from __future__ import annotations

import os
import time

from cuvee.spi.stream import MessageBatch, PartitionNotFoundError, StreamConsumer
from cuvee.stream.log.frames import CorruptFrameError, DecodedFrames
from cuvee.stream.log.partition import PartitionReader, PartitionWriter
from cuvee.stream.log.topic import TopicStore, TopicView


FULL_READ_S = 0.025  # an idle fetch reads at least this often whatever its mark says
# the longest pause between an idle fetch's polls: each wake-up costs (~2% of a core per idle consuming segment at
# 2 ms), a message arriving after a quiet spell waits at most this long
IDLE_POLL_MAX_S = 0.016


class LogConsumer(StreamConsumer):
    """Reads a topic of the embedded log. ``poll_interval_ms`` is how soon a waiting fetch first looks for new data
    again; the pause doubles while nothing comes, up to ``IDLE_POLL_MAX_S``."""

    def __init__(self, log_dir: str | os.PathLike[str], topic: str, poll_interval_ms: float = 2.0):
        self.view = TopicView(TopicStore(log_dir), topic)
        self.topic = topic
        self.poll_interval_s = poll_interval_ms / 1000
        self._readers: dict[int, PartitionReader] = {}

    def partition_count(self) -> int:
        return self.view.meta().partitions

    def _reader(self, partition: int) -> PartitionReader:
        reader = self._readers.get(partition)
        if reader is None:
            count = self.partition_count()
            if not 0 <= partition < count:
                raise PartitionNotFoundError(f"topic {self.topic!r} has {count} partitions; there is no partition {partition}")
            reader = self._readers[partition] = PartitionReader(self.view.partition_dir(partition), self.topic, partition)
        return reader

    def earliest_offset(self, partition: int) -> int:
        return self._reader(partition).earliest_offset()

    def latest_offset(self, partition: int) -> int:
        return self._reader(partition).latest_offset()

    def fetch(self, partition: int, offset: int, max_messages: int = 10_000, max_wait_ms: int = 100) -> MessageBatch:
        """Returns as soon as anything is there; an offset beyond the latest waits for the log to reach it."""
        reader = self._reader(partition)
        deadline = time.monotonic() + max_wait_ms / 1000
        pause = self.poll_interval_s  # doubled per idle poll up to IDLE_POLL_MAX_S: a waiting consumer wakes less
        while True:
            mark = reader.mark()  # before the read: anything written after it changes the mark
            read = self._read(partition, reader, offset, max_messages)
            read_at = time.monotonic()
            while True:
                remaining = deadline - time.monotonic()
                if len(read) or remaining <= 0:
                    offsets = list(range(read.first_offset, read.first_offset + len(read)))
                    return MessageBatch(offsets, read.keys, read.values, read.timestamps_ms, offset + len(read))
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, max(IDLE_POLL_MAX_S, self.poll_interval_s))
                # idle polls stat two files instead of listing and reading; a read every FULL_READ_S still, as a
                # directory's mtime is coarse (a segment created in the tick of the mark may not change it)
                if mark is None or reader.mark() != mark or time.monotonic() - read_at >= FULL_READ_S:
                    break

    def _read(self, partition: int, reader: PartitionReader, offset: int, max_messages: int) -> DecodedFrames:
        try:
            return reader.read(offset, max_messages)
        except CorruptFrameError:
            # A writer that died (or a machine that lost power) can leave a damaged last frame that the next append
            # would truncate; repair it now rather than wait. Damage anywhere else is reported.
            PartitionWriter(reader.path, self.topic, partition).repair_tail()
            return reader.read(offset, max_messages)

    def position(self, partition: int, offset: int) -> tuple[int, int]:
        """Where ``offset`` is stored: (segment base offset, byte position in that segment's log file)."""
        return self._reader(partition).position(offset)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
