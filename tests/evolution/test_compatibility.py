"""Pinot's backward-compatibility rules for schema updates, each refused change named with its column."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cuvee.config import Schema
from cuvee.evolution.compatibility import columns_differ, diff_schemas

BASE: dict[str, Any] = {
    "schemaName": "events",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "tags", "dataType": "STRING",
                                                                 "singleValueField": False}],
    "metricFieldSpecs": [{"name": "v", "dataType": "INT", "defaultNullValue": 0}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
    "primaryKeyColumns": ["id"],
}


def _changed(edit: Any) -> Schema:
    doc = copy.deepcopy(BASE)
    edit(doc)
    return Schema.from_json(doc)


def _issues(edit: Any) -> list[tuple[str, str]]:
    return [(i.path, i.message) for i in diff_schemas(Schema.from_json(BASE), _changed(edit)).incompatible]


def test_adding_columns_and_changing_defaults_granularity_and_extra_keys_is_compatible() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["dimensionFieldSpecs"].append({"name": "color", "dataType": "STRING", "defaultNullValue": "none"})
        doc["metricFieldSpecs"][0]["defaultNullValue"] = 7
        doc["metricFieldSpecs"].append({"name": "w", "dataType": "DOUBLE"})
        doc["dateTimeFieldSpecs"][0]["granularity"] = "1:SECONDS"
        doc["dimensionFieldSpecs"][1]["maxLength"] = 64  # a STRING column

    diff = diff_schemas(Schema.from_json(BASE), _changed(edit))
    assert diff.compatible and diff.added == ("color", "w")


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda d: d["dimensionFieldSpecs"][0].update(dataType="STRING"),
     [("$.dimensionFieldSpecs[0].dataType", "column 'id' changed data type from LONG to STRING")]),
    (lambda d: d["dimensionFieldSpecs"][1].update(singleValueField=True),
     [("$.dimensionFieldSpecs[1].singleValueField", "column 'tags' changed from multi-value to single-value")]),
    (lambda d: d["dimensionFieldSpecs"].append(d["metricFieldSpecs"].pop()),
     [("$.dimensionFieldSpecs[2]", "column 'v' changed field type from METRIC to DIMENSION")]),
    (lambda d: d["dateTimeFieldSpecs"][0].update(format="1:SECONDS:EPOCH"),
     [("$.dateTimeFieldSpecs[0].format", "date-time column 'ts' changed format from '1:MILLISECONDS:EPOCH' to "
                                         "'1:SECONDS:EPOCH'; the values already stored would be read in the new "
                                         "format")]),
    (lambda d: d.update(primaryKeyColumns=["id", "v"]),
     [("$.primaryKeyColumns", "the primary key changed from ['id'] to ['id', 'v']; an existing primary key cannot "
                              "change")]),
])
def test_each_incompatible_change_is_named_with_its_column(edit: Any, expected: list[tuple[str, str]]) -> None:
    assert _issues(edit) == expected


def test_a_removed_column_and_a_type_change_are_both_reported() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["metricFieldSpecs"] = []
        doc["dimensionFieldSpecs"][0]["dataType"] = "INT"

    assert _issues(edit) == [
        ("$.dimensionFieldSpecs[0].dataType", "column 'id' changed data type from LONG to INT"),
        ("$.metricFieldSpecs", "column 'v' (METRIC INT) was removed; a column cannot be removed from a schema in use"),
    ]


def test_a_primary_key_may_be_added_to_a_schema_without_one() -> None:
    old = Schema.from_json({k: v for k, v in BASE.items() if k != "primaryKeyColumns"})
    assert diff_schemas(old, Schema.from_json(BASE)).compatible


def test_columns_differ_names_every_column_a_consuming_segment_would_build_otherwise() -> None:
    """A reload commits a consuming segment whose columns differ from the served ones in name, data type,
    single/multi-value or field type; a changed default or maxLength is not a different column."""
    old = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
        {"name": "id", "dataType": "LONG"}, {"name": "tag", "dataType": "STRING"},
        {"name": "gone", "dataType": "STRING"}], "metricFieldSpecs": [{"name": "v", "dataType": "LONG"},
                                                                     {"name": "w", "dataType": "INT"}]})
    new = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
        {"name": "id", "dataType": "STRING"}, {"name": "tag", "dataType": "STRING", "singleValueField": False},
        {"name": "w", "dataType": "INT"}, {"name": "added", "dataType": "INT"}],
        "metricFieldSpecs": [{"name": "v", "dataType": "LONG", "defaultNullValue": 7}]})
    assert columns_differ(old, new) == ["added", "gone", "id", "tag", "w"]
    assert columns_differ(old, old) == []
