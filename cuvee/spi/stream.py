"""Stream SPI: a partitioned, offset-addressed message stream (Kafka, or Cuvee's embedded log).

A consumer reads one partition from an offset; offsets are per partition, increasing, and a message's offset
never changes. Consumers never rely on group management: the controller decides who reads what from where.
Implementations: ``cuvee.stream.log`` (default) and ``cuvee.stream.kafka``; both pass the conformance suite in
``tests/stream/test_conformance.py``.
"""

from __future__ import annotations

import abc
import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cuvee.errors import CuveeError


class StreamError(CuveeError):
    """Base of every stream failure."""


class TopicNotFoundError(StreamError):
    pass


class TopicExistsError(StreamError):
    pass


class PartitionNotFoundError(StreamError):
    pass


class UnsupportedOperationError(StreamError):
    """The stream implementation cannot do this (e.g. tansu cannot add partitions)."""


class OffsetOutOfRangeError(StreamError):
    """A fetch asked for an offset below the earliest one still retained: the messages in between are lost.

    The caller decides what to do (typically: count and log the loss, continue from ``earliest``)."""

    def __init__(self, topic: str, partition: int, requested: int, earliest: int):
        self.topic = topic
        self.partition = partition
        self.requested = requested
        self.earliest = earliest
        super().__init__(
            f"{topic}[{partition}]: offset {requested} is below the earliest retained offset {earliest} "
            f"({earliest - requested} messages lost to retention)"
        )


@dataclass(frozen=True, slots=True)
class StreamMessage:
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


@dataclass(frozen=True)
class MessageBatch:
    """The result of one fetch, column by column: message i is ``offsets[i], keys[i], values[i],
    timestamps_ms[i]``, offsets increasing. A consuming segment decodes ``values`` as one list, so a fetch of
    10,000 messages builds no object per message (that alone was half of a server's ingest CPU). ``next_offset``
    is where the next fetch starts (offsets may have gaps in Kafka)."""

    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes]
    timestamps_ms: list[int]
    next_offset: int

    def __post_init__(self) -> None:
        if not len(self.offsets) == len(self.keys) == len(self.values) == len(self.timestamps_ms):
            raise ValueError("a message batch needs columns of one length")

    @classmethod
    def empty(cls, next_offset: int) -> MessageBatch:
        return cls([], [], [], [], next_offset)

    @classmethod
    def of(cls, messages: Sequence[StreamMessage], next_offset: int) -> MessageBatch:
        return cls([m.offset for m in messages], [m.key for m in messages], [m.value for m in messages],
                   [m.timestamp_ms for m in messages], next_offset)

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def messages(self) -> list[StreamMessage]:
        """The messages one by one (for callers that want objects; the hot path reads the columns)."""
        return list(map(StreamMessage, self.offsets, self.keys, self.values, self.timestamps_ms))

    def below(self, offset: int) -> MessageBatch:
        """The messages with an offset below ``offset``; the next fetch then starts at ``offset`` or earlier."""
        cut = bisect.bisect_left(self.offsets, offset)
        if cut == len(self.offsets):
            return MessageBatch(self.offsets, self.keys, self.values, self.timestamps_ms,
                                min(self.next_offset, offset))
        return MessageBatch(self.offsets[:cut], self.keys[:cut], self.values[:cut], self.timestamps_ms[:cut], offset)


class StreamConsumer(abc.ABC):
    """Reads partitions of one topic by explicit offset. Not thread-safe: one consumer per consuming thread."""

    @abc.abstractmethod
    def partition_count(self) -> int: ...

    @abc.abstractmethod
    def earliest_offset(self, partition: int) -> int: ...

    @abc.abstractmethod
    def latest_offset(self, partition: int) -> int:
        """The offset the next produced message will get (the high watermark)."""

    @abc.abstractmethod
    def fetch(self, partition: int, offset: int, max_messages: int = 10_000, max_wait_ms: int = 100) -> MessageBatch:
        """Up to max_messages from ``offset``; waits up to max_wait_ms if none are there yet (then an empty batch).
        An offset at or beyond the latest one waits the same way (the stream may reach it). Raises
        OffsetOutOfRangeError if ``offset`` is below the earliest retained offset."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> StreamConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamProducer(abc.ABC):
    """Appends messages to one topic; partition by key hash unless a partition is given."""

    @abc.abstractmethod
    def produce(
        self, value: bytes, key: bytes | None = None, partition: int | None = None, timestamp_ms: int | None = None
    ) -> None: ...

    def produce_many(self, records: Iterable[tuple[bytes | None, bytes]]) -> int:
        """Produce (key, value) pairs; returns how many. Implementations may batch."""
        n = 0
        for key, value in records:
            self.produce(value, key=key)
            n += 1
        return n

    @abc.abstractmethod
    def flush(self) -> None:
        """Block until every produced message is acknowledged by the stream: it survives this process crashing.
        (Surviving power loss is the implementation's setting, e.g. ``stream.log.fsync``.)"""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> StreamProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamAdmin(abc.ABC):
    @abc.abstractmethod
    def create_topic(self, topic: str, partitions: int) -> None:
        """Raises TopicExistsError."""

    @abc.abstractmethod
    def topic_exists(self, topic: str) -> bool: ...

    @abc.abstractmethod
    def set_partition_count(self, topic: str, partitions: int) -> None:
        """Grow a topic. Shrinking is refused with a UserError; may raise UnsupportedOperationError."""

    @abc.abstractmethod
    def delete_topic(self, topic: str) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> StreamAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def partition_for_key(key: bytes | None, partitions: int) -> int:
    """Key-hash partitioning shared by every producer Cuvee writes with, so a key always lands in one partition.

    murmur2 as Kafka's Java client uses, so Cuvee and Java producers agree on placement."""
    if key is None:
        raise ValueError("partition_for_key needs a key")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c) as an unsigned 32-bit int; Pinot's Murmur partition function uses it too."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    idx = length & ~3
    if extra == 3:
        h ^= data[idx + 2] << 16
    if extra >= 2:
        h ^= data[idx + 1] << 8
    if extra >= 1:
        h ^= data[idx]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h
