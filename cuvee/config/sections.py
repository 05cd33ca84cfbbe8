"""The parts of a table config (segmentsConfig, tableIndexConfig, tenants, routing, upsertConfig, ingestionConfig).

Each part is a frozen dataclass with ``parse(obj)`` (a JsonObject, problems go to its issue list) and ``to_json``.
Keys we do not interpret are kept in ``extra`` and written back, so Pinot configs survive a round trip.
"""

from __future__ import annotations

import copy
import enum
from dataclasses import dataclass, field
from typing import Any

from cuvee.config.errors import ConfigIssue
from cuvee.config.json_reader import JsonObject, child_path

DEFAULT_TENANT = "DefaultTenant"

# java.util.concurrent.TimeUnit names, as Pinot's retentionTimeUnit uses them.
_TIME_UNIT_MS = {
    "DAYS": 86_400_000,
    "HOURS": 3_600_000,
    "MINUTES": 60_000,
    "SECONDS": 1_000,
    "MILLISECONDS": 1,
}


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Write optional values only, so configs stay as short as the user wrote them."""
    if value is None or value == () or value == {}:
        return
    out[key] = list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class SegmentsConfig:
    """``segmentsConfig``: time column, replication and retention."""

    time_column_name: str | None = None
    replication: int | None = None
    # LLC realtime tables historically set this instead of ``replication``; it wins for REALTIME tables.
    replicas_per_partition: int | None = None
    retention_time_unit: str | None = None
    retention_time_value: int | None = None
    # OFFLINE tables: APPEND (pushes add data) or REFRESH (a push replaces the table's data); HOURLY or DAILY
    # pushes (the time boundary of a hybrid table and the batch jobs' time buckets follow it).
    segment_push_type: str | None = None
    segment_push_frequency: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def retention_ms(self) -> int | None:
        """How long segments are kept, or None to keep them for ever."""
        if self.retention_time_unit is None or self.retention_time_value is None:
            return None
        return self.retention_time_value * _TIME_UNIT_MS[self.retention_time_unit]

    @classmethod
    def parse(cls, obj: JsonObject) -> SegmentsConfig:
        replication = obj.integer("replication", minimum=1)
        per_partition = obj.integer("replicasPerPartition", minimum=1)
        unit = obj.string("retentionTimeUnit", choices=_TIME_UNIT_MS)
        value = obj.integer("retentionTimeValue", minimum=1)
        if obj.has("retentionTimeValue") != obj.has("retentionTimeUnit"):
            missing = "retentionTimeUnit" if obj.has("retentionTimeValue") else "retentionTimeValue"
            obj.report(missing, "required when the other retention key is given")
        return cls(
            time_column_name=obj.string("timeColumnName"),
            replication=replication,
            replicas_per_partition=per_partition,
            retention_time_unit=unit,
            retention_time_value=value,
            segment_push_type=_upper_choice(obj, "segmentPushType", ("APPEND", "REFRESH")),
            segment_push_frequency=_upper_choice(obj, "segmentPushFrequency", ("HOURLY", "DAILY")),
            extra=obj.extras(),
        )

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        _put(out, "timeColumnName", self.time_column_name)
        # Pinot writes these as strings; keep its spelling so Pinot tools read our configs too.
        _put(out, "replication", _text(self.replication))
        _put(out, "replicasPerPartition", _text(self.replicas_per_partition))
        _put(out, "retentionTimeUnit", self.retention_time_unit)
        _put(out, "retentionTimeValue", _text(self.retention_time_value))
        _put(out, "segmentPushType", self.segment_push_type)
        _put(out, "segmentPushFrequency", self.segment_push_frequency)
        return out


def _upper_choice(obj: JsonObject, key: str, choices: tuple[str, ...]) -> str | None:
    """Pinot reads these case-insensitively ("daily", "DAILY")."""
    raw = obj.raw(key)
    if raw is None:
        return None
    if not isinstance(raw, str) or raw.upper() not in choices:
        obj.report(key, f"must be one of {', '.join(choices)}, got {raw!r}")
        return None
    return raw.upper()


@dataclass(frozen=True)
class IndexingConfig:
    """``tableIndexConfig``: which columns get which index, and how segments are laid out."""

    inverted_index_columns: tuple[str, ...] = ()
    no_dictionary_columns: tuple[str, ...] = ()
    sorted_column: str | None = None
    range_index_columns: tuple[str, ...] = ()
    bloom_filter_columns: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> IndexingConfig:
        # Pinot writes a list with at most one entry; a bare string is accepted too.
        raw_sorted = obj.raw("sortedColumn")
        sorted_names: tuple[str, ...] = ()
        if isinstance(raw_sorted, str) and raw_sorted:
            sorted_names = (raw_sorted,)
        elif raw_sorted is not None:
            sorted_names = obj.string_list("sortedColumn")
        if len(sorted_names) > 1:
            obj.report("sortedColumn", f"at most one sorted column, got {len(sorted_names)}")
        sorted_column = sorted_names[0] if len(sorted_names) == 1 else None
        config = cls(
            inverted_index_columns=obj.string_list("invertedIndexColumns"),
            no_dictionary_columns=obj.string_list("noDictionaryColumns"),
            sorted_column=sorted_column,
            range_index_columns=obj.string_list("rangeIndexColumns"),
            bloom_filter_columns=obj.string_list("bloomFilterColumns"),
            extra={k: v for k, v in obj.extras().items() if k != "streamConfigs"},
        )
        config._check_conflicts(obj)
        return config

    def _check_conflicts(self, obj: JsonObject) -> None:
        """Rules that need no schema: a raw (no-dictionary) column has no dictionary to build these on."""
        no_dict = set(self.no_dictionary_columns)
        for i, column in enumerate(self.inverted_index_columns):
            if column in no_dict:
                obj.issues.append(
                    ConfigIssue(child_path(obj.at("invertedIndexColumns"), i),
                           f"{column!r} is also in noDictionaryColumns; an inverted index needs a dictionary")
                )
        if self.sorted_column is not None and self.sorted_column in no_dict:
            obj.report("sortedColumn", f"{self.sorted_column!r} is also in noDictionaryColumns; "
                                       "a sorted column needs a dictionary")

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        _put(out, "invertedIndexColumns", self.inverted_index_columns)
        _put(out, "noDictionaryColumns", self.no_dictionary_columns)
        out["sortedColumn"] = [self.sorted_column] if self.sorted_column else []
        _put(out, "rangeIndexColumns", self.range_index_columns)
        _put(out, "bloomFilterColumns", self.bloom_filter_columns)
        return out


@dataclass(frozen=True)
class TenantConfig:
    """``tenants``: which tagged brokers and servers host the table."""

    broker: str = DEFAULT_TENANT
    server: str = DEFAULT_TENANT
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> TenantConfig:
        return cls(
            broker=obj.string("broker") or DEFAULT_TENANT,
            server=obj.string("server") or DEFAULT_TENANT,
            extra=obj.extras(),
        )

    def to_json(self) -> dict[str, Any]:
        return {**copy.deepcopy(self.extra), "broker": self.broker, "server": self.server}


@dataclass(frozen=True)
class QueryConfig:
    """``query``: ``timeoutMs``, a query's time limit on this table when the query does not set one (Pinot's order:
    the query's option, else this, else the broker's ``timeout_ms``); the other keys are Pinot's hints."""

    timeout_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> QueryConfig:
        return cls(timeout_ms=obj.integer("timeoutMs", minimum=1), extra=obj.extras())

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        _put(out, "timeoutMs", self.timeout_ms)
        return out


