"""Checking a table config against its schema: every column a table config names must exist and suit its use.

Pure: ``table_schema_issues`` returns every problem (with the JSON path of the offending entry in the table
config); ``validate_table`` raises them all at once as a ConfigValidationError.
"""

from __future__ import annotations

from collections.abc import Iterator

from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.config.json_reader import child_path
from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.config.sections import PartialUpsertStrategy, UpsertMode
from cuvee.config.table import TableConfig

_INDEX_LISTS = (
    ("invertedIndexColumns", "inverted_index_columns"),
    ("noDictionaryColumns", "no_dictionary_columns"),
    ("rangeIndexColumns", "range_index_columns"),
    ("bloomFilterColumns", "bloom_filter_columns"),
)
_NUMERIC_STRATEGIES = {PartialUpsertStrategy.INCREMENT, PartialUpsertStrategy.MAX, PartialUpsertStrategy.MIN}
_MULTI_VALUE_STRATEGIES = {PartialUpsertStrategy.APPEND, PartialUpsertStrategy.UNION}


def validate_table(table: TableConfig, schema: Schema) -> None:
    """Raise ConfigValidationError listing every way ``table`` does not fit ``schema``."""
    issues = table_schema_issues(table, schema)
    if issues:
        raise ConfigValidationError(f"table config {table.name_with_type!r} for schema {schema.name!r}", issues)


def table_schema_issues(table: TableConfig, schema: Schema) -> list[ConfigIssue]:
    return [*_index_issues(table, schema), *_time_issues(table, schema), *_upsert_issues(table, schema),
            *_transform_issues(table, schema), *_dim_table_issues(table, schema), *_task_issues(table, schema)]


def _task_issues(table: TableConfig, schema: Schema) -> list[ConfigIssue]:
    """Minion-style task configs (``task.taskTypeConfigsMap``): ``cuvee.maintenance.config`` owns their rules."""
    from cuvee.maintenance.config import parse_task_configs  # maintenance builds on config, not the reverse

    issues: list[ConfigIssue] = []
    parse_task_configs(table, schema, issues)
    return issues


def _dim_table_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    """LOOKUP finds a dimension table's rows by its primary key: the schema must name one (Pinot's rule)."""
    if table.is_dim_table and not schema.primary_key_columns:
        yield ConfigIssue("$.isDimTable", f"a dimension table needs primaryKeyColumns in schema {schema.name!r} "
                                          "(LOOKUP finds its rows by that key)")


def _unknown(schema: Schema, column: str, path: str) -> ConfigIssue:
    return ConfigIssue(path, f"column {column!r} is not in schema {schema.name!r}")


def _index_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    base = "$.tableIndexConfig"
    for key, attribute in _INDEX_LISTS:
        for i, column in enumerate(getattr(table.indexing, attribute)):
            if not schema.has_column(column):
                yield _unknown(schema, column, child_path(child_path(base, key), i))
    sorted_column = table.indexing.sorted_column
    if sorted_column is not None:
        path = f"{base}.sortedColumn[0]"
        if not schema.has_column(sorted_column):
            yield _unknown(schema, sorted_column, path)
        elif not schema.column(sorted_column).single_value:
            yield ConfigIssue(path, f"{sorted_column!r} is multi-valued; only a single-valued column can be sorted")


def _time_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    column = table.time_column
    if column is None:
        return
    path = "$.segmentsConfig.timeColumnName"
    if not schema.has_column(column):
        yield _unknown(schema, column, path)
    elif schema.column(column).role is not FieldRole.DATE_TIME:
        yield ConfigIssue(path, f"{column!r} must be declared in the schema's dateTimeFieldSpecs")


