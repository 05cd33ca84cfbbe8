from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.config import ConfigValidationError, OffsetReset, StreamConfig, StreamKeys, StreamType
from cuvee.config.stream_config import (
    DEFAULT_FLUSH_THRESHOLD_ROWS,
    DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES,
    DEFAULT_FLUSH_THRESHOLD_TIME_MS,
)
from tests.config.conftest import issues_of

LOG = {"stream.log.topic.name": "events", "stream.log.dir": "/tmp/log"}
KAFKA = {"streamType": "kafka", "stream.kafka.topic.name": "events", "stream.kafka.broker.list": "k1:9092"}


def errors(props: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigValidationError) as info:
        StreamConfig.from_json(props)
    return issues_of(info.value)


def test_log_stream_is_the_default_and_gets_pinots_defaults() -> None:
    config = StreamConfig.from_json(LOG)
    assert config.stream_type is StreamType.LOG
    assert (config.topic_name, config.log_dir, config.broker_list) == ("events", "/tmp/log", None)
    assert config.flush_threshold_rows == DEFAULT_FLUSH_THRESHOLD_ROWS == 5_000_000
    assert config.flush_threshold_time_ms == DEFAULT_FLUSH_THRESHOLD_TIME_MS == 6 * 3_600_000
    assert config.flush_threshold_segment_size_bytes == DEFAULT_FLUSH_THRESHOLD_SEGMENT_SIZE_BYTES == 200 * 1024**2
    assert config.offset_reset is OffsetReset.LARGEST
    assert not config.auto_tuned


def test_kafka_stream_reads_topic_and_brokers() -> None:
    config = StreamConfig.from_json(KAFKA)
    assert config.stream_type is StreamType.KAFKA
    assert (config.topic_name, config.broker_list, config.log_dir) == ("events", "k1:9092", None)


def test_raw_properties_are_kept_for_the_stream_factories() -> None:
    props = {**KAFKA, "stream.kafka.consumer.prop.isolation.level": "read_committed", "custom.key": 7}
    config = StreamConfig.from_json(props)
    assert config.properties["custom.key"] == "7"
    assert config.properties["stream.kafka.topic.name"] == "events"
    assert config.consumer_properties() == {"isolation.level": "read_committed"}
    assert StreamConfig.from_json(config.to_json()) == config


@pytest.mark.parametrize(
    ("value", "expected"),
    [("smallest", OffsetReset.SMALLEST), ("earliest", OffsetReset.SMALLEST), ("EARLIEST", OffsetReset.SMALLEST),
     ("largest", OffsetReset.LARGEST), ("latest", OffsetReset.LARGEST)],
)
def test_offset_reset_accepts_kafka_aliases(value: str, expected: OffsetReset) -> None:
    kafka = StreamConfig.from_json({**KAFKA, "stream.kafka.consumer.prop.auto.offset.reset": value})
    log = StreamConfig.from_json({**LOG, "stream.log.consumer.prop.auto.offset.reset": value})
    assert kafka.offset_reset is expected
    assert log.offset_reset is expected


def test_bad_offset_reset_is_reported_at_its_key() -> None:
    found = errors({**KAFKA, "stream.kafka.consumer.prop.auto.offset.reset": "middle"})
    assert "'middle' is not one of smallest, earliest" in found["$['stream.kafka.consumer.prop.auto.offset.reset']"]


def test_legacy_flush_keys_are_aliases() -> None:
    config = StreamConfig.from_json(
        {**LOG, "realtime.segment.flush.threshold.size": "250000", "realtime.segment.flush.desired.size": "150MB"}
    )
    assert config.flush_threshold_rows == 250_000
    assert config.flush_threshold_segment_size_bytes == 150 * 1024**2


def test_current_flush_keys_are_read() -> None:
    config = StreamConfig.from_json({
        **LOG,
        StreamKeys.FLUSH_ROWS: "0",
        StreamKeys.FLUSH_TIME: "100ms",
        StreamKeys.FLUSH_SEGMENT_SIZE: "1G",
        StreamKeys.AUTOTUNE_INITIAL_ROWS: "5000",
    })
    assert config.auto_tuned
    assert config.flush_threshold_time_ms == 100
    assert config.flush_threshold_segment_size_bytes == 1024**3
    assert config.flush_autotune_initial_rows == 5000