@dataclass(frozen=True)
class RoutingConfig:
    """``routing``: how the broker picks segments and replicas (upsert tables want "strictReplicaGroup")."""

    instance_selector_type: str | None = None
    segment_pruner_types: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> RoutingConfig:
        return cls(
            instance_selector_type=obj.string("instanceSelectorType"),
            segment_pruner_types=obj.string_list("segmentPrunerTypes"),
            extra=obj.extras(),
        )

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        _put(out, "instanceSelectorType", self.instance_selector_type)
        _put(out, "segmentPrunerTypes", self.segment_pruner_types)
        return out


class UpsertMode(str, enum.Enum):
    FULL = "FULL"
    PARTIAL = "PARTIAL"
    NONE = "NONE"


class PartialUpsertStrategy(str, enum.Enum):
    """How a partial upsert merges a column of the new row with the previous version (Pinot's names)."""

    OVERWRITE = "OVERWRITE"
    FORCE_OVERWRITE = "FORCE_OVERWRITE"
    IGNORE = "IGNORE"
    INCREMENT = "INCREMENT"
    APPEND = "APPEND"
    UNION = "UNION"
    MAX = "MAX"
    MIN = "MIN"


HASH_FUNCTIONS = ("NONE", "MD5", "MURMUR3")  # how upsert keys are kept (cuvee.upsert.hashing); Pinot's UUID is refused
CONSISTENCY_MODES = ("NONE", "SYNC", "SNAPSHOT")


