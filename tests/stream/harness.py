"""The stream implementations under test, behind one face for the conformance suite."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from cuvee.spi.stream import StreamAdmin, StreamConsumer, StreamProducer
from cuvee.stream import open_consumer, open_producer

_topic_numbers = itertools.count()


@dataclass
class StreamUnderTest:
    """One stream implementation as the conformance suite sees it, opened through the streamConfigs factories."""

    kind: str
    base_configs: dict[str, str]
    admin: StreamAdmin
    topic_key: str
    # Tansu's high watermark is wrong (see cuvee.stream.kafka): exact latest offsets only where they are reliable.
    exact_latest: bool
    growth_unsupported_reason: str | None
    _opened: list[StreamConsumer | StreamProducer] = field(default_factory=list)

    def configs(self, topic: str) -> dict[str, str]:
        return {**self.base_configs, self.topic_key: topic}

    def new_topic(self, partitions: int = 1) -> str:
        topic = f"conformance-{next(_topic_numbers)}-{time.monotonic_ns() % 1_000_000}"
        self.admin.create_topic(topic, partitions)
        return topic

    def consumer(self, topic: str) -> StreamConsumer:
        consumer = open_consumer(self.configs(topic))
        self._opened.append(consumer)
        return consumer

    def producer(self, topic: str) -> StreamProducer:
        producer = open_producer(self.configs(topic))
        self._opened.append(producer)
        return producer

    def close(self) -> None:
        for opened in reversed(self._opened):
            opened.close()
        self.admin.close()
