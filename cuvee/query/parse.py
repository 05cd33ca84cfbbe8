"""Parse Pinot SQL into a validated query: one SELECT over one known table, every column resolved.

Pinot's single-stage dialect is close to standard SQL, so sqlglot parses it (DuckDB dialect: double-quoted
identifiers, single-quoted strings, DuckDB's NULL ordering, which is also what the servers execute). What Pinot's
single-stage engine rejects we reject with Pinot's error codes:

- 150 (SQLParsingError): syntax errors, several statements, anything but SELECT (DDL, DML, set operations), joins,
  subqueries, CTEs, window functions, unsupported functions.
- 190 (TableDoesNotExistError): the resolver does not know the table.
- 710 (UnknownColumnError): a column the table does not have. Pinot's broker checks columns against the schema
  before routing and answers 710 ("Unknown columnName 'x' found in the query"); we do the same.

Pinot's virtual columns (``$docId``, ``$hostName``, ``$segmentName``: ``cuvee.query.virtual_columns``) resolve as
columns of every table. Column names resolve exactly, else case-insensitively (Pinot's broker is case-insensitive
by default). Query options come from leading ``SET key = value;`` statements and a trailing ``OPTION(key=value,
...)`` clause.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from cuvee.config.table import raw_table_name
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.functions import DIALECT, READ_DIALECT, pinot_column_name, translate_scalar
from cuvee.query.lookup import Lookup, translate_lookups
from cuvee.query.multivalue import rewrite_multi_value_predicates
from cuvee.query.prescan import prescan, put_back
from cuvee.query.virtual_columns import VIRTUAL_COLUMNS, as_columns


@dataclass(frozen=True)
class TableInfo:
    """What the broker knows about a table: the name it routes on, its columns in schema order, which of them are
    TIMESTAMP (Pinot lets queries treat those as epoch millis) and which multi-valued (compared any-match)."""

    name: str
    columns: tuple[str, ...]
    timestamp_columns: frozenset[str] = frozenset()
    multi_value_columns: frozenset[str] = frozenset()
    # STRING date-time columns and their Java date pattern (SIMPLE_DATE_FORMAT): EXTRACT and DATE_TRUNC read them.
    string_time_patterns: tuple[tuple[str, str], ...] = ()
    # single-value INT/LONG/FLOAT/DOUBLE columns: CAST(col AS TIMESTAMP) reads them as epoch millis, as Pinot does
    number_columns: frozenset[str] = frozenset()
    # a dimension table (isDimTable) and its schema's primary key: what LOOKUP may read (``cuvee.query.lookup``)
    dim_table: bool = False
    primary_key: tuple[str, ...] = ()
    # the DuckDB type of each primary key column ('' where none is known): LOOKUP converts a fact value to it
    primary_key_types: tuple[str, ...] = ()
    # Pinot's data type of each single-value column: a join rewritten into LOOKUPs needs its keys' types equal
    value_types: tuple[tuple[str, str], ...] = ()


TableResolver = Callable[[str], "TableInfo | None"]
"""Looks a table name up as written in the query (raw, or with a _REALTIME/_OFFLINE suffix); None if unknown."""


@dataclass(frozen=True)
class ParsedQuery:
    """A validated query. ``select`` has its FROM removed and every column as a quoted, canonical identifier.

    ``aliases`` are the explicit ``AS`` names of the select list, in order (None where there is none); ``names``
    the result column names (the alias, else Pinot's name for the expression as written).
    """

    sql: str
    table: TableInfo
    select: exp.Select
    aliases: tuple[str | None, ...]
    names: tuple[str, ...]
    options: Mapping[str, str] = field(default_factory=dict)
    lookups: tuple[Lookup, ...] = ()  # the dimension tables LOOKUP calls read (their relations on the servers)


_OPTION_CLAUSE = re.compile(r"\s+OPTION\s*\((?P<body>[^()]*)\)\s*;?\s*$", re.IGNORECASE)
_ALLOWED_ARGS = {"expressions", "from", "from_", "where", "group", "having", "order", "limit", "offset", "distinct"}


def sql_error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


class MultiStageRequired(QueryError):
    """The query is valid SQL a single stage cannot answer (a join, subquery, CTE, set operation, window or
    FILTER clause): the broker's multi-stage engine (``cuvee.multistage``) takes it. Code 150 for callers that
    only plan single-stage queries."""

    def __init__(self, construct: str) -> None:
        super().__init__(QueryErrorCode.SQL_PARSING, f"{construct} need the multi-stage engine")
        self.construct = construct


def split_query(sql: str) -> tuple[exp.Expression, dict[str, str]]:
    """The one query of ``sql`` and the options its text sets (``SET k = v;`` statements, ``OPTION(...)``)."""
    text, options = _strip_option_clause(sql)
    statements = _parse_statements(text)
    query: exp.Expression | None = None
    for statement in statements:
        if isinstance(statement, exp.Set):
            options.update(_set_options(statement))
        elif query is None:
            query = statement
        else:
            raise sql_error("only one query per request is allowed")
    if query is None:
        raise sql_error("no query to run")
    refuse_internal_functions(query)
    return _without_array_to_mv(as_columns(query)), options


INTERNAL_PREFIX = "cuvee_"  # the functions Cuvee registers in its DuckDB databases for its own plans


def refuse_internal_functions(query: exp.Expression) -> None:
    """Refuse a call of a function Cuvee registers for its own plans (``cuvee_funnel_max_step``,
    ``cuvee_sha512``, ...): they take configurations the planner writes and checks (a funnel's as JSON), so a caller
    could hand them unchecked ones. Pinot's names (SHA512, FUNNELMAXSTEP, ...) reach them through translation,
    which happens after this check."""
    for node in query.find_all(exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
        if name.lower().startswith(INTERNAL_PREFIX):
            raise sql_error(f"unknown function {name[:60]!r}")


def _without_array_to_mv(query: exp.Expression) -> exp.Expression:
    """``ARRAY_TO_MV(col)`` (``arrayToMv``) as ``col``: Pinot's multi-stage engine asks for it around a
    multi-value column compared in a filter or grouped; here a multi-value column follows Pinot's rules bare, in
    every stage, so the call is only a type trick to drop (as Pinot's leaf stage drops it)."""
    def drop(node: exp.Expression) -> exp.Expression:
        while isinstance(node, exp.Anonymous) and node.name.upper().replace("_", "") == "ARRAYTOMV":
            if len(node.expressions) != 1:
                raise sql_error(f"{node.name} takes one argument, a multi-value column")
            node = node.expressions[0]  # arrayToMv(arrayToMv(c)) too
        return node

    if not any(isinstance(n, exp.Anonymous) and n.name.upper().replace("_", "") == "ARRAYTOMV"
               for n in query.find_all(exp.Anonymous)):
        return query
    return query.transform(drop)


def parse_query(sql: str, resolve: TableResolver) -> ParsedQuery:
    """Parse and validate ``sql``; raises QueryError with Pinot's code on any problem (``MultiStageRequired`` for
    what only the multi-stage engine answers)."""
    query, options = split_query(sql)
    if isinstance(query, exp.SetOperation):
        raise MultiStageRequired(f"set operations ({query.key.upper()})")
    if not isinstance(query, exp.Select):
        raise sql_error(f"only SELECT queries are supported, not {query.key.upper()}")
    _check_shape(query)
    table = _resolve_table(query, resolve)
    select = query.copy()
    select.set("from_", None)
    select.set("from", None)
    _expand_star(select, table)
    aliases = tuple(item.alias if isinstance(item, exp.Alias) else None for item in select.expressions)
    source = query.args.get("from_") or query.args.get("from")
    _resolve_columns(select, table, {a for a in aliases if a}, source.this.alias)
    names = tuple(alias or pinot_column_name(item) for alias, item in zip(aliases, select.expressions))
    select = translate_scalar(select, table.timestamp_columns, dict(table.string_time_patterns),
                              table.number_columns)
    assert isinstance(select, exp.Select)
    select = rewrite_multi_value_predicates(select, table.multi_value_columns)
    select, lookups = translate_lookups(select, resolve, table.multi_value_columns)
    assert isinstance(select, exp.Select)
    return ParsedQuery(sql=sql, table=table, select=select, aliases=aliases, names=names, options=options,
                       lookups=lookups)


def parse_query_options(text: str | None) -> dict[str, str]:
    """The ``queryOptions`` field of a ``POST /query/sql`` body: ``"k=v;k2=v2"``, empty entries allowed."""
    options: dict[str, str] = {}
    for entry in (text or "").split(";"):
        if not entry.strip():
            continue
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise sql_error(f"bad query option {entry.strip()!r}: expected key=value")
        options[key.strip()] = value.strip()
    return options


_LEADING_SET = re.compile(r"\s*SET\s+(?P<key>\w+)\s*=\s*(?P<value>'[^']*'|\"[^\"]*\"|[^;\s]+)\s*;", re.IGNORECASE)


def embedded_options(sql: str) -> dict[str, str]:
    """The options a query's text sets (leading ``SET k = v;`` statements, a trailing ``OPTION(...)``), read
    cheaply before parsing: what bounds planning must be known before the plan exists. Parsing reads them again."""
    options: dict[str, str] = {}
    at = 0
    while (match := _LEADING_SET.match(sql, at)) is not None:
        options[match.group("key")] = match.group("value").strip("'\"")
        at = match.end()
    try:
        options.update(_strip_option_clause(sql)[1])
    except QueryError:
        pass  # parsing reports a bad OPTION clause itself
    return options


def _strip_option_clause(sql: str) -> tuple[str, dict[str, str]]:
    match = _OPTION_CLAUSE.search(sql)
    if match is None:
        return sql, {}
    options: dict[str, str] = {}
    for entry in match.group("body").split(","):
        if not entry.strip():
            continue
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise sql_error(f"bad OPTION entry {entry.strip()!r}: expected key=value")
        options[key.strip()] = value.strip().strip("'\"")
    return sql[: match.start()], options


MAX_NESTING = 32  # parentheses inside one another; deeper SQL is refused before it is parsed (sqlglot's recursion
# ends near 40 levels on its own)


def _parse_statements(text: str) -> list[exp.Expression]:
    scanned = prescan(text)
    if scanned.depth > MAX_NESTING:
        raise sql_error(f"the query nests parentheses {scanned.depth} deep; at most {MAX_NESTING}")
    try:
        statements = [s for s in sqlglot.parse(scanned.text, read=READ_DIALECT) if s is not None]
        if scanned.lists and sum(put_back(s, scanned.lists) for s in statements) != len(scanned.lists):
            statements = [s for s in sqlglot.parse(text, read=READ_DIALECT) if s is not None]  # the slow, sure way
    except (SqlglotError, ValueError) as e:
        raise sql_error(str(e).splitlines()[0] if str(e) else "cannot parse the query") from None
    except RecursionError:  # nesting the parentheses count does not see (a long chain of operators)
        raise sql_error("the query is nested too deeply to parse") from None
    return statements


def _set_options(statement: exp.Set) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in statement.expressions:
        assignment = item.this if isinstance(item, exp.SetItem) else item
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise sql_error(f"bad SET statement {statement.sql(dialect=DIALECT)!r}: expected SET key = value")
        value = assignment.expression
        options[assignment.this.name] = value.name if isinstance(value, (exp.Literal, exp.Column)) else value.sql()
    return options


def _check_shape(query: exp.Select) -> None:
    """Reject what a single-table, single-stage query cannot contain."""
    for key, value in query.args.items():
        if value and key not in _ALLOWED_ARGS:
            clause = key.rstrip("_").upper()
            if clause in _MULTI_STAGE_CLAUSES:
                raise MultiStageRequired(_MULTI_STAGE_CLAUSES[clause])
            raise sql_error(f"{clause} is not supported")
    if isinstance(query.args.get("distinct"), exp.Distinct) and query.args["distinct"].args.get("on"):
        raise sql_error("DISTINCT ON is not supported")
    for node in query.walk():
        if node is query:
            continue
        if isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation)):
            raise MultiStageRequired("subqueries")
        if isinstance(node, exp.Join):
            raise MultiStageRequired("joins")
        if isinstance(node, exp.Window):
            raise MultiStageRequired("window functions")
        if isinstance(node, exp.Filter):
            raise MultiStageRequired("FILTER clauses on aggregations")


_MULTI_STAGE_CLAUSES = {"JOINS": "joins", "WITH": "common table expressions (WITH)", "QUALIFY": "QUALIFY",
                        "WINDOWS": "window functions"}


def _resolve_table(query: exp.Select, resolve: TableResolver) -> TableInfo:
    source = query.args.get("from_") or query.args.get("from")
    if source is None:
        raise sql_error("the query must read FROM a table")
    table = source.this
    if not isinstance(table, exp.Table) or not table.name:
        raise sql_error("FROM must name one table")
    if table.args.get("db") or table.args.get("catalog"):
        raise sql_error(f"qualified table names are not supported: {table.sql(dialect=DIALECT)}")
    info = resolve(table.name)
    if info is None:
        raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"table {table.name!r} does not exist")
    return info


