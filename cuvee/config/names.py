"""How long names from outside may be, and what they may hold: each becomes a file or directory name somewhere.

A table's raw name is part of every segment name (``<table>__<partition>__<sequence>__<created>``), each segment is
a directory on every server and an archive in the deep store (``<table>_REALTIME/<segment>.tar.zst``); a column
is a file in each segment directory (``<column percent-encoded>.<kind>.arrow``, the longest kind ``.range.arrow``).
File systems refuse names past 255 bytes and S3 keys past 1024, so a name is bounded when a table or schema is
created or updated (``creation_issues``, called by the controller), with a clear error, instead of a table that
can never commit (or a delete that fails forever) later. Configs already stored are read as they are.

Pinot's virtual column names (``$docId``, ``$hostName``, ``$segmentName``, in any letter case: queries match
column names case-insensitively) are refused here too, not by the schema parser: a schema stored before Cuvee
answered them must still load (its column then wins over the virtual one).
"""

from __future__ import annotations

from urllib.parse import quote

from cuvee.config.errors import ConfigIssue
from cuvee.config.schema import VIRTUAL_COLUMN_NAMES, Schema
from cuvee.config.table import TableConfig, raw_table_name

MAX_TABLE_NAME = 128  # characters of a raw table name (letters, digits, '_' and '-'): segment names stay < 200
MAX_SCHEMA_NAME = 128
MAX_COLUMN_FILE_NAME = 243  # a column name percent-encoded, as its files spell it: + ".range.arrow" = 255
_RESERVED = {name.lower(): name for name in VIRTUAL_COLUMN_NAMES}


def name_problem(kind: str, name: str, limit: int) -> str | None:
    """Why ``name`` cannot be a ``kind`` name (too long, or holding '/', NUL or control characters), else None."""
    if len(name) > limit:
        return f"{kind} name is {len(name)} characters long; at most {limit}"
    if name in (".", "..") or "/" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"{kind} name must not be '.' or '..', nor hold '/' or control characters"
    return None


def column_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a new column's name (its files could not be written, or it is a virtual column's),
    else None. Any other character is fine: file names spell it percent-encoded."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "column name must not hold control characters"
    if name.lower() in _RESERVED:
        return f"{name!r} is reserved: {_RESERVED[name.lower()]} is Pinot's virtual column, which every table answers"
    encoded = len(quote(name, safe=""))
    if encoded > MAX_COLUMN_FILE_NAME:
        return (f"column name is {encoded} characters once percent-encoded for its file names; at most "
                f"{MAX_COLUMN_FILE_NAME} (fewer non-ASCII characters)")
    return None


def creation_issues(schema: Schema | None = None, table: TableConfig | None = None) -> list[ConfigIssue]:
    """What a schema or table config about to be created or updated names that could not be stored."""
    issues: list[ConfigIssue] = []
    if schema is not None:
        problem = name_problem("schema", schema.name, MAX_SCHEMA_NAME)
        if problem is not None:
            issues.append(ConfigIssue("$.schemaName", problem))
        positions: dict[str, int] = {}
        for spec in schema.fields:  # each field spec list is numbered on its own, as in the JSON
            at = positions[spec.role.value] = positions.get(spec.role.value, -1) + 1
            problem = column_name_problem(spec.name)
            if problem is not None:
                issues.append(ConfigIssue(f"$.{spec.role.value}[{at}].name", problem))
    if table is not None:
        raw = raw_table_name(table.name_with_type)
        if len(raw) > MAX_TABLE_NAME:
            issues.append(ConfigIssue("$.tableName", f"the table name is {len(raw)} characters long; at most "
                                                     f"{MAX_TABLE_NAME}"))
    return issues
