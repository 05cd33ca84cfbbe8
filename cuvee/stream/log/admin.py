"""StreamAdmin over the embedded log, plus what only the log has: retention settings and applying them."""

from __future__ import annotations

import os
from collections.abc import Callable

from cuvee.spi.stream import StreamAdmin
from cuvee.stream.log.partition import PartitionReader, PartitionWriter
from cuvee.stream.log.producer import wall_clock_ms
from cuvee.stream.log.topic import TopicSettings, TopicStore, TopicView


class LogAdmin(StreamAdmin):
    """Creates, grows and deletes topics under ``log_dir``; new topics get ``default_settings``."""

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        default_settings: TopicSettings | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ):
        self.store = TopicStore(log_dir)
        self.default_settings = default_settings or TopicSettings()
        self.clock_ms = clock_ms

    def create_topic(self, topic: str, partitions: int, settings: TopicSettings | None = None) -> None:
        self.store.create(topic, partitions, settings or self.default_settings)

    def topic_exists(self, topic: str) -> bool:
        return self.store.exists(topic)

    def set_partition_count(self, topic: str, partitions: int) -> None:
        self.store.grow(topic, partitions)

    def delete_topic(self, topic: str) -> None:
        self.store.delete(topic)

    def list_topics(self) -> list[str]:
        return self.store.list_topics()

    def topic_settings(self, topic: str) -> TopicSettings:
        return self.store.read(topic).settings

    def configure_topic(self, topic: str, settings: TopicSettings) -> None:
        self.store.configure(topic, settings)

    def apply_retention(self, topic: str, now_ms: int | None = None) -> dict[int, int]:
        """Apply the topic's retention to every partition now; returns each partition's earliest offset after."""
        view = TopicView(self.store, topic)
        meta = view.meta()
        now = self.clock_ms() if now_ms is None else now_ms
        earliest = {}
        for partition in range(meta.partitions):
            writer = PartitionWriter(view.partition_dir(partition), topic, partition)
            earliest[partition] = writer.apply_retention(meta.settings.retention_bytes, meta.settings.retention_ms, now)
        return earliest

    def offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """{partition: (earliest, latest)}."""
        view = TopicView(self.store, topic)
        result = {}
        for partition in range(view.meta().partitions):
            reader = PartitionReader(view.partition_dir(partition), topic, partition)
            try:
                result[partition] = (reader.earliest_offset(), reader.latest_offset())
            finally:
                reader.close()
        return result

    def close(self) -> None:
        """Nothing to release: every call opens and closes what it uses."""
