"""The stream SPI over Apache Kafka (or any Kafka-protocol broker) through ``confluent-kafka``.

Consumers never join a group: ``fetch`` assigns the one partition at an explicit offset (no subscribe, no commits),
as Pinot's low-level consumers do; the controller decides who reads what from where. A fetch below the low
watermark raises OffsetOutOfRangeError (``auto.offset.reset`` is forced to ``error``, so librdkafka never skips
silently). Producers use ``partitioner=murmur2_random``, so a keyed message lands where
``cuvee.spi.stream.partition_for_key`` says, as with Kafka's Java producer and Cuvee's embedded log.

A fetch from an offset other than where the previous fetch of that partition ended re-assigns the partition,
which costs about one ``fetch.wait.max.ms`` (set to 100 ms here); reading on from ``next_offset`` does not.

Known broker quirks:

- tansu (the Kafka-protocol broker the tests run) reports a wrong high watermark: after 10,000 messages in a
  partition it answered 8,537 to 9,615 (apparently the base offset of the last batch). ``latest_offset`` returns
  what the broker says; do not take it as exact against tansu, and compute lag against a reliable stream in tests.
- tansu cannot add partitions (CreatePartitions): ``set_partition_count`` raises UnsupportedOperationError there.
- tansu creates a topic when asked for its metadata by name, so existence checks list all topics instead.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from cuvee.errors import UserError
from cuvee.spi.stream import (
    MessageBatch,
    OffsetOutOfRangeError,
    PartitionNotFoundError,
    StreamAdmin,
    StreamConsumer,
    StreamError,
    StreamProducer,
    TopicExistsError,
    TopicNotFoundError,
    UnsupportedOperationError,
)

log = logging.getLogger(__name__)

# Settings Cuvee owns on its consumers: group management and offset resets would undo explicit-offset reads.
_FORCED_CONSUMER_SETTINGS = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "enable.partition.eof": False,
    "allow.auto.create.topics": False,
}
# Client settings that matter to producers and admin clients too (connection and security).
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "client.", "socket.", "broker.address.")
_OUT_OF_RANGE_CODES = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
_UNSUPPORTED_CODES = {KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_VERSION, KafkaError.INVALID_REQUEST}


def shared_client_settings(properties: Mapping[str, str]) -> dict[str, str]:
    """The subset of consumer properties that also configure producers and admin clients."""
    return {key: value for key, value in properties.items() if key.startswith(_SHARED_PREFIXES)}


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


class _ConnectionErrors:
    """librdkafka's error callback. Why a connection failed (SASL authentication, a TLS handshake, a refused
    connection) reaches only this callback; the call that then times out says "transport failure". Kept so a
    StreamError can tell the operator the cause."""

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error.str()

    def explain(self) -> str:
        return f" (the last connection error: {self.last})" if self.last else ""


_SECRET_KEYS = ("password", ".pem", "user.info")


def _open_client(kind: type[Any], settings: dict[str, Any]) -> tuple[Any, _ConnectionErrors]:
    """A librdkafka client with an error callback; settings it refuses are a StreamError whose text never holds a
    secret setting's value."""
    errors = _ConnectionErrors()
    try:
        return kind({**settings, "error_cb": errors}), errors
    except KafkaException as exc:
        text = str(exc)
        for key, value in settings.items():
            if any(part in key for part in _SECRET_KEYS) and isinstance(value, str) and value:
                text = text.replace(value, "***")
        raise StreamError(f"the Kafka client settings were refused: {text}") from None


def _list_topic_partitions(
    admin: AdminClient | Consumer | Producer, topic: str, timeout_s: float, errors: _ConnectionErrors
) -> int | None:
    """Partition count of ``topic``, or None if it does not exist (lists all topics: see the module docs)."""
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        try:
            admin.poll(0)  # librdkafka calls the error callback from poll: let it report why
        except KafkaException:
            pass
        raise StreamError(f"cannot read Kafka metadata: {exc}{errors.explain()}") from exc
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return None
    return len(found.partitions)


@dataclass
class _PartitionClient:
    """A librdkafka consumer assigned to one partition, and the offset its fetch position is at."""

    consumer: Consumer
    position: int | None = None


