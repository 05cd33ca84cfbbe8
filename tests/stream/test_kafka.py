"""Kafka-only behaviour (against tansu): what the shared conformance suite cannot reach there."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cuvee.spi.stream import OffsetOutOfRangeError, UnsupportedOperationError
from cuvee.stream.kafka import KafkaAdmin, KafkaConsumer
from cuvee.testing.tansu import TansuBroker

pytestmark = pytest.mark.kafka


@pytest.fixture
def admin(tansu: TansuBroker) -> Iterator[KafkaAdmin]:
    admin = KafkaAdmin(tansu.bootstrap_servers, timeout_s=10)
    yield admin
    admin.close()


def test_fetch_below_the_low_watermark_raises(tansu: TansuBroker, admin: KafkaAdmin,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Tansu never drops messages, so its low watermark is faked to what retention would leave."""
    admin.create_topic("kafka-low-watermark", 1)
    consumer = KafkaConsumer(tansu.bootstrap_servers, "kafka-low-watermark")
    try:
        monkeypatch.setattr(consumer, "_watermarks", lambda partition: (40, 100))
        with pytest.raises(OffsetOutOfRangeError) as raised:
            consumer.fetch(0, 12, max_wait_ms=0)
        assert (raised.value.requested, raised.value.earliest) == (12, 40)
    finally:
        consumer.close()


def test_growing_partitions_on_tansu_is_reported_as_unsupported(admin: KafkaAdmin) -> None:
    admin.create_topic("kafka-no-growth", 2)
    with pytest.raises(UnsupportedOperationError, match="add partitions"):
        admin.set_partition_count("kafka-no-growth", 4)
    admin.set_partition_count("kafka-no-growth", 2)  # the same count needs no broker support
