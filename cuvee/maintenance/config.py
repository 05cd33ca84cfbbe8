"""Task configs in a table config, as Pinot spells them (``task.taskTypeConfigsMap``). Pure.

Pinot's values are strings (``"1000000"``, ``"1d"``); numbers are accepted too. Every problem is reported with
its JSON path at once (``ConfigIssue``), so a table config with a misspelt task key is refused when it is
created, not when the job first runs::

    "task": {"taskTypeConfigsMap": {
      "MergeRollupTask": {"1hour.mergeType": "concat", "1hour.bucketTimePeriod": "1h",
                          "1hour.bufferTimePeriod": "3h", "1day.mergeType": "rollup",
                          "1day.bucketTimePeriod": "1d", "1day.bufferTimePeriod": "1d",
                          "clicks.aggregationType": "sum"},
      "RealtimeToOfflineSegmentsTask": {"bucketTimePeriod": "6h", "bufferTimePeriod": "1d"},
      "UpsertCompactionTask": {"bufferTimePeriod": "7d", "invalidRecordsThresholdPercent": "30"}}}
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.config.schema import DataType, FieldRole, Schema
from cuvee.config.table import TableConfig
from cuvee.maintenance.periods import format_period, period_ms


def _millis_per_value(schema: Schema, column: str | None) -> float | None:
    """``cluster.time_boundary.millis_per_value``, imported when called: cuvee.cluster imports cuvee.config,
    whose validation imports this module."""
    from cuvee.cluster.time_boundary import millis_per_value

    return millis_per_value(schema, column)

MERGE_ROLLUP = "MergeRollupTask"
REALTIME_TO_OFFLINE = "RealtimeToOfflineSegmentsTask"
UPSERT_COMPACTION = "UpsertCompactionTask"
TASK_TYPES = (MERGE_ROLLUP, REALTIME_TO_OFFLINE, UPSERT_COMPACTION)
COMMON_KEYS = frozenset({"schedule", "tableMaxNumTasks", "minionInstanceTag"})  # Pinot's scheduling keys: kept

DEFAULT_RECORDS_PER_SEGMENT = 5_000_000  # Pinot's defaults
DEFAULT_RECORDS_PER_TASK = 5_000_000  # Pinot's is 50M; a Spark task here merges its rows in one Python worker
MAX_LEVELS = 8
_LEVEL_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_PATH = "$.task.taskTypeConfigsMap"


class MergeType(str, enum.Enum):
    CONCAT = "concat"  # rows as they are
    ROLLUP = "rollup"  # one row per distinct dimensions (and rounded time), metrics aggregated
    DEDUP = "dedup"  # one row per distinct row


class Aggregation(str, enum.Enum):
    SUM = "sum"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True)
class MergeLevel:
    """One level of MergeRollupTask (``1hour``, ``1day``…): windows of ``bucket_ms``, merged ``buffer_ms`` after
    they end."""

    name: str
    bucket_ms: int
    buffer_ms: int
    merge_type: MergeType = MergeType.CONCAT
    round_bucket_ms: int | None = None
    max_records_per_segment: int = DEFAULT_RECORDS_PER_SEGMENT
    max_records_per_task: int = DEFAULT_RECORDS_PER_TASK
    max_parallel_buckets: int = 1


@dataclass(frozen=True)
class MergeRollupConfig:
    levels: tuple[MergeLevel, ...]  # by bucket size, smallest first
    aggregations: Mapping[str, Aggregation] = field(default_factory=dict)

    def level(self, name: str) -> MergeLevel:
        for level in self.levels:
            if level.name == name:
                return level
        raise KeyError(name)


@dataclass(frozen=True)
class RealtimeToOfflineConfig:
    bucket_ms: int = 86_400_000
    buffer_ms: int = 2 * 86_400_000
    merge_type: MergeType = MergeType.CONCAT
    max_records_per_segment: int = DEFAULT_RECORDS_PER_SEGMENT
    aggregations: Mapping[str, Aggregation] = field(default_factory=dict)


@dataclass(frozen=True)
class UpsertCompactionConfig:
    buffer_ms: int = 7 * 86_400_000
    invalid_percent: float = 0.0  # a segment is compacted when both thresholds are met (and it has an invalid doc)
    invalid_count: int = 0


@dataclass(frozen=True)
class TaskConfigs:
    merge_rollup: MergeRollupConfig | None = None
    realtime_to_offline: RealtimeToOfflineConfig | None = None
    upsert_compaction: UpsertCompactionConfig | None = None

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(t for t, c in zip(TASK_TYPES, (self.merge_rollup, self.realtime_to_offline,
                                                     self.upsert_compaction)) if c is not None)


def task_configs(table: TableConfig, schema: Schema | None = None) -> TaskConfigs:
    """The table's task configs; ConfigValidationError (every issue, with its path) when one is wrong."""
    issues: list[ConfigIssue] = []
    configs = parse_task_configs(table, schema, issues)
    if issues:
        raise ConfigValidationError(f"task configs of {table.name_with_type!r}", issues)
    return configs