class KafkaConsumer(StreamConsumer):
    """Reads one topic by explicit offsets; ``properties`` are extra librdkafka consumer settings.

    Each partition fetched gets its own librdkafka consumer, so alternating between partitions never re-assigns
    (a re-assignment waits out the broker's pending fetch); another one answers metadata and watermark requests."""

    def __init__(
        self, bootstrap_servers: str, topic: str, properties: Mapping[str, str] | None = None, timeout_s: float = 10.0
    ):
        self._settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"cuvee-unmanaged-{uuid.uuid4().hex}",  # required by librdkafka; never joined or committed
            "logger": log,
            # A broker holds an empty fetch this long, and a re-assigned consumer waits for that fetch to return.
            "fetch.wait.max.ms": 100,
        }
        self._settings.update(properties or {})
        ignored = sorted(set(properties or {}) & set(_FORCED_CONSUMER_SETTINGS))
        if ignored:
            log.info("ignoring consumer properties %s: Cuvee sets them to read by explicit offsets", ignored)
        self._settings.update(_FORCED_CONSUMER_SETTINGS)
        self.topic = topic
        self.timeout_s = timeout_s
        self._metadata, self._errors = _open_client(Consumer, self._settings)
        self._clients: dict[int, _PartitionClient] = {}
        try:
            self._partitions = _list_topic_partitions(self._metadata, topic, timeout_s, self._errors)
        except StreamError:
            self._metadata.close()
            raise
        if self._partitions is None:
            self._metadata.close()
            raise TopicNotFoundError(f"Kafka topic {topic!r} does not exist on {bootstrap_servers}")

    def partition_count(self) -> int:
        count = _list_topic_partitions(self._metadata, self.topic, self.timeout_s, self._errors)
        if count is None:
            raise TopicNotFoundError(f"Kafka topic {self.topic!r} does not exist")
        self._partitions = count
        return count

    def _check_partition(self, partition: int) -> TopicPartition:
        if not 0 <= partition < (self._partitions or 0) and not 0 <= partition < self.partition_count():
            raise PartitionNotFoundError(f"topic {self.topic!r} has {self._partitions} partitions; no partition {partition}")
        return TopicPartition(self.topic, partition)

    def _watermarks(self, partition: int) -> tuple[int, int]:
        try:
            low, high = self._metadata.get_watermark_offsets(self._check_partition(partition), timeout=self.timeout_s)
        except KafkaException as exc:
            raise StreamError(f"cannot read the offsets of {self.topic}[{partition}]: {exc}") from exc
        return int(low), int(high)

    def earliest_offset(self, partition: int) -> int:
        return self._watermarks(partition)[0]

    def latest_offset(self, partition: int) -> int:
        """The broker's high watermark (tansu's is wrong: see the module docs)."""
        return self._watermarks(partition)[1]

    def fetch(self, partition: int, offset: int, max_messages: int = 10_000, max_wait_ms: int = 100) -> MessageBatch:
        deadline = time.monotonic() + max_wait_ms / 1000
        client = self._clients.get(partition)
        if client is None or client.position != offset:
            earliest = self.earliest_offset(partition)
            if offset < earliest:
                raise OffsetOutOfRangeError(self.topic, partition, offset, earliest)
            if client is None:
                client = self._clients[partition] = _PartitionClient(_open_client(Consumer, self._settings)[0])
            client.consumer.assign([TopicPartition(self.topic, partition, offset)])
            client.position = offset
        first = client.consumer.poll(max(0.0, deadline - time.monotonic()))
        if first is None:
            return MessageBatch.empty(offset)
        raw = [first]
        while len(raw) < max_messages and (queued := client.consumer.consume(max_messages - len(raw), timeout=0)):
            raw.extend(queued)  # take what librdkafka already holds, without waiting for more
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes] = []
        timestamps: list[int] = []
        try:
            for message in raw:
                if not self._usable(message, partition, offset):
                    continue
                at = int(message.offset())
                if at < offset:
                    continue
                offsets.append(at)
                keys.append(message.key())
                values.append(message.value() or b"")
                timestamps.append(int(message.timestamp()[1]))
        except StreamError:
            client.position = None  # re-assign on the next fetch
            raise
        client.position = offsets[-1] + 1 if offsets else offset
        return MessageBatch(offsets, keys, values, timestamps, client.position)

    def _usable(self, message: Message, partition: int, requested: int) -> bool:
        """True for a data message; False for end-of-partition; raises for an error (out of range: retention)."""
        error = message.error()
        if error is None:
            return True
        if error.code() in _OUT_OF_RANGE_CODES:
            earliest = self.earliest_offset(partition)
            if requested < earliest:
                raise OffsetOutOfRangeError(self.topic, partition, requested, earliest)
            raise StreamError(f"{self.topic}[{partition}]: offset {requested} is out of the broker's range")
        if error.code() == KafkaError._PARTITION_EOF:
            return False
        raise StreamError(f"fetch from {self.topic}[{partition}] failed: {error.str()}")

    def close(self) -> None:
        for client in self._clients.values():
            client.consumer.close()
        self._clients.clear()
        self._metadata.close()


