"""Stream implementations, opened from a table's Pinot-style ``streamConfigs`` map.

``streamType`` picks the implementation: ``log`` (the default, Cuvee's embedded log: ``stream.log.topic.name``,
``stream.log.dir``) or ``kafka`` (``stream.kafka.topic.name``, ``stream.kafka.broker.list``, any
``stream.kafka.consumer.prop.<librdkafka setting>``, and Pinot's Kafka security keys, translated for librdkafka by
``cuvee.config.kafka_security``; consumers, producers and admin clients get the same security settings). Keys of
other families (``realtime.segment.*``, decoders...) are left to their owners; an unknown ``stream.log.*`` key is
reported, since it can only be a typo.

Optional embedded-log keys: ``stream.log.segment.bytes``, ``stream.log.retention.bytes`` (per partition) and
``stream.log.retention.ms`` (settings of topics created through ``open_admin``), ``stream.log.retention.check.interval.ms``
(how often producers apply retention), ``stream.log.fetch.poll.interval.ms`` (how often a waiting fetch looks for
data) and ``stream.log.fsync`` (``true``: sync every append to disk).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cuvee.config.kafka_security import kafka_client_properties
from cuvee.config.stream_config import StreamKeys
from cuvee.errors import UserError
from cuvee.spi.stream import StreamAdmin, StreamConsumer, StreamProducer
from cuvee.stream.log.topic import TopicSettings

# Keys shared with table-config validation are spelled once, in StreamKeys; the rest are the log's own settings.
STREAM_TYPE = StreamKeys.STREAM_TYPE
LOG_TOPIC = StreamKeys.LOG_TOPIC
LOG_DIR = StreamKeys.LOG_DIR
LOG_SEGMENT_BYTES = "stream.log.segment.bytes"
LOG_RETENTION_BYTES = "stream.log.retention.bytes"
LOG_RETENTION_MS = "stream.log.retention.ms"
LOG_RETENTION_CHECK_MS = "stream.log.retention.check.interval.ms"
LOG_POLL_INTERVAL_MS = "stream.log.fetch.poll.interval.ms"
LOG_FSYNC = "stream.log.fsync"
LOG_CONSUMER_PROP_PREFIX = StreamKeys.consumer_prop_prefix("log")  # e.g. auto.offset.reset; read by the controller
KAFKA_TOPIC = StreamKeys.KAFKA_TOPIC
KAFKA_BROKERS = StreamKeys.KAFKA_BROKERS
KAFKA_CONSUMER_PROP_PREFIX = StreamKeys.consumer_prop_prefix("kafka")

_LOG_KEYS = {LOG_TOPIC, LOG_DIR, LOG_SEGMENT_BYTES, LOG_RETENTION_BYTES, LOG_RETENTION_MS, LOG_RETENTION_CHECK_MS,
             LOG_POLL_INTERVAL_MS, LOG_FSYNC}
# stream.log.* keys read elsewhere: consumer props (the controller) and the decoder's (cuvee.decode).
_LOG_OTHER_FAMILIES = (LOG_CONSUMER_PROP_PREFIX, StreamKeys.decoder_class("log"), StreamKeys.decoder_prop_prefix("log"))
STREAM_TYPES = ("log", "kafka")


def stream_type(stream_configs: Mapping[str, str]) -> str:
    kind = stream_configs.get(STREAM_TYPE, "log")
    if kind not in STREAM_TYPES:
        raise UserError(f"streamConfigs: unknown {STREAM_TYPE} {kind!r} (expected one of {', '.join(STREAM_TYPES)})")
    if kind == "log":
        unknown = sorted(
            key for key in stream_configs
            if key.startswith("stream.log.") and key not in _LOG_KEYS and not key.startswith(_LOG_OTHER_FAMILIES)
        )
        if unknown:
            raise UserError(f"streamConfigs: unknown key {unknown[0]!r} for the embedded log "
                            f"(known: {', '.join(sorted(_LOG_KEYS))})")
    return kind


def _required(stream_configs: Mapping[str, str], key: str) -> str:
    value = stream_configs.get(key)
    if value is None or not str(value).strip():
        raise UserError(f"streamConfigs: missing {key!r} (needed for streamType {stream_type(stream_configs)!r})")
    return str(value)


def _optional_int(stream_configs: Mapping[str, str], key: str) -> int | None:
    value = stream_configs.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise UserError(f"streamConfigs: {key!r} must be a whole number, got {value!r}") from None


def kafka_consumer_properties(stream_configs: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings: ``stream.kafka.consumer.prop.X`` -> ``X``, with Pinot's Kafka security keys (top level
    or consumer.prop) translated by ``cuvee.config.kafka_security``; a key that cannot be honoured is a UserError
    naming it (never its value)."""
    settings, issues = kafka_client_properties(stream_configs)
    if issues:
        raise UserError("streamConfigs: " + "; ".join(f"{issue.key!r}: {issue.message}" for issue in issues))
    return settings


