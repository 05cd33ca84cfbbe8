"""Table configs in Pinot's JSON shape (REALTIME and OFFLINE tables).

``TableConfig.from_json`` accepts a Pinot table config unchanged, reports every problem at once with its JSON path
(ConfigValidationError), keeps keys it does not interpret, and ``to_json`` writes the config back.
Checks that need the schema (do the named columns exist?) live in ``cuvee.config.validation``.
"""

from __future__ import annotations

import copy
import enum
import re
from dataclasses import dataclass, field
from typing import Any

from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.config.json_reader import JsonObject, child_path
from cuvee.config.sections import (
    IndexingConfig,
    IngestionConfig,
    QueryConfig,
    RoutingConfig,
    SegmentsConfig,
    TenantConfig,
    UpsertConfig,
)
from cuvee.config.stream_config import StreamConfig

__all__ = ["DimensionTableConfig", "IndexingConfig", "TableConfig", "TableType", "raw_table_name"]

# Letters, digits, '_' and '-': the name goes into metadata-store paths and file names. '__' separates the
# parts of an LLC segment name (events__6__0__20261121T1647Z), so a table name must not contain it.
_TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

_STREAM_MAPS = ("streamIngestionConfig", "streamConfigMaps")


class TableType(str, enum.Enum):
    REALTIME = "REALTIME"
    OFFLINE = "OFFLINE"

    @property
    def suffix(self) -> str:
        return f"_{self.value}"


def raw_table_name(name: str) -> str:
    """``events`` from ``events_REALTIME``, ``events_OFFLINE`` or ``events``."""
    for table_type in TableType:
        if name.endswith(table_type.suffix):
            return name[: -len(table_type.suffix)]
    return name


@dataclass(frozen=True)
class DimensionTableConfig:
    """Pinot's ``dimensionTableConfig`` of a dimension table: accepted and written back. Neither key changes what
    Cuvee does: a server always reads a dimension table's rows from its segments in memory (``disablePreload``
    trades memory for speed in Pinot's hash map, which Cuvee does not build), and duplicate primary keys are not
    refused (``errorOnDuplicatePrimaryKey``): a LOOKUP answers one of the rows."""

    disable_preload: bool = False
    error_on_duplicate_primary_key: bool = False
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @classmethod
    def parse(cls, obj: JsonObject) -> DimensionTableConfig:
        return cls(disable_preload=bool(obj.boolean("disablePreload")),
                   error_on_duplicate_primary_key=bool(obj.boolean("errorOnDuplicatePrimaryKey")),
                   extra=obj.extras())

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.extra)
        out["disablePreload"] = self.disable_preload
        out["errorOnDuplicatePrimaryKey"] = self.error_on_duplicate_primary_key
        return out