class KafkaProducer(StreamProducer):
    """Produces to one topic; ``flush`` raises StreamError if any message since the last flush was not delivered."""

    def __init__(
        self, bootstrap_servers: str, topic: str, properties: Mapping[str, str] | None = None, timeout_s: float = 30.0
    ):
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "acks": "all",
            "logger": log,
        }
        settings.update(properties or {})
        settings["partitioner"] = "murmur2_random"
        self.topic = topic
        self.timeout_s = timeout_s
        self._producer, connection_errors = _open_client(Producer, settings)
        self._errors: list[str] = []
        if _list_topic_partitions(self._producer, topic, timeout_s, connection_errors) is None:
            raise TopicNotFoundError(f"Kafka topic {topic!r} does not exist on {bootstrap_servers}")

    def _on_delivery(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self._errors.append(error.str())

    def produce(
        self, value: bytes, key: bytes | None = None, partition: int | None = None, timestamp_ms: int | None = None
    ) -> None:
        options: dict[str, Any] = {"value": value, "key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            options["partition"] = partition
        if timestamp_ms is not None:
            options["timestamp"] = timestamp_ms
        while True:
            try:
                self._producer.produce(self.topic, **options)
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain it
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and error.code() == KafkaError._UNKNOWN_PARTITION:
                    raise PartitionNotFoundError(f"topic {self.topic!r} has no partition {partition}") from exc
                raise StreamError(f"cannot produce to {self.topic!r}: {exc}") from exc
        self._producer.poll(0)

    def flush(self) -> None:
        undelivered = self._producer.flush(self.timeout_s)
        errors, self._errors = self._errors, []
        if undelivered:
            raise StreamError(f"{undelivered} messages to {self.topic!r} were not delivered within {self.timeout_s}s")
        if errors:
            raise StreamError(f"{len(errors)} messages to {self.topic!r} failed; the first error: {errors[0]}")

    def close(self) -> None:
        self.flush()


class KafkaAdmin(StreamAdmin):
    """Topic administration. ``replication_factor`` -1 means the broker's default."""

    def __init__(
        self,
        bootstrap_servers: str,
        properties: Mapping[str, str] | None = None,
        replication_factor: int = -1,
        timeout_s: float = 30.0,
    ):
        self._admin, self._connection_errors = _open_client(
            AdminClient, {"bootstrap.servers": bootstrap_servers, "logger": log, **(properties or {})})
        self.replication_factor = replication_factor
        self.timeout_s = timeout_s

    def _partition_count(self, topic: str) -> int | None:
        return _list_topic_partitions(self._admin, topic, self.timeout_s, self._connection_errors)

    def _wait(self, futures: Mapping[str, Any], action: str) -> None:
        for name, future in futures.items():
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                error = _kafka_error(exc)
                code = error.code() if error is not None else None
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicExistsError(f"Kafka topic {name!r} already exists") from exc
                if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise TopicNotFoundError(f"Kafka topic {name!r} does not exist") from exc
                if code in _UNSUPPORTED_CODES:
                    raise UnsupportedOperationError(f"the Kafka broker cannot {action} ({exc})") from exc
                raise StreamError(f"cannot {action} for {name!r}: {exc}") from exc

    def _wait_for_metadata(self, topic: str, partitions: int | None) -> None:
        """Kafka applies topic changes asynchronously: wait until metadata shows them."""
        deadline = time.monotonic() + self.timeout_s
        while (count := self._partition_count(topic)) != partitions:
            if time.monotonic() > deadline:
                raise StreamError(f"Kafka topic {topic!r} shows {count} partitions, not {partitions}, after {self.timeout_s}s")
            time.sleep(0.05)

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions < 1:
            raise UserError(f"a topic needs at least 1 partition, got {partitions}")
        new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=self.replication_factor)
        self._wait(self._admin.create_topics([new_topic]), "create topics")
        self._wait_for_metadata(topic, partitions)

    def topic_exists(self, topic: str) -> bool:
        return self._partition_count(topic) is not None

    def set_partition_count(self, topic: str, partitions: int) -> None:
        current = self._partition_count(topic)
        if current is None:
            raise TopicNotFoundError(f"Kafka topic {topic!r} does not exist")
        if partitions < current:
            raise UserError(f"topic {topic!r} has {current} partitions; a topic can grow but never shrink")
        if partitions == current:
            return
        self._wait(self._admin.create_partitions([NewPartitions(topic, partitions)]), "add partitions")
        self._wait_for_metadata(topic, partitions)

    def delete_topic(self, topic: str) -> None:
        self._wait(self._admin.delete_topics([topic]), "delete topics")
        self._wait_for_metadata(topic, None)

    def close(self) -> None:
        """AdminClient has no close; dropping it releases its threads."""
        self._admin = None  # type: ignore[assignment]
