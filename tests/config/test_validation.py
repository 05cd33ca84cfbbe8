from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cuvee.config import ConfigValidationError, Schema, TableConfig, table_schema_issues, validate_table

Doc = Callable[[str], dict[str, Any]]
LOG_STREAM = {"stream.log.topic.name": "t", "stream.log.dir": "/tmp/log"}

SCHEMA = Schema.from_json({
    "schemaName": "orders",
    "dimensionFieldSpecs": [
        {"name": "id", "dataType": "STRING"},
        {"name": "city", "dataType": "STRING"},
        {"name": "tags", "dataType": "STRING", "singleValueField": False},
        {"name": "deleted", "dataType": "BOOLEAN"},
        {"name": "deleted_text", "dataType": "STRING"},
        {"name": "version", "dataType": "LONG"},
    ],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH"}],
    "primaryKeyColumns": ["id"],
})
NO_KEY_SCHEMA = Schema.from_json({**SCHEMA.to_json(), "primaryKeyColumns": []})


def table(**sections: Any) -> TableConfig:
    index = {"streamConfigs": LOG_STREAM, **sections.pop("tableIndexConfig", {})}
    return TableConfig.from_json({"tableName": "orders", "tableType": "REALTIME",
                                  "tableIndexConfig": index, **sections})


def problems(config: TableConfig, schema: Schema = SCHEMA) -> dict[str, str]:
    return {i.path: i.message for i in table_schema_issues(config, schema)}


@pytest.mark.parametrize(("schema", "table_doc"), [
    ("events_schema", "events_kafka_table"),
    ("events_schema", "events_log_table"),
    ("rsvp_schema", "rsvp_upsert_table"),
    ("airline_schema", "airline_offline_table"),
])
def test_example_tables_fit_their_schemas(fixture_doc: Doc, schema: str, table_doc: str) -> None:
    config = TableConfig.from_json(fixture_doc(table_doc))
    found = {i.path: i.message for i in table_schema_issues(config, Schema.from_json(fixture_doc(schema)))}
    assert found == {}


def test_every_index_column_must_exist() -> None:
    config = table(tableIndexConfig={
        "invertedIndexColumns": ["city", "nope1"],
        "noDictionaryColumns": ["nope2"],
        "rangeIndexColumns": ["amount", "nope3"],
        "bloomFilterColumns": ["nope4"],
        "sortedColumn": ["nope5"],
    })
    assert problems(config) == {
        "$.tableIndexConfig.invertedIndexColumns[1]": "column 'nope1' is not in schema 'orders'",
        "$.tableIndexConfig.noDictionaryColumns[0]": "column 'nope2' is not in schema 'orders'",
        "$.tableIndexConfig.rangeIndexColumns[1]": "column 'nope3' is not in schema 'orders'",
        "$.tableIndexConfig.bloomFilterColumns[0]": "column 'nope4' is not in schema 'orders'",
        "$.tableIndexConfig.sortedColumn[0]": "column 'nope5' is not in schema 'orders'",
    }


def test_sorted_column_must_be_single_valued() -> None:
    config = table(tableIndexConfig={"sortedColumn": ["tags"]})
    assert problems(config) == {
        "$.tableIndexConfig.sortedColumn[0]": "'tags' is multi-valued; only a single-valued column can be sorted"}


def test_time_column_must_exist_and_be_a_date_time_field() -> None:
    assert problems(table(segmentsConfig={"timeColumnName": "when"})) == {
        "$.segmentsConfig.timeColumnName": "column 'when' is not in schema 'orders'"}
    assert problems(table(segmentsConfig={"timeColumnName": "version"})) == {
        "$.segmentsConfig.timeColumnName": "'version' must be declared in the schema's dateTimeFieldSpecs"}
    assert problems(table(segmentsConfig={"timeColumnName": "ts"})) == {}


def test_upsert_needs_a_primary_key_in_the_schema() -> None:
    config = table(segmentsConfig={"timeColumnName": "ts"}, upsertConfig={"mode": "FULL"})
    assert problems(config, NO_KEY_SCHEMA) == {
        "$.upsertConfig": "an upsert table needs primaryKeyColumns in schema 'orders'"}
    assert problems(config) == {}