def _expand_star(select: exp.Select, table: TableInfo) -> None:
    """``SELECT *`` lists every column in name order, as Pinot does."""
    items: list[exp.Expression] = []
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            items.extend(exp.column(name, quoted=True) for name in sorted(table.columns))
        else:
            items.append(item)
    select.set("expressions", items)


def _resolve_columns(select: exp.Select, table: TableInfo, aliases: set[str], table_alias: str = "") -> None:
    """Canonicalise column references; names that match no column but a select alias are left for the planner.
    A column may be qualified by the table's name or its alias (``FROM events e … e.city``)."""
    exact = set(table.columns)
    folded: dict[str, list[str]] = {}
    for name in table.columns:
        folded.setdefault(name.lower(), []).append(name)
    for name in VIRTUAL_COLUMNS:  # Pinot's virtual columns: every table answers them (not listed by SELECT *)
        exact.add(name)
        folded.setdefault(name.lower(), [name])
    qualifiers = {table.name.lower(), raw_table_name(table.name).lower()} | ({table_alias.lower()} if table_alias else set())
    lambda_params = {p.name for lam in select.find_all(exp.Lambda) for p in lam.expressions}

    def rewrite(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
            return node
        if node.args.get("db") or node.args.get("catalog"):
            raise sql_error(f"qualified column names are not supported: {node.sql(dialect=DIALECT)}")
        qualifier = node.table
        if qualifier and qualifier.lower() not in qualifiers and raw_table_name(qualifier).lower() not in qualifiers:
            raise sql_error(f"column {node.sql(dialect=DIALECT)} refers to a table not in FROM")
        name = node.name
        if name in exact:
            return exp.column(name, quoted=True)
        candidates = folded.get(name.lower(), [])
        if len(candidates) == 1:
            return exp.column(candidates[0], quoted=True)
        if not qualifier and (name in aliases or name in lambda_params):
            return exp.column(name, quoted=False)
        raise QueryError(QueryErrorCode.UNKNOWN_COLUMN, f"Unknown columnName '{name}' found in the query")

    for key in ("expressions", "where", "group", "having", "order"):
        value = select.args.get(key)
        if value is None:
            continue
        if isinstance(value, list):
            select.set(key, [item.transform(rewrite) for item in value])
        else:
            select.set(key, value.transform(rewrite))
    # Aliases may be named in GROUP BY, HAVING and ORDER BY, never in the select list itself or in WHERE.
    scopes = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    scopes += [select.args["where"]] if select.args.get("where") else []
    for scope in scopes:
        for column in scope.find_all(exp.Column):
            if not column.this.args.get("quoted") and column.name not in lambda_params:
                raise QueryError(QueryErrorCode.UNKNOWN_COLUMN,
                                 f"Unknown columnName '{column.name}' found in the query")
