"""Pinot's ``LOOKUP`` over a dimension table, as SQL each server runs beside its fact segments. Pure.

``LOOKUP('dimTable', 'dimColumn', 'dimKey', factExpr[, 'dimKey2', factExpr2 ...])`` answers the dimension
table's ``dimColumn`` of the row whose primary key equals the fact values, NULL when no row matches (Pinot's
``LookupTransformFunction``; Pinot answers the column's default null value unless null handling is on). A
dimension table (``isDimTable``) has every segment on every server of its tenant, so each server answers it
locally inside the single-stage query over the fact table: the call becomes a scalar subquery over the relation
the server registers for the dimension table (``LOOKUP_PREFIX`` + n)::

    (SELECT "__lookup1"."teamName" FROM "cuvee_lookup_1" AS "__lookup1"
     WHERE "__lookup1"."teamID" = cuvee_segments."teamID" LIMIT 1)

The fact-side columns are qualified with the server's relation, so a dimension column of the same name never
shadows them (unqualified, ``teamID = teamID`` would compare the dimension row with itself: always true).
``LIMIT 1`` rather than an aggregate: the planner splits aggregates into partials and must not see one here;
with several rows per key (a duplicate primary key) one of them answers. The answer has the dimension column's
type. Checked while planning: an unknown table is 190, a table that is not a dimension table or wrong arguments
150, an unknown column 710.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from cuvee.config.table import TableType, raw_table_name
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.functions import classify_aggregate
from cuvee.query.java_casts import as_pinot_type

if TYPE_CHECKING:
    from cuvee.query.parse import TableInfo

SERVER_RELATION = "cuvee_segments"  # the fact segments on a server (re-exported by ``cuvee.query.rewrite``)
LOOKUP_PREFIX = "cuvee_lookup_"  # + n: the dimension tables a server registers for a query
FUNCTION = "LOOKUP"
_ALIAS = "__lookup"


@dataclass(frozen=True)
class Lookup:
    """A dimension table a query reads: the relation its SQL names and the table (``teams_OFFLINE``). The broker
    adds the table's Arrow ``schema`` (the planner knows names, not types): binding the plan over no rows needs
    it."""

    relation: str
    table: str
    schema: pa.Schema | None = field(default=None, compare=False)

    def empty(self) -> pa.Table:
        """The relation over no rows (its columns typed when the schema is known)."""
        if self.schema is None:
            raise QueryError(QueryErrorCode.INTERNAL, f"the schema of dimension table {self.table} is not known")
        return self.schema.empty_table()


def _sql_error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


def is_lookup(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == FUNCTION


def translate_lookups(tree: exp.Expression, resolve: Callable[[str], TableInfo | None],
                      multi_value: frozenset[str] = frozenset()) -> tuple[exp.Expression, tuple[Lookup, ...]]:
    """``tree`` with every LOOKUP call as its subquery, and the dimension tables they read (one relation per
    table, numbered in the order met). Inner calls first: a LOOKUP's fact value may itself be a LOOKUP.
    ``multi_value``: the fact table's multi-value columns, which cannot be join values (Pinot's rule)."""
    found: dict[str, Lookup] = {}
    root = tree.copy()
    for node in reversed(list(root.walk(bfs=False))):  # children before their parents
        if not is_lookup(node):
            continue
        new = _subquery(node, resolve, found, multi_value)
        if node is root:
            root = new
        else:
            node.replace(new)
    return root, tuple(found.values())


def _subquery(call: exp.Anonymous, resolve: Callable[[str], TableInfo | None], found: dict[str, Lookup],
              multi_value: frozenset[str]) -> exp.Expression:
    args = list(call.expressions)
    if len(args) < 4 or len(args) % 2:
        raise _sql_error("LOOKUP takes 4 or more arguments: LOOKUP('dimTable', 'dimColumn', 'dimJoinKey', "
                         "factExpression[, 'dimJoinKey2', factExpression2 ...])")
    name = _literal(args[0], "the dimension table name (1st)")
    info = _dim_table(name, resolve)
    column = _dim_column(info, _literal(args[1], "the column to look up (2nd)"))
    keys = [_dim_column(info, _literal(key, f"join key {i + 1}")) for i, key in enumerate(args[2::2])]
    if len(set(keys)) != len(keys) or set(keys) != set(info.primary_key):
        raise _sql_error(f"LOOKUP's join keys ({', '.join(keys)}) must be the primary key columns of dimension "
                         f"table {raw_table_name(info.name)!r}: {', '.join(info.primary_key) or 'none declared'}")
    types = dict(zip(info.primary_key, info.primary_key_types))
    values = [_fact_value(value, multi_value, types.get(key, "")) for key, value in zip(keys, args[3::2])]
    lookup = found.setdefault(info.name, Lookup(f"{LOOKUP_PREFIX}{len(found) + 1}", info.name))
    alias = _ALIAS + lookup.relation[len(LOOKUP_PREFIX):]
    condition = exp.and_(*(exp.EQ(this=_dim_key(exp.column(key, table=alias, quoted=True), types.get(key, "")),
                                  expression=value) for key, value in zip(keys, values)))
    select = (exp.select(exp.column(column, table=alias, quoted=True))
              .from_(exp.to_table(lookup.relation, quoted=True).as_(alias, quoted=True))
              .where(condition).limit(1))
    return exp.Subquery(this=select)


def lookup_fact_columns(node: exp.Expression) -> frozenset[str] | None:
    """The fact columns a translated LOOKUP (its subquery) reads for its join values, or None when ``node`` is not
    one: what the planner needs to know whether the LOOKUP is a function of the GROUP BY keys."""
    if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
        return None
    source = node.this.args.get("from_") or node.this.args.get("from")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table) or not table.name.startswith(LOOKUP_PREFIX):
        return None
    return frozenset(c.name for c in node.find_all(exp.Column) if c.table == SERVER_RELATION)


def _literal(node: exp.Expression, what: str) -> str:
    if not isinstance(node, exp.Literal) or not node.is_string or not node.this:
        raise _sql_error(f"LOOKUP: {what} argument must be a string literal, got {node.sql(dialect='duckdb')}")
    return str(node.this)


def _dim_table(name: str, resolve: Callable[[str], TableInfo | None]) -> TableInfo:
    """The dimension table ``name`` means (Pinot reads the OFFLINE table of that raw name)."""
    raw = raw_table_name(name)
    info = resolve(raw + TableType.OFFLINE.suffix) if name in (raw, raw + TableType.OFFLINE.suffix) else None
    if info is None:
        if resolve(name) is None:
            raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"LOOKUP: table {name!r} does not exist")
        raise _sql_error(f"LOOKUP: table {name!r} is not a dimension table (an OFFLINE table with isDimTable: true)")
    if not info.dim_table:
        raise _sql_error(f"LOOKUP: table {name!r} is not a dimension table (set isDimTable: true in its table "
                         "config)")
    return info


def _dim_column(info: TableInfo, name: str) -> str:
    """``name`` as the dimension table spells it: exactly, else case-insensitively when that is unambiguous."""
    if name in info.columns:
        return name
    folded = [c for c in info.columns if c.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise QueryError(QueryErrorCode.UNKNOWN_COLUMN, f"Unknown columnName '{name}' found in the query: dimension "
                                                    f"table {raw_table_name(info.name)!r} has no such column")


def _dim_key(column: exp.Column, key_type: str) -> exp.Expression:
    """The dimension side of a join: a TIMESTAMP key is its LONG of epoch millis, as Pinot stores it."""
    return exp.Anonymous(this="epoch_ms", expressions=[column]) if key_type == "TIMESTAMP" else column


def _fact_value(value: exp.Expression, multi_value: frozenset[str], key_type: str) -> exp.Expression:
    """A join value over the fact row, its columns qualified with the server's relation (see the module doc), read
    as the key's type (``key_type``, DuckDB's name; '' leaves it as it is) as Pinot reads it — Java's casts
    (``cuvee.query.java_casts``: a DOUBLE against an INT key drops its fraction, a TIMESTAMP against a LONG or
    TIMESTAMP key is its epoch millis): a value that does not convert matches nothing (NULL), where comparing
    across types would fail the query on the first one."""
    if any(classify_aggregate(node) is not None for node in value.walk()):
        raise _sql_error("LOOKUP: a join value must be an expression over the row, not an aggregation")
    if isinstance(value, exp.Column) and value.name in multi_value:
        raise _sql_error(f"LOOKUP: join value {value.name!r} is a multi-value column; it must be single-valued")
    value = value.copy()
    for column in value.find_all(exp.Column):
        if not column.table and column.this.args.get("quoted"):  # a resolved fact column (not a lambda parameter)
            column.set("table", exp.to_identifier(SERVER_RELATION))
    if key_type:
        return as_pinot_type(value, key_type)
    return value if isinstance(value, (exp.Column, exp.Literal, exp.Paren)) else exp.paren(value)
