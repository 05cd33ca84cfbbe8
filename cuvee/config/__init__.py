"""Schemas and table configs in Pinot's JSON shape: parsing, validation with JSON paths, and file loading."""

from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.config.files import load_schema, load_table, load_table_config
from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.config.sections import (
    IndexingConfig,
    IngestionConfig,
    PartialUpsertStrategy,
    RoutingConfig,
    SegmentsConfig,
    TenantConfig,
    TransformConfig,
    UpsertConfig,
    UpsertMode,
)
from cuvee.config.stream_config import OffsetReset, StreamConfig, StreamKeys, StreamType
from cuvee.config.table import TableConfig, TableType, raw_table_name
from cuvee.config.validation import table_schema_issues, validate_table

__all__ = [
    "ConfigIssue",
    "ConfigValidationError",
    "DataType",
    "FieldRole",
    "FieldSpec",
    "IndexingConfig",
    "IngestionConfig",
    "OffsetReset",
    "PartialUpsertStrategy",
    "RoutingConfig",
    "Schema",
    "SegmentsConfig",
    "StreamConfig",
    "StreamKeys",
    "StreamType",
    "TableConfig",
    "TableType",
    "TenantConfig",
    "TransformConfig",
    "UpsertConfig",
    "UpsertMode",
    "load_schema",
    "load_table",
    "load_table_config",
    "raw_table_name",
    "table_schema_issues",
    "validate_table",
]
