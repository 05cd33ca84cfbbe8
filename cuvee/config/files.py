"""Loading schemas and table configs from JSON files, with one-line errors an operator can act on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cuvee.config.errors import ConfigValidationError
from cuvee.config.pinot_keys import review_schema, review_table
from cuvee.config.schema import Schema
from cuvee.config.table import TableConfig
from cuvee.config.validation import validate_table
from cuvee.errors import UserError


def read_json_file(path: str | Path, what: str) -> Any:
    """The parsed JSON of ``path``; a missing, unreadable or malformed file is a UserError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{what} file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {what} file {str(path)!r}: {e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = f"line {e.lineno} column {e.colno}"
        raise UserError(f"{what} file {str(path)!r} is not valid JSON: {e.msg} at {where}") from e


def load_schema(path: str | Path) -> Schema:
    """A schema from a Pinot schema JSON file; raises UserError (ConfigValidationError for bad content)."""
    doc = read_json_file(path, "schema")
    try:
        schema = Schema.from_json(doc)
        refused = review_schema(doc).issues
        if refused:
            raise ConfigValidationError(f"schema {schema.name!r}", refused)
        return schema
    except ConfigValidationError as e:
        raise ConfigValidationError(f"{e.what} in {str(path)!r}", e.issues) from None


def load_table_config(path: str | Path) -> TableConfig:
    """A table config from a Pinot table config JSON file; raises UserError (ConfigValidationError for bad content)."""
    doc = read_json_file(path, "table config")
    try:
        table = TableConfig.from_json(doc)
        refused = review_table(doc).issues
        if refused:
            raise ConfigValidationError(f"table config {table.name_with_type!r}", refused)
        return table
    except ConfigValidationError as e:
        raise ConfigValidationError(f"{e.what} in {str(path)!r}", e.issues) from None


def load_table(schema_path: str | Path, table_path: str | Path) -> tuple[Schema, TableConfig]:
    """Both files, each valid on its own and the table checked against the schema."""
    schema = load_schema(schema_path)
    table = load_table_config(table_path)
    validate_table(table, schema)
    return schema, table