def test_upsert_needs_a_comparison_or_time_column() -> None:
    config = table(upsertConfig={"mode": "FULL"})
    assert problems(config) == {
        "$.upsertConfig.comparisonColumn": "required when segmentsConfig has no timeColumnName"}


def test_upsert_columns_must_exist_and_fit() -> None:
    config = table(upsertConfig={"mode": "FULL", "comparisonColumns": ["version", "missing", "tags"],
                                 "deleteRecordColumn": "gone"})
    assert problems(config) == {
        "$.upsertConfig.comparisonColumns[1]": "column 'missing' is not in schema 'orders'",
        "$.upsertConfig.comparisonColumns[2]": "'tags' is multi-valued; a comparison column must be single-valued",
        "$.upsertConfig.deleteRecordColumn": "column 'gone' is not in schema 'orders'",
    }


def test_delete_record_column_must_be_boolean() -> None:
    config = table(upsertConfig={"mode": "FULL", "comparisonColumn": "version", "deleteRecordColumn": "deleted_text"})
    assert problems(config) == {
        "$.upsertConfig.deleteRecordColumn": "'deleted_text' must be a single-valued BOOLEAN column"}


def test_metadata_ttl_needs_one_numeric_comparison_column() -> None:
    bad = table(upsertConfig={"mode": "FULL", "comparisonColumn": "city", "metadataTTL": 60})
    good = table(upsertConfig={"mode": "FULL", "comparisonColumn": "version", "metadataTTL": 60})
    assert problems(bad) == {"$.upsertConfig.metadataTTL": "needs exactly one numeric comparison column"}
    assert problems(good) == {}


def test_deleted_keys_ttl_out_of_order_column_and_preload_are_checked() -> None:
    base = {"mode": "FULL", "comparisonColumn": "version"}
    assert problems(table(upsertConfig={**base, "deletedKeysTTL": 60})) == {
        "$.upsertConfig.deletedKeysTTL": "needs deleteRecordColumn (it forgets deleted keys)"}
    assert problems(table(upsertConfig={**base, "deletedKeysTTL": 60, "deleteRecordColumn": "deleted"})) == {}
    assert problems(table(upsertConfig={**base, "outOfOrderRecordColumn": "city"})) == {
        "$.upsertConfig.outOfOrderRecordColumn": "'city' must be a single-valued BOOLEAN column"}
    both = problems(table(upsertConfig={**base, "outOfOrderRecordColumn": "deleted", "dropOutOfOrderRecord": True}))
    assert "set one of them" in both["$.upsertConfig.outOfOrderRecordColumn"]
    assert problems(table(upsertConfig={**base, "outOfOrderRecordColumn": "deleted"})) == {}
    assert problems(table(upsertConfig={**base, "snapshot": "DISABLE", "preload": "ENABLE"})) == {
        "$.upsertConfig.preload": "preload reads valid-docs snapshots: it needs snapshot enabled"}


def test_upsert_tables_cannot_be_pauseless_yet() -> None:
    config = table(upsertConfig={"mode": "FULL", "comparisonColumn": "version"},
                   ingestionConfig={"streamIngestionConfig": {"pauselessConsumptionEnabled": True}})
    assert "pauseless" in problems(config)["$.ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled"]


def test_partial_upsert_strategies_are_checked_against_the_schema() -> None:
    config = table(segmentsConfig={"timeColumnName": "ts"}, upsertConfig={
        "mode": "PARTIAL",
        "partialUpsertStrategies": {
            "id": "OVERWRITE",
            "ts": "MAX",
            "city": "INCREMENT",
            "amount": "APPEND",
            "ghost": "IGNORE",
            "tags": "UNION",
            "version": "MAX",
        },
    })
    assert problems(config) == {
        "$.upsertConfig.partialUpsertStrategies.id": "'id' is a primary key column; its value cannot be merged",
        "$.upsertConfig.partialUpsertStrategies.ts": "'ts' is a comparison column; its value cannot be merged",
        "$.upsertConfig.partialUpsertStrategies.city":
            "INCREMENT needs a single-valued numeric column, 'city' is not",
        "$.upsertConfig.partialUpsertStrategies.amount":
            "APPEND needs a multi-valued column, 'amount' is single-valued",
        "$.upsertConfig.partialUpsertStrategies.ghost": "column 'ghost' is not in schema 'orders'",
    }


