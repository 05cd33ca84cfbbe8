"""The stream SPI conformance suite: every implementation (embedded log, Kafka on tansu) passes the same tests."""

from __future__ import annotations

import threading
import time

import pytest

from cuvee.spi.stream import (
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    StreamConsumer,
    StreamMessage,
    TopicExistsError,
    TopicNotFoundError,
    partition_for_key,
)
from tests.stream.harness import StreamUnderTest


def fetch_all(consumer: StreamConsumer, partition: int, expected: int, start: int = 0, timeout_s: float = 20.0) -> list[StreamMessage]:
    """Fetch until ``expected`` messages arrived (or fail at the deadline)."""
    messages: list[StreamMessage] = []
    offset = start
    deadline = time.monotonic() + timeout_s
    while len(messages) < expected:
        assert time.monotonic() < deadline, f"only {len(messages)} of {expected} messages within {timeout_s}s"
        batch = consumer.fetch(partition, offset, max_messages=1000, max_wait_ms=200)
        messages.extend(batch.messages)
        offset = batch.next_offset
    return messages


def produce_values(stream: StreamUnderTest, topic: str, count: int, partition: int = 0, flush_every: int = 0) -> None:
    producer = stream.producer(topic)
    for i in range(count):
        producer.produce(f"value-{i}".encode(), partition=partition)
        if flush_every and (i + 1) % flush_every == 0:
            producer.flush()
    producer.flush()


def test_create_topic_and_exists(stream: StreamUnderTest) -> None:
    topic = stream.new_topic(partitions=3)
    assert stream.admin.topic_exists(topic)
    assert not stream.admin.topic_exists(topic + "-missing")
    assert stream.consumer(topic).partition_count() == 3
    with pytest.raises(TopicExistsError):
        stream.admin.create_topic(topic, 3)


def test_missing_topic_is_reported(stream: StreamUnderTest) -> None:
    with pytest.raises(TopicNotFoundError):
        stream.consumer("never-created")
    with pytest.raises(TopicNotFoundError):
        stream.admin.delete_topic("never-created")


