"""Task configs as Pinot spells them: parsed with defaults, every mistake reported with its path."""

from __future__ import annotations

from typing import Any

import pytest

from cuvee.config import Schema, TableConfig
from cuvee.config.errors import ConfigValidationError
from cuvee.config.validation import table_schema_issues
from cuvee.maintenance.config import Aggregation, MergeType, task_configs
from cuvee.maintenance.periods import format_period, period_ms

SCHEMA = Schema.from_json({
    "schemaName": "sales", "dimensionFieldSpecs": [{"name": "country", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})


STREAM = {"streamType": "log", "stream.log.topic.name": "t", "stream.log.dir": "/tmp/none",
          "stream.log.consumer.type": "lowlevel"}


def table(tasks: dict[str, Any], table_type: str = "OFFLINE", **extra: Any) -> TableConfig:
    return TableConfig.from_json({"tableName": "sales", "tableType": table_type,
                                  "segmentsConfig": {"timeColumnName": "ts"},
                                  "task": {"taskTypeConfigsMap": tasks}, **extra})


def test_periods() -> None:
    assert period_ms("1d") == 86_400_000 and period_ms("6H") == 21_600_000 and period_ms("1d12h") == 129_600_000
    assert period_ms("30m") == 1_800_000 and period_ms("10s") == 10_000
    for bad in ("", "1", "d", "1w", "-1d", "0d", "1d 2h", "99999d"):
        with pytest.raises(ValueError):
            period_ms(bad)
    assert format_period(129_600_000) == "1d12h" and format_period(0) == "0s"


def test_merge_rollup_levels_and_aggregations() -> None:
    configs = task_configs(table({"MergeRollupTask": {
        "1day.mergeType": "rollup", "1day.bucketTimePeriod": "1d", "1day.bufferTimePeriod": "2d",
        "1hour.bucketTimePeriod": "1h", "1hour.bufferTimePeriod": "3h", "1hour.maxNumRecordsPerSegment": "1000",
        "1day.roundBucketTimePeriod": "1h", "amount.aggregationType": "max", "schedule": "0 * * * * ?"}}), SCHEMA)
    merge = configs.merge_rollup
    assert merge is not None and configs.types == ("MergeRollupTask",)
    assert [level.name for level in merge.levels] == ["1hour", "1day"]  # smallest bucket first
    hour, day = merge.levels
    assert (hour.merge_type, hour.max_records_per_segment, hour.buffer_ms) == (MergeType.CONCAT, 1000, 10_800_000)
    assert (day.merge_type, day.round_bucket_ms, day.max_records_per_task) == (MergeType.ROLLUP, 3_600_000, 5_000_000)
    assert merge.aggregations == {"amount": Aggregation.MAX}


def test_every_mistake_is_reported_with_its_path() -> None:
    bad = table({"MergeRollupTask": {"1day.mergetype": "concat", "1day.bucketTimePeriod": "1 day",
                                     "1hour.bucketTimePeriod": "1h", "1hour.mergeType": "squash",
                                     "country.aggregationType": "sum", "nope.aggregationType": "avg",
                                     "7h.bucketTimePeriod": "7h", "7h.bufferTimePeriod": "1h"},
                 "Cleanup": {}})
    issues = {i.path: i.message for i in table_schema_issues(bad, SCHEMA)}
    base = "$.task.taskTypeConfigsMap"
    assert "unknown task type" in issues[f"{base}.Cleanup"]
    assert "unknown key" in issues[f"{base}.MergeRollupTask.1day.mergetype"]
    assert "time period" in issues[f"{base}.MergeRollupTask.1day.bucketTimePeriod"]
    assert "required" in issues[f"{base}.MergeRollupTask.1hour.bufferTimePeriod"]
    assert "concat, rollup or dedup" not in str(issues)  # 1hour had no buffer, so it was not parsed further
    assert "not a metric" in issues[f"{base}.MergeRollupTask.country.aggregationType"]
    assert "sum, min or max" in issues[f"{base}.MergeRollupTask.nope.aggregationType"]
    with pytest.raises(ConfigValidationError, match="Cleanup"):
        task_configs(bad, SCHEMA)


def test_level_buckets_must_nest_and_types_fit_the_table() -> None:
    uneven = table({"MergeRollupTask": {"a.bucketTimePeriod": "2h", "a.bufferTimePeriod": "1h",
                                        "b.bucketTimePeriod": "3h", "b.bufferTimePeriod": "1h"}})
    assert any("multiple" in i.message for i in table_schema_issues(uneven, SCHEMA))
    realtime_merge = {"MergeRollupTask": {"a.bucketTimePeriod": "1h", "a.bufferTimePeriod": "1h"}}
    stream = {"tableIndexConfig": {"streamConfigs": STREAM}}
    assert table_schema_issues(table(realtime_merge, "REALTIME", **stream), SCHEMA) == []  # committed segments
    upsert = {"upsertConfig": {"mode": "FULL"}}
    issues = table_schema_issues(table(realtime_merge, "REALTIME", **stream, **upsert),
                                 Schema.from_json({**SCHEMA.to_json(), "primaryKeyColumns": ["country"]}))
    assert any("UpsertCompactionTask" in i.message for i in issues)
    issues = table_schema_issues(table({"RealtimeToOfflineSegmentsTask": {}}), SCHEMA)
    assert any("REALTIME half" in i.message for i in issues)
    issues = table_schema_issues(table({"UpsertCompactionTask": {"invalidRecordsThresholdPercent": "130"}}), SCHEMA)
    assert any("upsert table" in i.message for i in issues) and any("0 to 100" in i.message for i in issues)


def test_realtime_to_offline_defaults() -> None:
    stream = {"tableIndexConfig": {"streamConfigs": STREAM}}
    configs = task_configs(table({"RealtimeToOfflineSegmentsTask": {"bucketTimePeriod": "6h"}}, "REALTIME",
                                 **stream), SCHEMA)
    rto = configs.realtime_to_offline
    assert rto is not None and (rto.bucket_ms, rto.buffer_ms, rto.merge_type) == (21_600_000, 172_800_000,
                                                                                  MergeType.CONCAT)


def test_rollup_of_bytes_metrics_rounding_and_time_columns_are_checked() -> None:
    schema = Schema.from_json({**SCHEMA.to_json(), "metricFieldSpecs": [
        {"name": "amount", "dataType": "DOUBLE"}, {"name": "sketch", "dataType": "BYTES"}]})
    bad = table({"MergeRollupTask": {"d.bucketTimePeriod": "1d", "d.bufferTimePeriod": "1d", "d.mergeType": "rollup",
                                     "d.roundBucketTimePeriod": "7h", "x" * 40 + ".bucketTimePeriod": "1d"}})
    messages = " ".join(i.message for i in table_schema_issues(bad, schema))
    assert "BYTES metric 'sketch'" in messages and "must divide" in messages and "1..32 letters" in messages
    dated = Schema.from_json({**SCHEMA.to_json(), "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "STRING", "format": "1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd",
         "granularity": "1:DAYS"}]})
    plain = table({"MergeRollupTask": {"d.bucketTimePeriod": "1d", "d.bufferTimePeriod": "1d"}})
    assert any("not an epoch" in i.message for i in table_schema_issues(plain, dated))


