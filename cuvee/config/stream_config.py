"""The ``streamConfigs`` map of a realtime table: which stream to consume and when to end a consuming segment.

Key names are Pinot's, so a Pinot table config works unchanged. The raw map stays available as ``properties``
because stream implementations read their own keys from it (e.g. ``stream.kafka.consumer.prop.*``). The decoder
keys (``cuvee.config.decoder_config``) and Pinot's Kafka security keys (``cuvee.config.kafka_security``) are
checked here, so a table whose messages cannot be decoded or whose broker cannot be reached as configured is
refused when it is created.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from cuvee.config.decoder_config import JSON_DECODER, DecoderSpec, parse_decoder
from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.config.json_reader import child_path
from cuvee.config.kafka_security import kafka_client_properties
from cuvee.config.units import parse_duration_ms, parse_size_bytes


class StreamKeys:
    """Every ``streamConfigs`` key Cuvee reads, in one place."""

    STREAM_TYPE = "streamType"
    KAFKA_TOPIC = "stream.kafka.topic.name"
    KAFKA_BROKERS = "stream.kafka.broker.list"
    LOG_TOPIC = "stream.log.topic.name"
    LOG_DIR = "stream.log.dir"
    FLUSH_ROWS = "realtime.segment.flush.threshold.rows"
    FLUSH_ROWS_LEGACY = "realtime.segment.flush.threshold.size"
    FLUSH_ROWS_LLC = "realtime.segment.flush.threshold.size.llc"  # Pinot's older low-level-consumer spelling
    FLUSH_TIME = "realtime.segment.flush.threshold.time"
    FLUSH_TIME_LLC = "realtime.segment.flush.threshold.time.llc"
    FLUSH_SEGMENT_SIZE = "realtime.segment.flush.threshold.segment.size"
    FLUSH_SEGMENT_SIZE_LEGACY = "realtime.segment.flush.desired.size"
    AUTOTUNE_INITIAL_ROWS = "realtime.segment.flush.autotune.initialRows"
    AUTOTUNE_LEARNING = "realtime.segment.flush.autotune.learning"

    @staticmethod
    def offset_reset(stream_type: str) -> str:
        """``stream.<type>.consumer.prop.auto.offset.reset``: where a brand-new table starts consuming."""
        return f"stream.{stream_type}.consumer.prop.auto.offset.reset"

    @staticmethod
    def consumer_prop_prefix(stream_type: str) -> str:
        return f"stream.{stream_type}.consumer.prop."

    @staticmethod
    def decoder_class(stream_type: str) -> str:
        """``stream.<type>.decoder.class.name``: Pinot's decoder class (``cuvee.decode.spec`` maps it)."""
        return f"stream.{stream_type}.decoder.class.name"

    @staticmethod
    def decoder_prop_prefix(stream_type: str) -> str:
        return f"stream.{stream_type}.decoder.prop."


# Pinot's defaults (StreamConfig.java).
DEFAULT_FLUSH_THRESHOLD_ROWS = 5_000_000
DEFAULT_FLUSH_THRESHOLD_TIME_MS = 6 * 3_600_000
DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES = 200 * 1024 * 1024
DEFAULT_AUTOTUNE_INITIAL_ROWS = 100_000


class StreamType(str, enum.Enum):
    LOG = "log"
    KAFKA = "kafka"


class OffsetReset(str, enum.Enum):
    """Where consumption of a new table starts; Pinot's "smallest"/"largest" (Kafka's earliest/latest)."""

    SMALLEST = "smallest"
    LARGEST = "largest"


_OFFSET_RESET_ALIASES = {
    "smallest": OffsetReset.SMALLEST,
    "earliest": OffsetReset.SMALLEST,
    "largest": OffsetReset.LARGEST,
    "latest": OffsetReset.LARGEST,
}