def test_delete_topic(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    stream.admin.delete_topic(topic)
    assert not stream.admin.topic_exists(topic)


def test_round_trip_keys_values_timestamps(stream: StreamUnderTest) -> None:
    topic = stream.new_topic(partitions=2)
    sent = [
        (b"k1", b'{"a": 1}', 1_700_000_000_000),
        (None, b"no key", 1_700_000_000_001),
        (b"", b"empty key", 1_700_000_000_002),
        (b"k4", b"", 1_700_000_000_003),
        (b"\x00\xffbinary", bytes(range(256)), 1_600_000_000_000),
    ]
    producer = stream.producer(topic)
    for key, value, timestamp in sent:
        producer.produce(value, key=key, partition=1, timestamp_ms=timestamp)
    producer.flush()
    got = fetch_all(stream.consumer(topic), 1, len(sent))
    assert [(m.key, m.value, m.timestamp_ms) for m in got] == sent
    assert [m.offset for m in got] == list(range(len(sent)))


def test_default_timestamp_is_now(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    before = int(time.time() * 1000)
    producer = stream.producer(topic)
    producer.produce(b"x", partition=0)
    producer.flush()
    after = int(time.time() * 1000)
    (message,) = fetch_all(stream.consumer(topic), 0, 1)
    assert before - 1000 <= message.timestamp_ms <= after + 1000


def test_offsets_are_contiguous_across_flushes(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    produce_values(stream, topic, 500, flush_every=37)
    messages = fetch_all(stream.consumer(topic), 0, 500)
    assert [m.offset for m in messages] == list(range(500))
    assert [m.value for m in messages] == [f"value-{i}".encode() for i in range(500)]


def test_fetch_from_the_middle_and_max_messages(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    produce_values(stream, topic, 300)
    consumer = stream.consumer(topic)
    fetch_all(consumer, 0, 300)  # everything is there before we probe
    batch = consumer.fetch(0, 123, max_messages=10, max_wait_ms=2000)
    assert [m.offset for m in batch.messages] == list(range(123, 133))
    assert [m.value for m in batch.messages] == [f"value-{i}".encode() for i in range(123, 133)]
    assert batch.next_offset == 133
    again = consumer.fetch(0, 5, max_messages=1, max_wait_ms=2000)
    assert [m.offset for m in again.messages] == [5] and again.next_offset == 6


def test_max_wait_returns_an_empty_batch_when_nothing_is_new(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    produce_values(stream, topic, 3)
    consumer = stream.consumer(topic)
    fetch_all(consumer, 0, 3)
    started = time.monotonic()
    batch = consumer.fetch(0, 3, max_messages=100, max_wait_ms=300)
    elapsed = time.monotonic() - started
    assert batch.messages == []
    assert batch.next_offset == 3
    assert 0.25 <= elapsed < 5.0


def test_a_message_produced_during_the_wait_is_returned(stream: StreamUnderTest) -> None:
    topic = stream.new_topic()
    produce_values(stream, topic, 1)
    consumer = stream.consumer(topic)
    fetch_all(consumer, 0, 1)
    producer = stream.producer(topic)
    fetch_started = threading.Event()

    def produce_later() -> None:
        fetch_started.wait(10)
        producer.produce(b"late", partition=0)
        producer.flush()

    thread = threading.Thread(target=produce_later)
    thread.start()
    started = time.monotonic()
    fetch_started.set()
    batch = consumer.fetch(0, 1, max_messages=100, max_wait_ms=15_000)
    elapsed = time.monotonic() - started
    thread.join(10)
    assert [(m.offset, m.value) for m in batch.messages] == [(1, b"late")]
    assert elapsed < 14.0, "the fetch waited out its whole max_wait instead of returning the new message"


def test_keyed_messages_land_where_partition_for_key_says(stream: StreamUnderTest) -> None:
    partitions = 4
    topic = stream.new_topic(partitions=partitions)
    keys = [f"user-{i}".encode() for i in range(200)]
    producer = stream.producer(topic)
    for key in keys:
        producer.produce(b"v:" + key, key=key)
    producer.flush()
    expected_counts = {p: sum(partition_for_key(k, partitions) == p for k in keys) for p in range(partitions)}
    consumer = stream.consumer(topic)
    seen = []
    for partition in range(partitions):
        for message in fetch_all(consumer, partition, expected_counts[partition]):
            assert partition_for_key(message.key, partitions) == partition
            assert message.value == b"v:" + message.key
            seen.append(message.key)
    assert sorted(seen) == sorted(keys)


def test_every_unkeyed_message_lands_once(stream: StreamUnderTest) -> None:
    topic = stream.new_topic(partitions=3)
    producer = stream.producer(topic)
    for i in range(300):
        producer.produce(f"{i}".encode())
        if i % 50 == 49:
            producer.flush()
    producer.flush()
    consumer = stream.consumer(topic)
    values: list[bytes] = []
    next_offsets = [0, 0, 0]
    deadline = time.monotonic() + 20
    while len(values) < 300 and time.monotonic() < deadline:
        for partition in range(3):
            batch = consumer.fetch(partition, next_offsets[partition], max_messages=1000, max_wait_ms=50)
            assert [m.offset for m in batch.messages] == list(range(next_offsets[partition], batch.next_offset))
            values.extend(m.value for m in batch.messages)
            next_offsets[partition] = batch.next_offset
    assert sorted(values) == sorted(f"{i}".encode() for i in range(300))


def test_earliest_and_latest_offsets(stream: StreamUnderTest) -> None:
    topic = stream.new_topic(partitions=2)
    consumer = stream.consumer(topic)
    assert consumer.earliest_offset(0) == 0
    assert consumer.latest_offset(0) == 0
    produce_values(stream, topic, 250, partition=0, flush_every=100)
    fetch_all(consumer, 0, 250)
    assert consumer.earliest_offset(0) == 0
    latest = consumer.latest_offset(0)
    if stream.exact_latest:
        assert latest == 250
    else:
        assert 0 < latest <= 250  # tansu reports the last batch's base offset, not the high watermark
    assert consumer.latest_offset(1) == 0


def test_unknown_partition_is_reported(stream: StreamUnderTest) -> None:
    topic = stream.new_topic(partitions=2)
    with pytest.raises(PartitionNotFoundError):
        stream.consumer(topic).fetch(7, 0, max_wait_ms=0)
    producer = stream.producer(topic)
    with pytest.raises(PartitionNotFoundError):
        producer.produce(b"x", partition=7)
        producer.flush()


def test_fetch_below_earliest_after_retention_raises(stream: StreamUnderTest) -> None:
    if stream.kind != "log":
        pytest.skip("tansu keeps every message in memory: there is no retention to trigger")
    from cuvee.stream.log import LogAdmin, TopicSettings

    admin = stream.admin
    assert isinstance(admin, LogAdmin)
    topic = stream.new_topic()
    admin.configure_topic(topic, TopicSettings(segment_bytes=2000, retention_bytes=4000))
    produce_values(stream, topic, 400, flush_every=20)
    earliest = admin.apply_retention(topic)[0]
    assert earliest > 0
    consumer = stream.consumer(topic)
    with pytest.raises(OffsetOutOfRangeError) as raised:
        consumer.fetch(0, 0, max_wait_ms=0)
    assert raised.value.requested == 0 and raised.value.earliest == earliest
    assert "lost" in str(raised.value)
    assert consumer.earliest_offset(0) == earliest
    batch = consumer.fetch(0, earliest, max_messages=5, max_wait_ms=0)
    assert [m.offset for m in batch.messages] == list(range(earliest, earliest + 5))


def test_partition_growth_is_seen_by_consumers_and_producers(stream: StreamUnderTest) -> None:
    if stream.growth_unsupported_reason:
        pytest.skip(stream.growth_unsupported_reason)
    topic = stream.new_topic(partitions=2)
    consumer = stream.consumer(topic)
    producer = stream.producer(topic)
    producer.produce(b"before", key=b"k")
    producer.flush()
    stream.admin.set_partition_count(topic, 5)
    assert consumer.partition_count() == 5
    keys = [f"key-{i}".encode() for i in range(100)]
    for key in keys:
        producer.produce(key, key=key)
    producer.produce(b"explicit", partition=4)
    producer.flush()
    on_new_partitions = 0
    for partition in range(2, 5):
        batch = consumer.fetch(partition, 0, max_messages=1000, max_wait_ms=0)
        on_new_partitions += len(batch.messages)
        for message in batch.messages:
            assert message.key is None or partition_for_key(message.key, 5) == partition
    assert on_new_partitions == 1 + sum(partition_for_key(k, 5) >= 2 for k in keys)
    stream.admin.set_partition_count(topic, 5)  # same count: a no-op
    assert consumer.partition_count() == 5

