"""Names from outside are bounded where they are created: a table, schema or column that could never be written to
a file system or a deep store is refused with the JSON path and the limit."""

from __future__ import annotations

import pytest

from cuvee.config import Schema, TableConfig
from cuvee.config.errors import ConfigValidationError
from cuvee.config.names import MAX_COLUMN_FILE_NAME, MAX_SCHEMA_NAME, MAX_TABLE_NAME


def _table(name: str) -> dict:  # type: ignore[type-arg]
    return {"tableName": name, "tableType": "OFFLINE", "segmentsConfig": {}}


def _schema(name: str = "s", column: str = "c") -> dict:  # type: ignore[type-arg]
    return {"schemaName": name, "dimensionFieldSpecs": [{"name": column, "dataType": "STRING"}]}


def test_a_table_name_at_the_limit_is_taken_and_one_past_it_refused() -> None:
    assert TableConfig.from_json(_table("t" * MAX_TABLE_NAME)).name_with_type == "t" * MAX_TABLE_NAME + "_OFFLINE"
    for name in ("t" * (MAX_TABLE_NAME + 1), "t" * 10_000):
        with pytest.raises(ConfigValidationError, match=r"tableName.*at most 128"):
            TableConfig.from_json(_table(name))


def test_schema_names_are_bounded_and_kept_to_one_path_segment() -> None:
    assert Schema.from_json(_schema("s" * MAX_SCHEMA_NAME)).name == "s" * MAX_SCHEMA_NAME
    for bad in ("s" * (MAX_SCHEMA_NAME + 1), "a/b", "..", "a\x00b", "a\nb"):
        with pytest.raises(ConfigValidationError, match=r"schemaName"):
            Schema.from_json(_schema(bad))


def test_column_names_must_fit_their_file_names() -> None:
    assert Schema.from_json(_schema(column="c" * MAX_COLUMN_FILE_NAME)).column_names == ["c" * MAX_COLUMN_FILE_NAME]
    assert Schema.from_json(_schema(column="a.b/c d")).column_names == ["a.b/c d"]  # spelled percent-encoded
    for bad in ("c" * 250, "é" * 40, "tab\there"):  # 250 characters; 40 that encode to 240; a control character
        with pytest.raises(ConfigValidationError, match=r"dimensionFieldSpecs\[0\]\.name"):
            Schema.from_json(_schema(column=bad))