@dataclass(frozen=True)
class TableConfig:
    """A table: its name and type, segment and index settings, and for REALTIME tables the stream it consumes."""

    table_name: str
    table_type: TableType
    segments: SegmentsConfig = field(default_factory=SegmentsConfig)
    indexing: IndexingConfig = field(default_factory=IndexingConfig)
    tenants: TenantConfig = field(default_factory=TenantConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    upsert: UpsertConfig | None = None
    ingestion: IngestionConfig = field(default_factory=IngestionConfig)
    stream: StreamConfig | None = None
    # Pinot's dimension table (``isDimTable``, OFFLINE only): every segment on every server of the tenant, so
    # LOOKUP reads it on each server beside the fact table's segments
    is_dim_table: bool = False
    dimension_table: DimensionTableConfig | None = None
    extra: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def name_with_type(self) -> str:
        """``events_REALTIME``: the name Pinot (and our metadata store) keys the table by."""
        return self.table_name + self.table_type.suffix

    @property
    def is_realtime(self) -> bool:
        return self.table_type is TableType.REALTIME

    @property
    def time_column(self) -> str | None:
        return self.segments.time_column_name

    @property
    def push_type(self) -> str:
        """APPEND (pushes add data) or REFRESH (a push replaces it): ``segmentsConfig.segmentPushType`` or
        ``ingestionConfig.batchIngestionConfig.segmentIngestionType`` (from_json refuses the two disagreeing)."""
        return self.segments.segment_push_type or self.ingestion.batch_ingestion_type or "APPEND"

    @property
    def push_frequency(self) -> str:
        """HOURLY or DAILY: ``segmentsConfig.segmentPushFrequency`` or ``…batchIngestionConfig.segmentIngestionFrequency``."""
        return self.segments.segment_push_frequency or self.ingestion.batch_ingestion_frequency or "DAILY"

    @property
    def replication(self) -> int:
        """Replicas per segment: ``replicasPerPartition`` (REALTIME tables) if set, else ``replication``, else 1."""
        if self.is_realtime and self.segments.replicas_per_partition is not None:
            return self.segments.replicas_per_partition
        return self.segments.replication or 1

    @property
    def is_upsert(self) -> bool:
        return self.upsert is not None and self.upsert.enabled

    @property
    def upsert_rules(self) -> tuple[object, ...]:
        """What decides an upsert table's keys on every replica (with the schema's primary key): equal rules, equal
        decisions. ``("NONE",)`` for a table without upsert."""
        upsert = self.upsert
        if not self.is_upsert or upsert is None:
            return ("NONE",)
        return (upsert.mode, self.comparison_columns, upsert.delete_record_column,
                tuple(sorted((k, v.value) for k, v in upsert.partial_upsert_strategies.items())),
                upsert.default_partial_upsert_strategy, upsert.drop_out_of_order_record,
                upsert.out_of_order_record_column, upsert.metadata_ttl, upsert.deleted_keys_ttl, upsert.hash_function)

    @property
    def comparison_columns(self) -> tuple[str, ...]:
        """The columns that order versions of a primary key: the configured ones, else the time column."""
        if self.upsert is not None and self.upsert.comparison_columns:
            return self.upsert.comparison_columns
        return (self.time_column,) if self.time_column else ()

    @classmethod
    def from_json(cls, doc: Any) -> TableConfig:
        """Parse Pinot's table config JSON; raises ConfigValidationError listing every problem with its path."""
        issues: list[ConfigIssue] = []
        root = JsonObject.of(doc, "$", issues)
        if issues:
            raise ConfigValidationError("table config", issues)
        name, table_type = _parse_name_and_type(root)
        segments = SegmentsConfig.parse(root.child("segmentsConfig"))
        index_obj = root.child("tableIndexConfig")
        indexing = IndexingConfig.parse(index_obj)
        tenants = TenantConfig.parse(root.child("tenants"))
        routing = RoutingConfig.parse(root.child("routing"))
        query = QueryConfig.parse(root.child("query"))
        upsert_obj = root.child("upsertConfig")
        upsert = UpsertConfig.parse(upsert_obj) if root.has("upsertConfig") else None
        ingestion_obj = root.child("ingestionConfig")
        ingestion = IngestionConfig.parse(ingestion_obj)
        stream = _parse_stream(index_obj, ingestion_obj, table_type, issues)
        for legacy, legacy_key, newer, newer_key in (
                (segments.segment_push_type, "segmentPushType", ingestion.batch_ingestion_type, "segmentIngestionType"),
                (segments.segment_push_frequency, "segmentPushFrequency", ingestion.batch_ingestion_frequency,
                 "segmentIngestionFrequency")):
            if legacy is not None and newer is not None and legacy != newer:
                issues.append(ConfigIssue(f"$.ingestionConfig.batchIngestionConfig.{newer_key}",
                                          f"{newer!r} disagrees with segmentsConfig.{legacy_key} {legacy!r}; give one"))
        if upsert is not None and upsert.enabled and table_type is TableType.OFFLINE:
            issues.append(ConfigIssue("$.upsertConfig.mode", "upsert is supported on REALTIME tables only"))
        is_dim = bool(root.boolean("isDimTable"))
        dimension = DimensionTableConfig.parse(root.child("dimensionTableConfig")) \
            if root.has("dimensionTableConfig") else None
        if is_dim and table_type is TableType.REALTIME:
            issues.append(ConfigIssue("$.isDimTable", "a dimension table must be an OFFLINE table (it is replicated "
                                                      "on every server and fed by pushes), not REALTIME"))
        what = f"table config {name!r}" if name else "table config"
        if issues or name is None or table_type is None:
            raise ConfigValidationError(what, issues)
        return cls(
            table_name=name,
            table_type=table_type,
            segments=segments,
            indexing=indexing,
            tenants=tenants,
            routing=routing,
            query=query,
            upsert=upsert,
            ingestion=ingestion,
            stream=stream,
            is_dim_table=is_dim,
            dimension_table=dimension,
            extra=root.extras(),
        )

    def to_json(self) -> dict[str, Any]:
        """Pinot's JSON for this table (tableName carries the type suffix, as Pinot stores it)."""
        out: dict[str, Any] = copy.deepcopy(self.extra)
        out["tableName"] = self.name_with_type
        out["tableType"] = self.table_type.value
        out["segmentsConfig"] = self.segments.to_json()
        out["tenants"] = self.tenants.to_json()
        index = self.indexing.to_json()
        ingestion = self.ingestion.to_json()
        if self.stream is not None:
            stream_ingestion = ingestion.get(_STREAM_MAPS[0])
            if isinstance(stream_ingestion, dict) and _STREAM_MAPS[1] in stream_ingestion:
                ingestion[_STREAM_MAPS[0]] = {**stream_ingestion, _STREAM_MAPS[1]: [self.stream.to_json()]}
            else:
                index["streamConfigs"] = self.stream.to_json()
        out["tableIndexConfig"] = index
        routing = self.routing.to_json()
        if routing:
            out["routing"] = routing
        query = self.query.to_json()
        if query:
            out["query"] = query
        if self.upsert is not None:
            out["upsertConfig"] = self.upsert.to_json()
        if ingestion:
            out["ingestionConfig"] = ingestion
        if self.is_dim_table:
            out["isDimTable"] = True
        if self.dimension_table is not None:
            out["dimensionTableConfig"] = self.dimension_table.to_json()
        return out


def _parse_name_and_type(root: JsonObject) -> tuple[str | None, TableType | None]:
    full_name = root.string("tableName", required=True)
    raw_type = root.string("tableType", choices=[t.value for t in TableType])
    table_type = TableType(raw_type) if raw_type else None
    if full_name is None:
        return None, table_type
    suffix_type = next((t for t in TableType if full_name.endswith(t.suffix)), None)
    if table_type is None and not root.has("tableType"):
        if suffix_type is None:
            root.report("tableType", "required, REALTIME or OFFLINE")
        table_type = suffix_type
    elif suffix_type is not None and table_type is not None and suffix_type is not table_type:
        root.report("tableName", f"{full_name!r} ends in {suffix_type.suffix} but tableType is {table_type.value}")
        return None, table_type
    name = raw_table_name(full_name)
    if not _TABLE_NAME.fullmatch(name) or "__" in name:
        root.report("tableName", f"{name!r} must be letters, digits, '_' and '-' (starting with a letter or digit), "
                                 "without '__'")
        return None, table_type
    return name, table_type


def _parse_stream(
    index_obj: JsonObject, ingestion_obj: JsonObject, table_type: TableType | None, issues: list[ConfigIssue]
) -> StreamConfig | None:
    """The stream map from ``tableIndexConfig.streamConfigs`` or Pinot's newer
    ``ingestionConfig.streamIngestionConfig.streamConfigMaps`` (exactly one map)."""
    in_index = index_obj.raw("streamConfigs")
    maps_holder = ingestion_obj.doc.get(_STREAM_MAPS[0])
    maps = maps_holder.get(_STREAM_MAPS[1]) if isinstance(maps_holder, dict) else None
    maps_path = child_path(child_path(ingestion_obj.path, _STREAM_MAPS[0]), _STREAM_MAPS[1])
    if in_index is not None and maps is not None:
        issues.append(ConfigIssue(maps_path, "give the stream in tableIndexConfig.streamConfigs or here, not both"))
        return None
    if maps is not None:
        if not isinstance(maps, list) or len(maps) != 1:
            issues.append(ConfigIssue(maps_path, "must be a list of exactly one stream config map"))
            return None
        doc, path = maps[0], child_path(maps_path, 0)
    else:
        doc, path = in_index, index_obj.at("streamConfigs")
    if table_type is TableType.OFFLINE:
        if doc is not None:
            issues.append(ConfigIssue(path, "an OFFLINE table does not consume a stream; remove streamConfigs"))
        return None
    if doc is None:
        if table_type is TableType.REALTIME:
            issues.append(ConfigIssue(path, "required for a REALTIME table"))
        return None
    return StreamConfig.parse(doc, path, issues)
