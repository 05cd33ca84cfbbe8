from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuvee.config import ConfigValidationError, load_schema, load_table, load_table_config
from cuvee.errors import UserError
from tests.config.conftest import FIXTURES


def test_loads_the_example_files() -> None:
    schema, table = load_table(FIXTURES / "events_schema.json", FIXTURES / "events_kafka_table.json")
    assert schema.name == "events"
    assert table.name_with_type == "events_REALTIME"
    assert load_schema(str(FIXTURES / "rsvp_schema.json")).primary_key_columns == ("event_id", "member_id")
    # Pinot's airline example asks for a star-tree index, which Cuvee does not build: refused by name
    with pytest.raises(ConfigValidationError) as info:
        load_table_config(FIXTURES / "airline_offline_table.json")
    assert [i.path for i in info.value.issues] == ["$.tableIndexConfig.starTreeIndexConfigs"]
    assert "star-tree indexes are not supported yet" in str(info.value)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^schema file '.*nope\.json' does not exist$"):
        load_schema(tmp_path / "nope.json")


def test_malformed_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{\n  "tableName": "x",\n  oops\n}')
    with pytest.raises(UserError, match=r"table config file '.*t\.json' is not valid JSON: .* at line 3 column 3"):
        load_table_config(path)


def test_a_directory_is_not_readable(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read schema file"):
        load_schema(tmp_path)


def test_invalid_content_names_the_file_and_every_issue(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"tableName": "x", "tableType": "REALTIME", "segmentsConfig": {"replication": 0}}))
    with pytest.raises(ConfigValidationError) as info:
        load_table_config(path)
    assert "table.json" in str(info.value)
    assert [i.path for i in info.value.issues] == ["$.segmentsConfig.replication", "$.tableIndexConfig.streamConfigs"]


def test_load_table_checks_the_table_against_the_schema(tmp_path: Path) -> None:
    table = json.loads((FIXTURES / "events_log_table.json").read_text())
    table["tableIndexConfig"]["invertedIndexColumns"] = ["browser", "no_such_column"]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    with pytest.raises(ConfigValidationError) as info:
        load_table(FIXTURES / "events_schema.json", path)
    assert [str(i) for i in info.value.issues] == [
        "$.tableIndexConfig.invertedIndexColumns[1]: column 'no_such_column' is not in schema 'events'"]