def parse_task_configs(table: TableConfig, schema: Schema | None, issues: list[ConfigIssue]) -> TaskConfigs:
    task = table.extra.get("task")
    if task is None:
        return TaskConfigs()
    if not isinstance(task, dict) or not isinstance(task.get("taskTypeConfigsMap", {}), dict):
        issues.append(ConfigIssue("$.task", 'must be {"taskTypeConfigsMap": {"<TaskType>": {...}}}'))
        return TaskConfigs()
    found: dict[str, Any] = {}
    for task_type, raw in task.get("taskTypeConfigsMap", {}).items():
        path = f"{_PATH}.{task_type}"
        if task_type not in TASK_TYPES:
            issues.append(ConfigIssue(path, f"unknown task type; Cuvee runs {', '.join(TASK_TYPES)}"))
            continue
        if not isinstance(raw, dict):
            issues.append(ConfigIssue(path, "must be an object of string keys and values"))
            continue
        reader = _Reader(raw, path, issues)
        if task_type == MERGE_ROLLUP:
            found[task_type] = _merge_rollup(reader, table, schema)
        elif task_type == REALTIME_TO_OFFLINE:
            found[task_type] = _realtime_to_offline(reader, table, schema)
        else:
            found[task_type] = _upsert_compaction(reader, table)
    return TaskConfigs(found.get(MERGE_ROLLUP), found.get(REALTIME_TO_OFFLINE), found.get(UPSERT_COMPACTION))


