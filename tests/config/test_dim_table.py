"""Dimension tables in the table config: ``isDimTable`` (OFFLINE only, with a primary key in the schema) and
``dimensionTableConfig`` (accepted and written back)."""

from __future__ import annotations

from typing import Any

import pytest

from cuvee.config import ConfigValidationError, Schema, TableConfig, validate_table
from cuvee.config.table import DimensionTableConfig
from tests.config.conftest import issues_of


def dim_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"tableName": "teams", "tableType": "OFFLINE", "isDimTable": True,
                           "segmentsConfig": {"segmentPushType": "REFRESH"}}
    doc.update(overrides)
    return doc


def schema(primary_key: list[str] | None) -> Schema:
    doc: dict[str, Any] = {"schemaName": "teams", "dimensionFieldSpecs": [
        {"name": "teamID", "dataType": "STRING"}, {"name": "teamName", "dataType": "STRING"}]}
    if primary_key is not None:
        doc["primaryKeyColumns"] = primary_key
    return Schema.from_json(doc)


def test_is_dim_table_is_read_and_written_back() -> None:
    table = TableConfig.from_json(dim_doc(dimensionTableConfig={"disablePreload": True, "other": 1}))
    assert table.is_dim_table
    assert table.dimension_table == DimensionTableConfig(disable_preload=True, extra={"other": 1})
    out = table.to_json()
    assert out["isDimTable"] is True
    assert out["dimensionTableConfig"] == {"disablePreload": True, "errorOnDuplicatePrimaryKey": False, "other": 1}
    assert TableConfig.from_json(out) == table


def test_a_plain_table_is_not_a_dim_table_and_writes_no_key() -> None:
    table = TableConfig.from_json({"tableName": "sales", "tableType": "OFFLINE"})
    assert not table.is_dim_table and table.dimension_table is None
    assert "isDimTable" not in table.to_json()
    assert not TableConfig.from_json(dim_doc(isDimTable="false")).is_dim_table


def test_a_realtime_dim_table_is_refused() -> None:
    doc = dim_doc(tableType="REALTIME", tableIndexConfig={"streamConfigs": {
        "stream.log.topic.name": "t", "stream.log.dir": "/tmp/log"}})
    with pytest.raises(ConfigValidationError) as info:
        TableConfig.from_json(doc)
    assert "must be an OFFLINE table" in issues_of(info.value)["$.isDimTable"]


def test_is_dim_table_must_be_a_boolean() -> None:
    with pytest.raises(ConfigValidationError) as info:
        TableConfig.from_json(dim_doc(isDimTable="yes"))
    assert "$.isDimTable" in issues_of(info.value)


def test_a_dim_table_needs_a_primary_key_in_its_schema() -> None:
    table = TableConfig.from_json(dim_doc())
    validate_table(table, schema(["teamID"]))
    with pytest.raises(ConfigValidationError) as info:
        validate_table(table, schema(None))
    assert "needs primaryKeyColumns" in issues_of(info.value)["$.isDimTable"]
