"""Names from outside are bounded when a table or schema is created or updated: a table, schema or column that
could never be written to a file system or a deep store is refused with the JSON path and the limit; configs
already stored are still read."""

from __future__ import annotations

from cuvee.config import Schema, TableConfig
from cuvee.config.names import MAX_COLUMN_FILE_NAME, MAX_SCHEMA_NAME, MAX_TABLE_NAME, creation_issues


def _table(name: str) -> TableConfig:
    return TableConfig.from_json({"tableName": name, "tableType": "OFFLINE", "segmentsConfig": {}})


def _schema(name: str = "s", column: str = "c") -> Schema:
    return Schema.from_json({"schemaName": name, "metricFieldSpecs": [{"name": "m", "dataType": "LONG"}],
                             "dimensionFieldSpecs": [{"name": "d", "dataType": "STRING"},
                                                     {"name": column, "dataType": "STRING"}]})


def test_a_table_name_at_the_limit_is_taken_and_one_past_it_refused() -> None:
    assert creation_issues(table=_table("t" * MAX_TABLE_NAME)) == []
    for name in ("t" * (MAX_TABLE_NAME + 1), "t" * 10_000):
        [issue] = creation_issues(table=_table(name))  # parsed (a stored config is still read), refused to create
        assert issue.path == "$.tableName" and "at most 128" in issue.message


def test_schema_names_are_bounded_and_kept_to_one_path_segment() -> None:
    assert creation_issues(schema=_schema("s" * MAX_SCHEMA_NAME)) == []
    for bad in ("s" * (MAX_SCHEMA_NAME + 1), "a/b", "..", "a\x00b", "a\nb"):
        assert [i.path for i in creation_issues(schema=_schema(bad))] == ["$.schemaName"]


def test_column_names_must_fit_their_file_names() -> None:
    assert creation_issues(schema=_schema(column="c" * MAX_COLUMN_FILE_NAME)) == []
    assert creation_issues(schema=_schema(column="a.b/c d")) == []  # spelled percent-encoded
    assert creation_issues(schema=_schema(column="名" * 24)) == []  # 216 characters encoded: fits
    for bad in ("c" * 250, "é" * 41, "tab\there"):  # too long; 41 that encode to 246; a control character
        assert [i.path for i in creation_issues(schema=_schema(column=bad))] == ["$.dimensionFieldSpecs[1].name"]


def test_virtual_column_names_are_refused_to_create_but_a_stored_schema_still_loads() -> None:
    for name in ("$docId", "$DOCID", "$hostName", "$segmentname"):
        schema = _schema(column=name)  # parsed: a schema stored before Cuvee answered them must load
        assert schema.column(name).name == name
        [issue] = creation_issues(schema=schema)
        assert issue.path == "$.dimensionFieldSpecs[1].name" and "reserved" in issue.message
    assert creation_issues(schema=_schema(column="docId")) == []