def test_disabled_upsert_is_not_checked() -> None:
    config = table(upsertConfig={"mode": "NONE", "comparisonColumn": "ghost"})
    assert problems(config, NO_KEY_SCHEMA) == {}


def test_transform_destinations_must_exist() -> None:
    config = table(ingestionConfig={"transformConfigs": [
        {"columnName": "city", "transformFunction": "upper(city_raw)"},
        {"columnName": "region", "transformFunction": "lower(city_raw)"},
    ]})
    assert problems(config) == {
        "$.ingestionConfig.transformConfigs[1].columnName": "column 'region' is not in schema 'orders'"}


def test_validate_table_raises_every_issue_at_once() -> None:
    config = table(
        segmentsConfig={"timeColumnName": "city"},
        tableIndexConfig={"invertedIndexColumns": ["x"], "sortedColumn": ["tags"]},
        upsertConfig={"mode": "FULL", "deleteRecordColumn": "city"},
        ingestionConfig={"transformConfigs": [{"columnName": "y", "transformFunction": "f(z)"}]},
    )
    with pytest.raises(ConfigValidationError) as info:
        validate_table(config, NO_KEY_SCHEMA)
    assert [i.path for i in info.value.issues] == [
        "$.tableIndexConfig.invertedIndexColumns[0]",
        "$.tableIndexConfig.sortedColumn[0]",
        "$.segmentsConfig.timeColumnName",
        "$.upsertConfig",
        "$.upsertConfig.deleteRecordColumn",
        "$.ingestionConfig.transformConfigs[0].columnName",
    ]
    assert str(info.value).startswith("invalid table config 'orders_REALTIME' for schema 'orders': ")


def test_validate_table_passes_a_good_table() -> None:
    validate_table(table(segmentsConfig={"timeColumnName": "ts"}), SCHEMA)
    assert table_schema_issues(table(segmentsConfig={"timeColumnName": "ts"}), SCHEMA) == []


def test_ingestion_expressions_are_checked_against_the_schema() -> None:
    config = table(ingestionConfig={
        "transformConfigs": [{"columnName": "city", "transformFunction": "upper(city_raw)"}],  # a source field
        "filterConfig": {"filterFunction": "Groovy({amount > 10}, amount)"}})
    assert problems(config) == {"$.ingestionConfig.filterConfig.filterFunction":
                                "Groovy scripts are not supported: write the expression in SQL, e.g. "
                                "\"toEpochDays(ts)\" or \"country = 'NZ'\""}


def test_the_default_partial_strategy_must_fit_every_column_it_merges() -> None:
    """MAX by default would be applied to city (STRING): refused at once, not a consumer failing on every row."""
    config = table(upsertConfig={"mode": "PARTIAL", "defaultPartialUpsertStrategy": "MAX", "comparisonColumn": "ts",
                                 "partialUpsertStrategies": {"version": "INCREMENT"}})
    assert problems(config) == {"$.upsertConfig.defaultPartialUpsertStrategy":
                                "MAX needs a single-valued numeric column, 'city' is not (give the column a "
                                "strategy of its own)"}
    timestamps = Schema.from_json({**SCHEMA.to_json(), "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH"},
        {"name": "seen", "dataType": "TIMESTAMP", "format": "TIMESTAMP"}]})
    config = table(upsertConfig={"mode": "PARTIAL", "comparisonColumn": "ts", "partialUpsertStrategies": {"seen": "INCREMENT"}})
    assert problems(config, timestamps) == {"$.upsertConfig.partialUpsertStrategies.seen":
                                            "INCREMENT cannot add TIMESTAMP values, 'seen' is one"}
