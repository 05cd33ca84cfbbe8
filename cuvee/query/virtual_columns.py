"""Pinot's built-in virtual columns: ``$docId``, ``$hostName`` and ``$segmentName``, answered by every table.

No segment stores them. Pinot's servers make them per segment when a query names them, and so do ours: a server
appends them to the view of each segment it reads, so a query that does not name them pays nothing.

- ``$docId`` (INT): the row's document id in its segment, its position in the segment's rows (0 first). For an
  upsert table it is the id of the version read (valid docs only are seen, their ids kept).
- ``$hostName`` (STRING): the host the serving server is configured to be reached at (its ``host`` setting, which
  its instance id ``Server_<host>_<port>`` names too), or the machine's name when it listens on every interface.
  Pinot always answers the machine's host name.
- ``$segmentName`` (STRING): the segment's name.

They are left out of ``SELECT *``, as in Pinot. DuckDB reads ``$name`` as a prepared statement's parameter, so the
broker turns each ``$name`` of a query into the quoted column ``"$name"`` before resolving columns; the planner
writes them quoted, and a server finds the ones it must add by their quoted names in the SQL it is sent.
A table whose schema was stored before Cuvee answered them may hold a column of such a name (new schemas may
not: ``cuvee.config.names``): its stored column wins, as in Pinot, and the virtual one is not added.
Pure: names, types and Arrow arrays; the server and the broker wire them in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
from sqlglot import exp

from cuvee.config.schema import VIRTUAL_COLUMN_NAMES

DOC_ID, HOST_NAME, SEGMENT_NAME = VIRTUAL_COLUMN_NAMES
VIRTUAL_COLUMNS = VIRTUAL_COLUMN_NAMES
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_BY_FOLDED = {name.lower(): name for name in VIRTUAL_COLUMNS}
# the Arrow types a segment view gives them: the two names as one-value dictionaries (a row costs its index)
_TYPES = {DOC_ID: pa.int32(), HOST_NAME: pa.dictionary(pa.int32(), pa.string()),
          SEGMENT_NAME: pa.dictionary(pa.int32(), pa.string())}


def canonical(name: str) -> str | None:
    """The virtual column ``name`` is (in any letter case), or None."""
    return _BY_FOLDED.get(name.lower())


def _named_parameter(node: exp.Expression) -> bool:
    """Whether ``node`` is a parameter named like a column (``$docId``): not ``?`` nor ``$1``."""
    return isinstance(node, exp.Placeholder) and _IDENTIFIER.fullmatch(node.name) is not None


def as_columns(query: exp.Expression) -> exp.Expression:
    """``query`` with every named parameter ``$name`` as the quoted column ``"$name"`` (a virtual column, or an
    unknown column the resolver refuses by name), never a parameter DuckDB would ask a value for. A qualified
    one (``t.$docId``) becomes the name under its column; ``?`` and ``$1`` stay parameters (refused later)."""
    if not any(_named_parameter(node) for node in query.find_all(exp.Placeholder)):
        return query

    def swap(node: exp.Expression) -> exp.Expression:
        if not _named_parameter(node):
            return node
        if isinstance(node.parent, exp.Column):  # t.$docId: the placeholder is the column's name
            return exp.to_identifier(f"${node.name}", quoted=True)
        return exp.column(f"${node.name}", quoted=True)

    return query.transform(swap)


def with_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the virtual columns a table's rows may be asked for (those it lacks), as servers type them."""
    present = {name.lower() for name in schema.names}
    return pa.schema([*schema, *(pa.field(name, _TYPES[name]) for name in VIRTUAL_COLUMNS if name.lower() not in present)])


def named(texts: Iterable[str]) -> tuple[str, ...]:
    """The virtual columns the planner's SQL ``texts`` name (quoted, as it writes them; in any letter case, as
    DuckDB matches names): the ones a server adds to its segments' views."""
    folded = [text.lower() for text in texts if text and "$" in text]
    return tuple(name for name in VIRTUAL_COLUMNS if any(f'"{name.lower()}"' in text for text in folded))


def appended(table: pa.Table, names: Iterable[str], segment: str, host: str, *, before: str | None = None) -> pa.Table:
    """``table`` (a segment's rows in doc order) with the virtual columns ``names``, placed before column
    ``before`` when it has one (a server's own column that must stay last), else after the others. A name the
    table stores (in any letter case) is not added: the stored column wins."""
    rows = table.num_rows
    index = table.schema.get_field_index(before) if before is not None else -1
    at = index if index >= 0 else table.num_columns
    stored = {column.lower() for column in table.schema.names}
    for name in names:
        if name.lower() in stored:
            continue
        if name == DOC_ID:
            column: pa.Array = pa.array(np.arange(rows, dtype=np.int32))
        else:
            value = segment if name == SEGMENT_NAME else host
            column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)), pa.array([value]))
        table = table.add_column(at, pa.field(name, _TYPES[name]), column)
        at += 1
    return table