@dataclass(frozen=True)
class StreamConfig:
    """A parsed ``streamConfigs`` map. Build it with ``from_properties``; ``properties`` is the source of truth."""

    stream_type: StreamType
    topic_name: str
    # Kafka only: "host:port,host:port".
    broker_list: str | None
    # Embedded log only: the directory holding the log's topics.
    log_dir: str | None
    offset_reset: OffsetReset
    # 0 means "auto-tune the row count toward flush_threshold_segment_size_bytes" (DESIGN.md section 8).
    flush_threshold_rows: int
    flush_threshold_time_ms: int
    flush_threshold_segment_size_bytes: int
    flush_autotune_initial_rows: int
    # Who teaches the size learner: "each" partition its own R, "all" one R, or a partition number (the seed's way).
    flush_autotune_learning: str | int = "each"
    # What turns the messages into rows (``stream.<type>.decoder.*``; JSON when not given).
    decoder: DecoderSpec = JSON_DECODER
    properties: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def auto_tuned(self) -> bool:
        """True when segments end at a learned row count rather than a fixed one."""
        return self.flush_threshold_rows == 0

    def consumer_properties(self) -> dict[str, str]:
        """``stream.<type>.consumer.prop.*`` with the prefix removed (e.g. Kafka client settings)."""
        prefix = StreamKeys.consumer_prop_prefix(self.stream_type.value)
        return {k[len(prefix) :]: v for k, v in self.properties.items() if k.startswith(prefix)}

    def to_json(self) -> dict[str, str]:
        return dict(self.properties)

    @classmethod
    def from_json(cls, doc: Any) -> StreamConfig:
        """Parse a bare ``streamConfigs`` map; raises ConfigValidationError listing every problem."""
        issues: list[ConfigIssue] = []
        parsed = cls.parse(doc, "$", issues)
        if issues or parsed is None:
            raise ConfigValidationError("stream config", issues)
        return parsed

    @classmethod
    def parse(cls, doc: Any, path: str, issues: list[ConfigIssue]) -> StreamConfig | None:
        """Parse the map found at ``path``, appending problems to ``issues``; None when it is unusable."""
        if not isinstance(doc, dict):
            issues.append(ConfigIssue(path, "must be a JSON object of stream properties"))
            return None
        props = {str(k): _as_text(v) for k, v in doc.items()}
        before = len(issues)

        def at(key: str) -> str:
            return child_path(path, key)

        raw_type = props.get(StreamKeys.STREAM_TYPE, StreamType.LOG.value).strip().lower()
        try:
            stream_type = StreamType(raw_type)
        except ValueError:
            allowed = ", ".join(t.value for t in StreamType)
            issues.append(ConfigIssue(at(StreamKeys.STREAM_TYPE), f"{raw_type!r} is not one of {allowed}"))
            stream_type = None

        topic = broker_list = log_dir = None
        if stream_type is StreamType.KAFKA:
            topic = _required(props, StreamKeys.KAFKA_TOPIC, at, issues)
            broker_list = _required(props, StreamKeys.KAFKA_BROKERS, at, issues)
        elif stream_type is StreamType.LOG:
            topic = _required(props, StreamKeys.LOG_TOPIC, at, issues)
            log_dir = _required(props, StreamKeys.LOG_DIR, at, issues)

        decoder = None
        if stream_type is not None:
            decoder = parse_decoder(props, stream_type.value, at, issues)
        if stream_type is StreamType.KAFKA:  # Pinot's security keys must translate to librdkafka's
            issues.extend(ConfigIssue(at(issue.key), issue.message) for issue in kafka_client_properties(props)[1])

        offset_reset = OffsetReset.LARGEST
        if stream_type is not None:
            reset_key = StreamKeys.offset_reset(stream_type.value)
            if reset_key in props:
                choice = _OFFSET_RESET_ALIASES.get(props[reset_key].strip().lower())
                if choice is None:
                    allowed = ", ".join(_OFFSET_RESET_ALIASES)
                    issues.append(ConfigIssue(at(reset_key), f"{props[reset_key]!r} is not one of {allowed}"))
                else:
                    offset_reset = choice

        rows_key = _pick_alias(props, StreamKeys.FLUSH_ROWS, StreamKeys.FLUSH_ROWS_LEGACY, at, issues,
                               StreamKeys.FLUSH_ROWS_LLC)
        rows = _parse_int(props, rows_key, DEFAULT_FLUSH_THRESHOLD_ROWS, at, issues)
        initial_rows = _parse_int(props, StreamKeys.AUTOTUNE_INITIAL_ROWS, DEFAULT_AUTOTUNE_INITIAL_ROWS, at, issues)
        if initial_rows == 0:
            issues.append(ConfigIssue(at(StreamKeys.AUTOTUNE_INITIAL_ROWS), "must be a positive integer"))
        learning: str | int = props.get(StreamKeys.AUTOTUNE_LEARNING, "each").strip().lower()
        if learning not in ("each", "all"):
            if str(learning).isdigit():
                learning = int(learning)
            else:
                issues.append(ConfigIssue(at(StreamKeys.AUTOTUNE_LEARNING),
                                          f"{props[StreamKeys.AUTOTUNE_LEARNING]!r} must be each, all or a partition "
                                          "number"))
                learning = "each"

        time_ms = DEFAULT_FLUSH_THRESHOLD_TIME_MS
        time_key = _pick_alias(props, StreamKeys.FLUSH_TIME, StreamKeys.FLUSH_TIME_LLC, at, issues)
        if time_key in props:
            try:
                time_ms = parse_duration_ms(props[time_key])
            except ValueError as e:
                issues.append(ConfigIssue(at(time_key), str(e)))
            else:
                if time_ms == 0:
                    issues.append(ConfigIssue(at(time_key), "must be longer than zero"))

        size_key = _pick_alias(
            props, StreamKeys.FLUSH_SEGMENT_SIZE, StreamKeys.FLUSH_SEGMENT_SIZE_LEGACY, at, issues
        )
        size = DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES
        if size_key in props:
            try:
                size = parse_size_bytes(props[size_key])
            except ValueError as e:
                issues.append(ConfigIssue(at(size_key), str(e)))
            else:
                if size == 0:
                    issues.append(ConfigIssue(at(size_key), "must be larger than zero"))

        if len(issues) > before or stream_type is None or topic is None or decoder is None:
            return None
        return cls(
            stream_type=stream_type,
            topic_name=topic,
            broker_list=broker_list,
            log_dir=log_dir,
            offset_reset=offset_reset,
            flush_threshold_rows=rows,
            flush_threshold_time_ms=time_ms,
            flush_threshold_segment_size_bytes=size,
            flush_autotune_initial_rows=initial_rows,
            flush_autotune_learning=learning,
            decoder=decoder,
            properties=props,
        )


def _as_text(value: Any) -> str:
    """Pinot's stream configs are a string map; accept JSON numbers and booleans as their usual spelling."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _required(props: dict[str, str], key: str, at: Any, issues: list[ConfigIssue]) -> str | None:
    value = props.get(key, "").strip()
    if not value:
        issues.append(ConfigIssue(at(key), "required, a non-empty string"))
        return None
    return value


def _pick_alias(props: dict[str, str], key: str, legacy: str, at: Any, issues: list[ConfigIssue],
                *older: str) -> str:
    """The key to read: the current name, else its older aliases in order; two given with different values is an
    error."""
    names = [name for name in (key, legacy, *older) if name in props]
    for other in names[1:]:
        if props[other].strip() != props[names[0]].strip():
            issues.append(ConfigIssue(at(other), f"conflicts with {names[0]!r}; give only one of them"))
    return names[0] if names else legacy


def _parse_int(props: dict[str, str], key: str, default: int, at: Any, issues: list[ConfigIssue]) -> int:
    if key not in props:
        return default
    text = props[key].strip()
    if not text.isdigit():
        issues.append(ConfigIssue(at(key), f"{props[key]!r} must be a non-negative integer"))
        return default
    return int(text)