def _upsert_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    upsert = table.upsert
    if upsert is None or not upsert.enabled:
        return
    base = "$.upsertConfig"
    if not schema.primary_key_columns:
        yield ConfigIssue(base, f"an upsert table needs primaryKeyColumns in schema {schema.name!r}")
    if not upsert.comparison_columns and table.time_column is None:
        yield ConfigIssue(f"{base}.comparisonColumn", "required when segmentsConfig has no timeColumnName")
    for i, column in enumerate(upsert.comparison_columns):
        path = f"{base}.comparisonColumn" if len(upsert.comparison_columns) == 1 else f"{base}.comparisonColumns[{i}]"
        if not schema.has_column(column):
            yield _unknown(schema, column, path)
        elif not schema.column(column).single_value:
            yield ConfigIssue(path, f"{column!r} is multi-valued; a comparison column must be single-valued")
    comparison = table.comparison_columns
    numeric = (len(comparison) == 1 and schema.has_column(comparison[0])
               and schema.column(comparison[0]).data_type.is_numeric)
    for key, ttl in (("metadataTTL", upsert.metadata_ttl), ("deletedKeysTTL", upsert.deleted_keys_ttl)):
        if ttl > 0 and not numeric:
            yield ConfigIssue(f"{base}.{key}", "needs exactly one numeric comparison column")
    if upsert.deleted_keys_ttl > 0 and upsert.delete_record_column is None:
        yield ConfigIssue(f"{base}.deletedKeysTTL", "needs deleteRecordColumn (it forgets deleted keys)")
    out_of_order = upsert.out_of_order_record_column
    if out_of_order is not None:
        path = f"{base}.outOfOrderRecordColumn"
        if upsert.drop_out_of_order_record:
            yield ConfigIssue(path, "dropOutOfOrderRecord drops the rows this column would mark; set one of them")
        elif not schema.has_column(out_of_order):
            yield _unknown(schema, out_of_order, path)
        elif not _is_single_boolean(schema, out_of_order):
            yield ConfigIssue(path, f"{out_of_order!r} must be a single-valued BOOLEAN column")
    if table.ingestion.pauseless_consumption:
        yield ConfigIssue("$.ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled",
                          "upsert tables cannot use pauseless consumption yet (a capped consuming segment's rows "
                          "past its end would stay in the key map)")
    if upsert.preload is True and upsert.snapshot is False:
        yield ConfigIssue(f"{base}.preload", "preload reads valid-docs snapshots: it needs snapshot enabled")
    delete_column = upsert.delete_record_column
    if delete_column is not None:
        path = f"{base}.deleteRecordColumn"
        if not schema.has_column(delete_column):
            yield _unknown(schema, delete_column, path)
        elif not _is_single_boolean(schema, delete_column):
            yield ConfigIssue(path, f"{delete_column!r} must be a single-valued BOOLEAN column")
    if upsert.mode is UpsertMode.PARTIAL:
        yield from _partial_upsert_issues(table, schema)


def _is_single_boolean(schema: Schema, column: str) -> bool:
    spec = schema.column(column)
    return spec.data_type is DataType.BOOLEAN and spec.single_value


def _partial_upsert_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    assert table.upsert is not None
    base = "$.upsertConfig.partialUpsertStrategies"
    for column, strategy in table.upsert.partial_upsert_strategies.items():
        path = child_path(base, column)
        if not schema.has_column(column):
            yield _unknown(schema, column, path)
            continue
        spec = schema.column(column)
        if column in schema.primary_key_columns:
            yield ConfigIssue(path, f"{column!r} is a primary key column; its value cannot be merged")
        elif column in table.comparison_columns:
            yield ConfigIssue(path, f"{column!r} is a comparison column; its value cannot be merged")
        else:
            problem = _strategy_problem(strategy, spec)
            if problem:
                yield ConfigIssue(path, problem)
    default = table.upsert.default_partial_upsert_strategy
    merged = [spec for spec in schema.fields if spec.name not in table.upsert.partial_upsert_strategies
              and spec.name not in schema.primary_key_columns and spec.name not in table.comparison_columns]
    for spec in merged:  # the default applies to every other column: it must fit each of them
        problem = _strategy_problem(default, spec)
        if problem:
            yield ConfigIssue("$.upsertConfig.defaultPartialUpsertStrategy",
                              f"{problem} (give the column a strategy of its own)")
            break


def _strategy_problem(strategy: PartialUpsertStrategy, spec: FieldSpec) -> str | None:
    """Why ``strategy`` cannot merge column ``spec``, None if it can."""
    numeric = spec.data_type.is_numeric and spec.single_value
    if strategy is PartialUpsertStrategy.INCREMENT and spec.data_type is DataType.TIMESTAMP:
        return f"INCREMENT cannot add TIMESTAMP values, {spec.name!r} is one"
    if strategy in _NUMERIC_STRATEGIES and not numeric:
        return f"{strategy.value} needs a single-valued numeric column, {spec.name!r} is not"
    if strategy in _MULTI_VALUE_STRATEGIES and spec.single_value:
        return f"{strategy.value} needs a multi-valued column, {spec.name!r} is single-valued"
    return None


def _transform_issues(table: TableConfig, schema: Schema) -> Iterator[ConfigIssue]:
    from cuvee.decode.transform import ingestion_issues  # (it runs DuckDB; config must not import it at load)

    for i, transform in enumerate(table.ingestion.transform_configs):
        if not schema.has_column(transform.column_name):
            yield _unknown(schema, transform.column_name, f"$.ingestionConfig.transformConfigs[{i}].columnName")
    yield from ingestion_issues(schema, table.ingestion)