@dataclass(frozen=True)
class UpsertConfig:
    """``upsertConfig``: keep only the latest version of each primary key (DESIGN.md section 10).

    ``snapshot`` / ``preload``: Pinot's ENABLE | DISABLE (or the older ``enableSnapshot`` / ``enablePreload``
    booleans); None when not given, and then on (``snapshot_enabled``, ``preload_enabled``): a restart that
    preloads valid-docs snapshots is what keeps an upsert server's restart near an append-only one's."""

    mode: UpsertMode = UpsertMode.NONE
    # Empty means "the table's time column", as in Pinot.
    comparison_columns: tuple[str, ...] = ()
    delete_record_column: str | None = None
    metadata_ttl: float = 0.0
    deleted_keys_ttl: float = 0.0
    drop_out_of_order_record: bool = False
    out_of_order_record_column: str | None = None
    hash_function: str = "NONE"
    snapshot: bool | None = None
    preload: bool | None = None
    consistency_mode: str = "NONE"
    partial_upsert_strategies: dict[str, PartialUpsertStrategy] = field(default_factory=dict, hash=False)
    default_partial_upsert_strategy: PartialUpsertStrategy = PartialUpsertStrategy.OVERWRITE
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def enabled(self) -> bool:
        return self.mode is not UpsertMode.NONE

    @property
    def snapshot_enabled(self) -> bool:
        return self.snapshot is not False

    @property
    def preload_enabled(self) -> bool:
        return self.preload is not False and self.snapshot_enabled

    @classmethod
    def parse(cls, obj: JsonObject) -> UpsertConfig:
        mode = obj.string("mode", choices=[m.value for m in UpsertMode])
        if mode is None and not obj.has("mode"):
            obj.report("mode", f"required, one of {', '.join(m.value for m in UpsertMode)}")
        comparison = obj.string_list("comparisonColumns")
        single = obj.string("comparisonColumn")
        if single is not None:
            if comparison and comparison != (single,):
                obj.report("comparisonColumn", "give comparisonColumn or comparisonColumns, not both")
            comparison = (single,)
        strategies = _parse_strategies(obj)
        default_strategy = obj.string("defaultPartialUpsertStrategy",
                                      choices=[s.value for s in PartialUpsertStrategy])
        return cls(
            mode=UpsertMode(mode) if mode else UpsertMode.NONE,
            comparison_columns=comparison,
            delete_record_column=obj.string("deleteRecordColumn"),
            metadata_ttl=obj.number("metadataTTL", minimum=0) or 0.0,
            deleted_keys_ttl=obj.number("deletedKeysTTL", minimum=0) or 0.0,
            drop_out_of_order_record=bool(obj.boolean("dropOutOfOrderRecord")),
            out_of_order_record_column=obj.string("outOfOrderRecordColumn"),
            hash_function=obj.string("hashFunction", choices=HASH_FUNCTIONS) or "NONE",
            snapshot=_enablement(obj, "snapshot", "enableSnapshot"),
            preload=_enablement(obj, "preload", "enablePreload"),
            consistency_mode=obj.string("consistencyMode", choices=CONSISTENCY_MODES) or "NONE",
            partial_upsert_strategies=strategies,
            default_partial_upsert_strategy=PartialUpsertStrategy(default_strategy or "OVERWRITE"),
            extra=obj.extras(),
        )

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        out["mode"] = self.mode.value
        if len(self.comparison_columns) == 1:
            out["comparisonColumn"] = self.comparison_columns[0]
        else:
            _put(out, "comparisonColumns", self.comparison_columns)
        _put(out, "deleteRecordColumn", self.delete_record_column)
        if self.metadata_ttl:
            out["metadataTTL"] = self.metadata_ttl
        if self.deleted_keys_ttl:
            out["deletedKeysTTL"] = self.deleted_keys_ttl
        if self.drop_out_of_order_record:
            out["dropOutOfOrderRecord"] = True
        _put(out, "outOfOrderRecordColumn", self.out_of_order_record_column)
        if self.hash_function != "NONE":
            out["hashFunction"] = self.hash_function
        for key, value in (("snapshot", self.snapshot), ("preload", self.preload)):
            if value is not None:
                out[key] = "ENABLE" if value else "DISABLE"
        if self.consistency_mode != "NONE":
            out["consistencyMode"] = self.consistency_mode
        _put(out, "partialUpsertStrategies", {k: v.value for k, v in self.partial_upsert_strategies.items()})
        if self.default_partial_upsert_strategy is not PartialUpsertStrategy.OVERWRITE:
            out["defaultPartialUpsertStrategy"] = self.default_partial_upsert_strategy.value
        return out