class _Reader:
    """Reads Pinot's string-valued task keys, reporting each bad value under its path."""

    def __init__(self, raw: dict[str, Any], path: str, issues: list[ConfigIssue]):
        self.raw, self.path, self.issues = raw, path, issues

    def report(self, key: str, message: str) -> None:
        self.issues.append(ConfigIssue(f"{self.path}.{key}", message))

    def text(self, key: str) -> str | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            self.report(key, "must be a string")
            return None
        return str(value).strip()

    def period(self, key: str, default: int | None) -> int | None:
        value = self.text(key)
        if value is None:
            return default
        try:
            return period_ms(value)
        except ValueError as exc:
            self.report(key, str(exc))
            return default

    def integer(self, key: str, default: int, *, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
        value = self.text(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            self.report(key, f"must be a whole number, got {value!r}")
            return default
        if not minimum <= number <= maximum:
            self.report(key, f"must be between {minimum} and {maximum}, got {number}")
            return default
        return number

    def merge_type(self, key: str) -> MergeType:
        value = self.text(key)
        if value is None:
            return MergeType.CONCAT
        try:
            return MergeType(value.lower())
        except ValueError:
            self.report(key, f"must be concat, rollup or dedup, got {value!r}")
            return MergeType.CONCAT


def _aggregations(reader: _Reader, schema: Schema | None) -> dict[str, Aggregation]:
    out: dict[str, Aggregation] = {}
    for key in reader.raw:
        if not key.endswith(".aggregationType"):
            continue
        column = key[: -len(".aggregationType")]
        value = (reader.text(key) or "").lower()
        try:
            out[column] = Aggregation(value)
        except ValueError:
            reader.report(key, f"must be sum, min or max, got {value!r}")
            continue
        if schema is not None:
            if not schema.has_column(column):
                reader.report(key, f"column {column!r} is not in schema {schema.name!r}")
            elif schema.column(column).role is not FieldRole.METRIC:
                reader.report(key, f"column {column!r} is not a metric: only metrics are aggregated by a rollup")
    return out


_LEVEL_KEYS = frozenset({"mergeType", "bucketTimePeriod", "bufferTimePeriod", "roundBucketTimePeriod",
                         "maxNumRecordsPerSegment", "maxNumRecordsPerTask", "maxNumParallelBuckets"})


def _merge_rollup(reader: _Reader, table: TableConfig, schema: Schema | None) -> MergeRollupConfig:
    levels: dict[str, dict[str, str]] = {}
    for key in reader.raw:
        if key in COMMON_KEYS or key.endswith(".aggregationType"):
            continue
        name, _, setting = key.partition(".")
        if not setting or setting not in _LEVEL_KEYS:
            reader.report(key, "unknown key: a level's keys are <level>." + ", <level>.".join(sorted(_LEVEL_KEYS))
                          + "; a metric's <column>.aggregationType")
            continue
        if not name or not set(name) <= _LEVEL_NAME_CHARS or len(name) > 32:
            reader.report(key, "a level name is 1..32 letters and digits (e.g. 1hour, 1day)")
            continue
        levels.setdefault(name, {})[setting] = key
    if table.time_column is None:
        reader.issues.append(ConfigIssue(reader.path, "merges group segments by time: the table needs "
                                                      "segmentsConfig.timeColumnName"))
    elif schema is not None and _millis_per_value(schema, table.time_column) is None:
        reader.issues.append(ConfigIssue(reader.path, f"time column {table.time_column!r} is not an epoch or "
                                                      "TIMESTAMP column: segments' time ranges cannot be bucketed"))
    if table.is_upsert:
        reader.issues.append(ConfigIssue(reader.path, "MergeRollupTask cannot merge an upsert table's segments "
                                                      "(the latest row per key is decided per segment); use "
                                                      "UpsertCompactionTask"))
    if not levels:
        reader.issues.append(ConfigIssue(reader.path, "no level configured (e.g. 1day.bucketTimePeriod)"))
    if len(levels) > MAX_LEVELS:
        reader.issues.append(ConfigIssue(reader.path, f"at most {MAX_LEVELS} levels"))
    parsed = []
    for name, keys in levels.items():
        bucket = reader.period(f"{name}.bucketTimePeriod", None)
        buffer = reader.period(f"{name}.bufferTimePeriod", None)
        if "bucketTimePeriod" not in keys:
            reader.report(f"{name}.bucketTimePeriod", "is required for each level")
        if "bufferTimePeriod" not in keys:
            reader.report(f"{name}.bufferTimePeriod", "is required for each level")
        if bucket is None or buffer is None:
            continue
        rounding = reader.period(f"{name}.roundBucketTimePeriod", None)
        if rounding is not None and (rounding > bucket or bucket % rounding):
            reader.report(f"{name}.roundBucketTimePeriod", "must divide the level's bucketTimePeriod")
        merge_type = reader.merge_type(f"{name}.mergeType")
        if merge_type is MergeType.ROLLUP and schema is not None:
            for spec in schema.fields:
                if spec.role is FieldRole.METRIC and spec.data_type is DataType.BYTES:
                    reader.report(f"{name}.mergeType", f"rollup cannot aggregate BYTES metric {spec.name!r} "
                                                       "(serialized sketches); use concat or dedup")
        parsed.append(MergeLevel(
            name, bucket, buffer, merge_type, rounding,
            reader.integer(f"{name}.maxNumRecordsPerSegment", DEFAULT_RECORDS_PER_SEGMENT),
            reader.integer(f"{name}.maxNumRecordsPerTask", DEFAULT_RECORDS_PER_TASK),
            reader.integer(f"{name}.maxNumParallelBuckets", 1, maximum=10_000)))
    parsed.sort(key=lambda level: level.bucket_ms)
    for lower, higher in zip(parsed, parsed[1:]):
        if higher.bucket_ms == lower.bucket_ms or higher.bucket_ms % lower.bucket_ms:
            reader.report(f"{higher.name}.bucketTimePeriod", f"must be a multiple of level {lower.name}'s bucket "
                                                             "(a higher level merges whole lower-level buckets)")
    return MergeRollupConfig(tuple(parsed), _aggregations(reader, schema))


def _realtime_to_offline(reader: _Reader, table: TableConfig, schema: Schema | None) -> RealtimeToOfflineConfig:
    known = {"bucketTimePeriod", "bufferTimePeriod", "roundBucketTimePeriod", "mergeType", "maxNumRecordsPerSegment"}
    for key in reader.raw:
        if key not in known and key not in COMMON_KEYS and not key.endswith(".aggregationType"):
            reader.report(key, f"unknown key; known: {', '.join(sorted(known))}, <column>.aggregationType")
    if not table.is_realtime:
        reader.issues.append(ConfigIssue(reader.path, "RealtimeToOfflineSegmentsTask belongs in the REALTIME half "
                                                      "of a hybrid table"))
    if table.is_upsert:
        reader.issues.append(ConfigIssue(reader.path, "an upsert table cannot move rows to an offline half (the "
                                                      "latest row per key must stay in one place)"))
    if table.time_column is None:
        reader.issues.append(ConfigIssue(reader.path, "the table needs segmentsConfig.timeColumnName"))
    _refuse_rounding(reader)
    parsed = RealtimeToOfflineConfig(
        reader.period("bucketTimePeriod", 86_400_000) or 86_400_000,
        reader.period("bufferTimePeriod", 2 * 86_400_000) or 2 * 86_400_000,
        reader.merge_type("mergeType"),
        reader.integer("maxNumRecordsPerSegment", DEFAULT_RECORDS_PER_SEGMENT), _aggregations(reader, schema))
    _check_retention(reader, table, parsed)
    return parsed


_SMALLEST_BOUNDARY_LAG_MS = 3_600_000  # the hybrid time boundary trails the offline end by a day, or an hour


def _check_retention(reader: _Reader, table: TableConfig, task: RealtimeToOfflineConfig) -> None:
    """A window's rows must outlive their move: the realtime half keeps serving everything after the time
    boundary, which trails the moved rows' newest time by a day (an hour for an HOURLY-pushed offline half). A
    realtime retention shorter than a bucket, the buffer and that lag together expires rows before they move, or
    leaves a range neither half answers for; refused (the exact rule, with the time between runs, is in
    docs/maintenance.md)."""
    retention = table.segments.retention_ms
    needed = task.bucket_ms + task.buffer_ms + _SMALLEST_BOUNDARY_LAG_MS
    if retention is not None and retention < needed:
        reader.issues.append(ConfigIssue(
            "segmentsConfig.retentionTimeValue", f"the realtime retention ({format_period(retention)}) must be "
            f"longer than RealtimeToOfflineSegmentsTask's bucketTimePeriod + bufferTimePeriod + the time boundary's "
            f"lag + the time between runs (at least {format_period(needed)}, with an HOURLY-pushed offline half; "
            "the lag is a day with a DAILY one), or rows expire before they move"))


def _refuse_rounding(reader: _Reader) -> None:
    """Rounding moved rows' times down would lower the offline half's end time, and the time boundary with it,
    under rows the realtime half still serves: rows near the boundary would be counted twice. Refused."""
    if reader.text("roundBucketTimePeriod") is not None:
        reader.report("roundBucketTimePeriod", "is not supported: rounding moved rows' times down would move the "
                                               "hybrid time boundary under rows the realtime half also serves "
                                               "(counted twice); leave it out (MergeRollupTask can round an "
                                               "OFFLINE-only table)")


def _upsert_compaction(reader: _Reader, table: TableConfig) -> UpsertCompactionConfig:
    known = {"bufferTimePeriod", "invalidRecordsThresholdPercent", "invalidRecordsThresholdCount",
             "validDocIdsType"}
    for key in reader.raw:
        if key not in known and key not in COMMON_KEYS:
            reader.report(key, f"unknown key; known: {', '.join(sorted(known))}")
    if not table.is_upsert:
        reader.issues.append(ConfigIssue(reader.path, "UpsertCompactionTask needs an upsert table (upsertConfig)"))
    percent_text = reader.text("invalidRecordsThresholdPercent")
    percent = 0.0
    if percent_text is not None:
        try:
            percent = float(percent_text)
            if not 0 <= percent <= 100:
                raise ValueError
        except ValueError:
            reader.report("invalidRecordsThresholdPercent", f"must be a number from 0 to 100, got {percent_text!r}")
            percent = 0.0
    return UpsertCompactionConfig(reader.period("bufferTimePeriod", 7 * 86_400_000) or 7 * 86_400_000, percent,
                                  reader.integer("invalidRecordsThresholdCount", 0, minimum=0))