def test_realtime_to_offline_refuses_rounding() -> None:
    """Rounding moved rows down would lower the offline end time, and the boundary with it, under rows the
    realtime half also serves: counted twice."""
    stream = {"tableIndexConfig": {"streamConfigs": STREAM}}
    issues = table_schema_issues(table({"RealtimeToOfflineSegmentsTask": {"roundBucketTimePeriod": "1h"}},
                                       "REALTIME", **stream), SCHEMA)
    assert any(i.path.endswith("roundBucketTimePeriod") and "counted twice" in i.message for i in issues)


def test_a_realtime_retention_shorter_than_a_move_needs_is_refused() -> None:
    """A review found the documented rule lost rows: the realtime half must keep rows for a bucket, the buffer and
    the time boundary's lag, or they expire before they move (or after, while the realtime half still serves
    their range)."""
    stream = {"tableIndexConfig": {"streamConfigs": STREAM}}

    def issues(retention_hours: int) -> list[str]:
        config = TableConfig.from_json({
            "tableName": "sales", "tableType": "REALTIME", **stream,
            "segmentsConfig": {"timeColumnName": "ts", "retentionTimeUnit": "HOURS",
                               "retentionTimeValue": str(retention_hours)},
            "task": {"taskTypeConfigsMap": {"RealtimeToOfflineSegmentsTask": {"bucketTimePeriod": "1h",
                                                                              "bufferTimePeriod": "1h"}}}})
        return [i.path + ": " + i.message for i in table_schema_issues(config, SCHEMA)]

    assert any(m.startswith("segmentsConfig.retentionTimeValue") and "at least 3h" in m for m in issues(2))
    assert issues(48) == []