def _enablement(obj: JsonObject, key: str, legacy: str) -> bool | None:
    """Pinot's ``Enablement`` (ENABLE | DISABLE | DEFAULT), or its older boolean key; None for the default."""
    value = obj.string(key, choices=("ENABLE", "DISABLE", "DEFAULT"))
    old = obj.boolean(legacy)
    if value is not None and old is not None:
        obj.report(legacy, f"give {key} or {legacy}, not both")
    if value is not None:
        return None if value == "DEFAULT" else value == "ENABLE"
    return old


def _parse_strategies(obj: JsonObject) -> dict[str, PartialUpsertStrategy]:
    raw = obj.raw("partialUpsertStrategies")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        obj.report("partialUpsertStrategies", "must be a JSON object of column name to strategy")
        return {}
    out: dict[str, PartialUpsertStrategy] = {}
    allowed = ", ".join(s.value for s in PartialUpsertStrategy)
    for column, strategy in raw.items():
        try:
            out[column] = PartialUpsertStrategy(str(strategy).upper())
        except ValueError:
            obj.issues.append(ConfigIssue(child_path(obj.at("partialUpsertStrategies"), column),
                                     f"{strategy!r} is not one of {allowed}"))
    return out


@dataclass(frozen=True)
class TransformConfig:
    """One ``transformConfigs`` entry: ``columnName`` is computed by ``transformFunction`` at ingestion."""

    column_name: str
    transform_function: str

    def to_json(self) -> dict[str, Any]:
        return {"columnName": self.column_name, "transformFunction": self.transform_function}


@dataclass(frozen=True)
class IngestionConfig:
    """``ingestionConfig``: per-row transforms and a filter that drops rows (true means drop, as in Pinot),
    ``streamIngestionConfig.pauselessConsumptionEnabled`` (Pinot's key): a partition's next segment starts
    consuming when the committer starts its commit, not when the commit ends (docs/server.md, "Pauseless"), and
    ``batchIngestionConfig.segmentIngestionType`` / ``segmentIngestionFrequency``: Pinot's newer spelling of
    ``segmentsConfig.segmentPushType`` / ``segmentPushFrequency`` (``TableConfig.push_type``).
    ``continueOnError`` as Pinot: unset or false, a row whose transform or filter fails is skipped as a counted bad
    row; true, it is kept with NULL in the column whose transform failed (a failing filter keeps it)."""

    transform_configs: tuple[TransformConfig, ...] = ()
    filter_function: str | None = None
    pauseless_consumption: bool = False
    batch_ingestion_type: str | None = None
    batch_ingestion_frequency: str | None = None
    continue_on_error: bool | None = None  # None: unset, Pinot's default (false)
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> IngestionConfig:
        transforms: list[TransformConfig] = []
        seen: set[str] = set()
        for entry in obj.object_list("transformConfigs"):
            column = entry.string("columnName", required=True)
            function = entry.string("transformFunction", required=True)
            if column is not None and column in seen:
                entry.report("columnName", f"{column!r} has more than one transform")
            elif column is not None and function is not None:
                seen.add(column)
                transforms.append(TransformConfig(column, function))
        filter_obj = obj.child("filterConfig")
        filter_function = filter_obj.string("filterFunction")
        # Read through a separate view: streamIngestionConfig stays in ``extra`` (with its streamConfigMaps) and
        # is written back as it came.
        stream_obj = JsonObject.of(obj.doc.get("streamIngestionConfig"), obj.at("streamIngestionConfig"), obj.issues)
        pauseless = stream_obj.boolean("pauselessConsumptionEnabled") or False
        batch_obj = JsonObject.of(obj.doc.get("batchIngestionConfig"), obj.at("batchIngestionConfig"), obj.issues)
        return cls(transform_configs=tuple(transforms), filter_function=filter_function,
                   pauseless_consumption=pauseless,
                   batch_ingestion_type=_upper_choice(batch_obj, "segmentIngestionType", ("APPEND", "REFRESH")),
                   batch_ingestion_frequency=_upper_choice(batch_obj, "segmentIngestionFrequency", ("HOURLY", "DAILY")),
                   continue_on_error=obj.boolean("continueOnError"),
                   extra=obj.extras())

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        _put(out, "transformConfigs", [t.to_json() for t in self.transform_configs] or None)
        if self.filter_function is not None:
            out["filterConfig"] = {"filterFunction": self.filter_function}
        if self.continue_on_error is not None:
            out["continueOnError"] = self.continue_on_error
        return out

