"""The example configs the README walks through stay valid, and the sample rows decode cleanly."""

from __future__ import annotations

from pathlib import Path

from cuvee.config.files import load_schema, load_table_config
from cuvee.config.validation import validate_table
from cuvee.decode import JsonDecoder

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_example_table_validates_against_its_schema() -> None:
    tables = sorted(EXAMPLES.glob("*/table.json"))
    assert tables, "no examples found"
    for table_path in tables:
        schema = load_schema(table_path.with_name("schema.json"))
        table = load_table_config(table_path)
        validate_table(table, schema)
        assert table.table_name == schema.name


def test_example_rows_decode_without_bad_records() -> None:
    schema = load_schema(EXAMPLES / "events" / "schema.json")
    lines = (EXAMPLES / "events" / "events.jsonl").read_bytes().splitlines()
    result = JsonDecoder(schema).decode(lines, list(range(len(lines))))
    assert result.batch.num_rows == len(lines) == 5000
    assert result.bad == []