def test_flush_time_accepts_plain_milliseconds_like_pinot() -> None:
    assert StreamConfig.from_json({**LOG, StreamKeys.FLUSH_TIME: "60000"}).flush_threshold_time_ms == 60_000


def test_a_key_and_its_alias_with_different_values_conflict() -> None:
    found = errors({**LOG, StreamKeys.FLUSH_ROWS: "10", StreamKeys.FLUSH_ROWS_LEGACY: "20"})
    assert found == {"$['realtime.segment.flush.threshold.size']":
                     "conflicts with 'realtime.segment.flush.threshold.rows'; give only one of them"}


def test_a_key_and_its_alias_with_the_same_value_are_fine() -> None:
    config = StreamConfig.from_json({**LOG, StreamKeys.FLUSH_ROWS: "10", StreamKeys.FLUSH_ROWS_LEGACY: "10"})
    assert config.flush_threshold_rows == 10


def test_every_problem_is_reported_at_once_with_its_key() -> None:
    found = errors({
        "streamType": "kafka",
        StreamKeys.FLUSH_ROWS: "-5",
        StreamKeys.FLUSH_TIME: "soon",
        StreamKeys.FLUSH_SEGMENT_SIZE: "0",
        StreamKeys.AUTOTUNE_INITIAL_ROWS: "0",
    })
    assert set(found) == {
        "$['stream.kafka.topic.name']",
        "$['stream.kafka.broker.list']",
        "$['realtime.segment.flush.threshold.rows']",
        "$['realtime.segment.flush.threshold.time']",
        "$['realtime.segment.flush.threshold.segment.size']",
        "$['realtime.segment.flush.autotune.initialRows']",
    }
    assert found["$['stream.kafka.topic.name']"] == "required, a non-empty string"
    assert "must be a non-negative integer" in found["$['realtime.segment.flush.threshold.rows']"]
    assert "'soon' is not a duration" in found["$['realtime.segment.flush.threshold.time']"]
    assert found["$['realtime.segment.flush.threshold.segment.size']"] == "must be larger than zero"


def test_log_stream_needs_topic_and_directory() -> None:
    assert set(errors({"streamType": "log"})) == {"$['stream.log.topic.name']", "$['stream.log.dir']"}


def test_unknown_stream_type_is_refused() -> None:
    assert errors({"streamType": "kinesis"}) == {"$.streamType": "'kinesis' is not one of log, kafka"}


def test_stream_config_must_be_an_object() -> None:
    assert errors(["streamType"]) == {"$": "must be a JSON object of stream properties"}  # type: ignore[arg-type]


@given(rows=st.integers(min_value=0, max_value=10**9), minutes=st.integers(min_value=1, max_value=10**5))
def test_numbers_survive_a_round_trip(rows: int, minutes: int) -> None:
    config = StreamConfig.from_json({**LOG, StreamKeys.FLUSH_ROWS: rows, StreamKeys.FLUSH_TIME: f"{minutes}m"})
    assert config.flush_threshold_rows == rows
    assert config.flush_threshold_time_ms == minutes * 60_000
    assert StreamConfig.from_json(config.to_json()) == config


def test_the_size_learner_learns_per_partition_unless_told_all_or_one() -> None:
    key = StreamKeys.AUTOTUNE_LEARNING
    assert StreamConfig.from_json(LOG).flush_autotune_learning == "each"
    assert StreamConfig.from_json({**LOG, key: "All"}).flush_autotune_learning == "all"
    assert StreamConfig.from_json({**LOG, key: "2"}).flush_autotune_learning == 2
    assert "must be each, all or a partition number" in errors({**LOG, key: "first"})[f"$['{key}']"]


def test_pinots_older_llc_spellings_of_the_flush_thresholds_are_read() -> None:
    base = {"streamType": "log", "stream.log.topic.name": "t", "stream.log.dir": "/tmp/l"}
    parsed = StreamConfig.from_json({**base, "realtime.segment.flush.threshold.size.llc": "1234",
                                     "realtime.segment.flush.threshold.time.llc": "30m"})
    assert (parsed.flush_threshold_rows, parsed.flush_threshold_time_ms) == (1234, 1_800_000)
    with pytest.raises(ConfigValidationError) as info:
        StreamConfig.from_json({**base, "realtime.segment.flush.threshold.rows": "10",
                                "realtime.segment.flush.threshold.size.llc": "20"})
    assert "conflicts with 'realtime.segment.flush.threshold.rows'" in str(info.value)
