"""Opening streams from a table's streamConfigs map."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvee.errors import UserError
from cuvee.stream import kafka_consumer_properties, log_topic_settings, open_admin, open_consumer, open_producer
from cuvee.stream.kafka import shared_client_settings
from cuvee.stream.log import LogAdmin, LogConsumer, LogProducer


def test_log_is_the_default_stream_type(tmp_path: Path) -> None:
    configs = {"stream.log.dir": str(tmp_path), "stream.log.topic.name": "events",
               "realtime.segment.flush.threshold.rows": "1000"}  # other families' keys are left alone
    admin = open_admin(configs)
    assert isinstance(admin, LogAdmin)
    admin.create_topic("events", 2)
    with open_producer(configs) as producer, open_consumer(configs) as consumer:
        assert isinstance(producer, LogProducer) and isinstance(consumer, LogConsumer)
        producer.produce(b"hello", partition=1)
        producer.flush()
        assert [m.value for m in consumer.fetch(1, 0, max_wait_ms=0).messages] == [b"hello"]


def test_log_settings_from_stream_configs(tmp_path: Path) -> None:
    configs = {"streamType": "log", "stream.log.dir": str(tmp_path), "stream.log.topic.name": "t",
               "stream.log.segment.bytes": "4096", "stream.log.retention.ms": "60000"}
    settings = log_topic_settings(configs)
    assert (settings.segment_bytes, settings.retention_bytes, settings.retention_ms) == (4096, None, 60000)
    admin = open_admin(configs)
    admin.create_topic("t", 1)
    assert isinstance(admin, LogAdmin) and admin.topic_settings("t") == settings


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"stream.log.topic.name": "t"}, "'stream.log.dir'"),
        ({"stream.log.dir": "/tmp/x"}, "'stream.log.topic.name'"),
        ({"streamType": "pulsar"}, "unknown streamType 'pulsar'"),
        ({"streamType": "kafka", "stream.kafka.topic.name": "t"}, "'stream.kafka.broker.list'"),
        ({"streamType": "kafka", "stream.kafka.broker.list": "h:1"}, "'stream.kafka.topic.name'"),
        ({"stream.log.dir": "/tmp/x", "stream.log.topic.name": "t", "stream.log.retention.bites": "1"},
         "'stream.log.retention.bites'"),
        ({"stream.log.dir": "/tmp/x", "stream.log.topic.name": "t", "stream.log.fetch.poll.interval.ms": "soon"},
         "'stream.log.fetch.poll.interval.ms' must be a whole number"),
    ],
)
def test_config_mistakes_name_the_key(configs: dict[str, str], message: str) -> None:
    with pytest.raises(UserError, match=message.replace(".", r"\.").replace("'", "'")):
        open_consumer(configs)


def test_kafka_consumer_properties_pass_through() -> None:
    configs = {
        "streamType": "kafka",
        "stream.kafka.consumer.prop.auto.offset.reset": "smallest",
        "stream.kafka.consumer.prop.security.protocol": "SASL_SSL",
        "stream.kafka.consumer.prop.fetch.min.bytes": "1",
        "stream.kafka.decoder.class.name": "ignored",
    }
    properties = kafka_consumer_properties(configs)
    assert properties == {"auto.offset.reset": "smallest", "security.protocol": "SASL_SSL", "fetch.min.bytes": "1"}
    assert shared_client_settings(properties) == {"security.protocol": "SASL_SSL"}


def test_pinot_style_log_consumer_props_are_accepted(tmp_path: Path) -> None:
    configs = {"stream.log.dir": str(tmp_path), "stream.log.topic.name": "t",
               "stream.log.consumer.prop.auto.offset.reset": "smallest"}
    LogAdmin(tmp_path).create_topic("t", 1)
    with open_consumer(configs) as consumer:
        assert consumer.partition_count() == 1


def test_fsync_and_retention_check_settings(tmp_path: Path) -> None:
    configs = {"stream.log.dir": str(tmp_path), "stream.log.topic.name": "t", "stream.log.fsync": "true",
               "stream.log.retention.check.interval.ms": "5000"}
    LogAdmin(tmp_path).create_topic("t", 1)
    with open_producer(configs) as producer:
        assert isinstance(producer, LogProducer)
        assert producer.fsync and producer.retention_check_interval_ms == 5000
        producer.produce(b"synced", partition=0)
    with pytest.raises(UserError, match="'stream.log.fsync' must be true or false"):
        open_producer({**configs, "stream.log.fsync": "sometimes"})