def log_topic_settings(stream_configs: Mapping[str, str]) -> TopicSettings:
    """Segment size and retention for topics created from these stream configs."""
    defaults = TopicSettings()
    segment_bytes = _optional_int(stream_configs, LOG_SEGMENT_BYTES)
    return TopicSettings(
        segment_bytes=defaults.segment_bytes if segment_bytes is None else segment_bytes,
        retention_bytes=_optional_int(stream_configs, LOG_RETENTION_BYTES),
        retention_ms=_optional_int(stream_configs, LOG_RETENTION_MS),
    )


def open_consumer(stream_configs: Mapping[str, str]) -> StreamConsumer:
    if stream_type(stream_configs) == "kafka":
        from cuvee.stream.kafka import KafkaConsumer

        return KafkaConsumer(
            _required(stream_configs, KAFKA_BROKERS), _required(stream_configs, KAFKA_TOPIC),
            kafka_consumer_properties(stream_configs),
        )
    from cuvee.stream.log import LogConsumer

    poll_ms = _optional_int(stream_configs, LOG_POLL_INTERVAL_MS)
    return LogConsumer(
        _required(stream_configs, LOG_DIR), _required(stream_configs, LOG_TOPIC),
        **({} if poll_ms is None else {"poll_interval_ms": poll_ms}),
    )


def open_producer(stream_configs: Mapping[str, str], clock_ms: Callable[[], int] | None = None) -> StreamProducer:
    if stream_type(stream_configs) == "kafka":
        from cuvee.stream.kafka import KafkaProducer, shared_client_settings

        return KafkaProducer(
            _required(stream_configs, KAFKA_BROKERS), _required(stream_configs, KAFKA_TOPIC),
            shared_client_settings(kafka_consumer_properties(stream_configs)),
        )
    from cuvee.stream.log import LogProducer

    options: dict[str, object] = {}
    if LOG_RETENTION_CHECK_MS in stream_configs:
        options["retention_check_interval_ms"] = _optional_int(stream_configs, LOG_RETENTION_CHECK_MS)
    if clock_ms is not None:
        options["clock_ms"] = clock_ms
    fsync = stream_configs.get(LOG_FSYNC, "false").strip().lower()
    if fsync not in ("true", "false"):
        raise UserError(f"streamConfigs: {LOG_FSYNC!r} must be true or false, got {stream_configs[LOG_FSYNC]!r}")
    options["fsync"] = fsync == "true"
    return LogProducer(_required(stream_configs, LOG_DIR), _required(stream_configs, LOG_TOPIC), **options)  # type: ignore[arg-type]


def open_admin(stream_configs: Mapping[str, str]) -> StreamAdmin:
    """An admin for the stream's cluster (Kafka) or log directory; new log topics get the ``stream.log.*`` settings."""
    if stream_type(stream_configs) == "kafka":
        from cuvee.stream.kafka import KafkaAdmin, shared_client_settings

        return KafkaAdmin(
            _required(stream_configs, KAFKA_BROKERS), shared_client_settings(kafka_consumer_properties(stream_configs))
        )
    from cuvee.stream.log import LogAdmin

    return LogAdmin(_required(stream_configs, LOG_DIR), log_topic_settings(stream_configs))
