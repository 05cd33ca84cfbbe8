"""Judging an answer against the oracle: DuckDB over the same rows, running the set's own translation.

Rules (Pinot's, and what an order-insensitive comparison needs):

- Pinot answers a selection or GROUP BY query without LIMIT with at most 10 rows (its default LIMIT): the oracle
  gets ``LIMIT 10`` too, and any 10 of the rows it would give are right.
- Without ORDER BY rows compare as a multiset. With ORDER BY they compare in order; when a LIMIT cuts through rows
  that tie on the sort keys, any of the tied rows are right: the answer must be that many rows of the oracle's full
  result whose sort-key columns equal the oracle's, in order.
- Numbers compare by value (an integral float equals the integer: Pinot's SUM is a DOUBLE), floats to 9
  significant digits (and FLOAT columns' sums to 6: both engines add float32 values in their own order);
  multi-value cells compare as lists.

The oracle SQL is adapted to DuckDB only where dialects differ in spelling (H2's backticks, ClickBench's
string date-times: ``ORACLE_OVERRIDES``), never in meaning.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import expressions as exp

from cuvee.query.execute import register
from cuvee.query.functions import READ_DIALECT

PINOT_DEFAULT_LIMIT = 10

# Where DuckDB needs another spelling of the same question: ClickBench's EventTime is a STRING date-time column in
# Pinot's schema (DuckDB does not read a VARCHAR as a timestamp by itself), and Pinot's DATE_TRUNC answers epoch
# millis.
ORACLE_OVERRIDES: dict[str, str] = {
    "clickbench-019": "SELECT UserID, extract(minute FROM CAST(EventTime AS TIMESTAMP)) AS m, SearchPhrase, COUNT(*) "
                      "FROM hits GROUP BY UserID, m, SearchPhrase ORDER BY COUNT(*) DESC LIMIT 10",
    "clickbench-043": "SELECT epoch_ms(DATE_TRUNC('minute', CAST(EventTime AS TIMESTAMP))) AS M, COUNT(*) AS PageViews "
                      "FROM hits WHERE CounterID = 62 AND EventDate >= '2013-07-14' AND EventDate <= '2013-07-15' "
                      "AND IsRefresh = 0 AND DontCountHits = 0 GROUP BY M ORDER BY M LIMIT 10 OFFSET 1000",
}


class Verdict(str, enum.Enum):
    PASS = "pass"
    WRONG = "wrong"  # answered, differently from the oracle
    ERROR = "error"  # Cuvee refused or failed
    UNJUDGED = "unjudged"  # the oracle could not run it


@dataclass
class Outcome:
    query_id: str
    verdict: Verdict
    detail: str = ""
    cuvee_ms: float | None = None
    oracle_ms: float | None = None
    rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def oracle_sql(query_id: str, text: str) -> str:
    """The oracle's text: an override, or the set's with H2's backtick identifiers in DuckDB's double quotes."""
    return ORACLE_OVERRIDES.get(query_id) or text.replace("`", '"')


@dataclass(frozen=True)
class Shape:
    """What the comparison needs to know about the query: its LIMIT/OFFSET (Pinot's default applied), the output
    columns its ORDER BY keys are (None: some key is not an output column), and the oracle text without
    LIMIT/OFFSET; when some key is not an output column, ``keyed_sql``: that text with the ORDER BY expressions
    appended to the SELECT list as ``key_names`` (None: no rewrite keeps the rows, e.g. DISTINCT)."""

    limit: int | None
    offset: int
    order_columns: tuple[int, ...] | None
    ordered: bool
    star: bool
    unlimited_sql: str
    limited_sql: str
    keyed_sql: str | None = None
    key_names: tuple[str, ...] = ()


def shape_of(pinot_sql: str, oracle: str) -> Shape:
    tree = sqlglot.parse_one(pinot_sql, read=READ_DIALECT)  # Pinot's text as Cuvee reads it (SETTINGS(...), ...)
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    limit = _number(tree.args.get("limit"))
    offset = _number(tree.args.get("offset")) or 0
    grouped = select is not None and select.args.get("group") is not None
    aggregate_only = select is not None and not grouped and any(
        e.find(exp.AggFunc) is not None for e in select.expressions)
    if limit is None and not aggregate_only:
        limit = PINOT_DEFAULT_LIMIT
    order = tree.args.get("order")
    order_columns: tuple[int, ...] | None = ()
    if order is not None and select is not None:
        outputs = [e.sql(dialect="duckdb").lower() for e in select.expressions]
        aliases = [e.alias_or_name.lower() for e in select.expressions]
        found = []
        for key in order.expressions:
            term = key.this
            text = term.sql(dialect="duckdb").lower()
            if isinstance(term, exp.Literal) and term.is_int:
                found.append(int(term.this) - 1)
            elif text in outputs:
                found.append(outputs.index(text))
            elif text in aliases:
                found.append(aliases.index(text))
            elif select.expressions and isinstance(select.expressions[0], exp.Star):
                found = None  # SELECT *: positions are the table's; compared in full below
                break
            else:
                found = None
                break
        order_columns = tuple(found) if found is not None else None
    oracle_tree = sqlglot.parse_one(oracle, read="duckdb")
    oracle_tree.set("limit", None)
    oracle_tree.set("offset", None)
    unlimited = oracle_tree.sql(dialect="duckdb")
    limited = unlimited if limit is None else f"{unlimited} LIMIT {limit} OFFSET {offset}"
    star = select is not None and any(isinstance(e, exp.Star) for e in select.expressions)
    keyed = _keyed(oracle_tree) if order is not None and order_columns is None and limit is not None else None
    return Shape(limit, offset, order_columns, order is not None, star, unlimited, limited,
                 *(keyed if keyed is not None else (None, ())))


KEY_PREFIX = "__cuvee_sort_key_"


def _keyed(tree: exp.Expression) -> tuple[str, tuple[str, ...]] | None:
    """The oracle's unlimited text with its ORDER BY expressions appended to the SELECT list, each resolved as
    DuckDB resolves an ORDER BY term: a position names that output, a bare name an output's alias first; anything
    else is the expression itself (inside it a table's column wins over an alias, as in the SELECT list). None
    when appending could change the rows: DISTINCT (the keys would join what is distinct), or not one SELECT."""
    if not isinstance(tree, exp.Select) or tree.args.get("distinct") is not None or tree.args.get("order") is None:
        return None
    tree = tree.copy()
    outputs = list(tree.expressions)
    aliases = {e.alias.lower(): e.this for e in outputs if isinstance(e, exp.Alias)}
    names = []
    for i, key in enumerate(tree.args["order"].expressions):
        term = key.this
        if isinstance(term, exp.Literal) and term.is_int:
            position = int(term.this) - 1
            if not 0 <= position < len(outputs) or isinstance(outputs[position], exp.Star):
                return None
            term = outputs[position].unalias()
        elif isinstance(term, exp.Column) and not term.table and term.name.lower() in aliases:
            term = aliases[term.name.lower()]
        names.append(f"{KEY_PREFIX}{i}")
        tree.append("expressions", exp.alias_(term.copy(), names[-1], quoted=True))
    return tree.sql(dialect="duckdb"), tuple(names)


def _number(node: Any) -> int | None:
    if node is None:
        return None
    literal = node.find(exp.Literal) if not isinstance(node, exp.Literal) else node
    return int(literal.this) if literal is not None and literal.is_int else None


def canon(value: Any, digits: int = 9) -> Any:
    if value is None:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return float(f"{value:.{digits}g}")
    if isinstance(value, (list, tuple)):
        return tuple(canon(v, digits) for v in value)
    if isinstance(value, (int, str)):
        return value
    return str(value)


def canon_rows(rows: Sequence[Sequence[Any]], digits: int = 9) -> list[tuple[Any, ...]]:
    return [tuple(canon(v, digits) for v in row) for row in rows]


Rows = Sequence[Sequence[Any]]


def compare(shape: Shape, got: Rows, limited: Rows, unlimited: Rows | Callable[[], Rows], *,
            float_inputs: bool = False, keyed: Rows | Callable[[], Rows] | None = None) -> tuple[bool | None, str]:
    """Whether ``got`` is a right answer (None: it cannot be told), given the oracle's rows with and without the
    LIMIT (``unlimited`` may be a function giving them: asked only when ``got`` is not the limited answer itself,
    so a ``SELECT * … LIMIT 10`` over millions of matching rows fetches them only to judge ties). ``float_inputs``:
    the query reads FLOAT (32-bit) columns, whose sums two engines add in different orders: 6 significant digits
    then suffice; otherwise 9 must match. ``keyed`` (or a function giving it): the oracle's full answer by
    ``shape.keyed_sql``, to judge ties when a sort key is not an output column; without it such an answer is not
    judged (None)."""
    full = functools.cache(unlimited if callable(unlimited) else lambda: unlimited)  # fetched at most once
    with_keys = functools.cache(keyed if callable(keyed) else lambda: keyed or [])

    for digits in ((9, 6) if float_inputs else (9,)):
        mine, want = canon_rows(got, digits), canon_rows(limited, digits)
        if shape.ordered and mine == want:
            return True, ""
        if not shape.ordered and Counter(mine) == Counter(want):
            return True, ""
        if shape.limit is not None and len(mine) == len(want) and \
                not Counter(mine) - Counter(canon_rows(full(), digits)):
            if not shape.ordered:
                return True, "any rows within the LIMIT"
            keys = shape.order_columns
            if keys and [tuple(r[k] for k in keys) for r in mine] == [tuple(r[k] for k in keys) for r in want]:
                return True, "ties under the LIMIT"
            if keys is None and keyed is None:  # sorted by a column not shown: ties cannot be told from errors
                return None, "rows of the full answer, sorted by a column not selected (ties not checkable)"
            if keys is None:
                right = _keyed_ties(shape, mine, want, canon_rows(full(), digits), canon_rows(with_keys(), digits))
                if right is None:
                    return None, "the oracle's rows with their sort keys disagree with its answer (not checkable)"
                if right:
                    return True, "ties under the LIMIT (sort keys not selected, from the oracle)"
    return False, f"got {len(got)} row(s) {_preview(got)}; the oracle {len(limited)} {_preview(limited)}"


def _keyed_ties(shape: Shape, mine: list[tuple[Any, ...]], want: list[tuple[Any, ...]],
                full: list[tuple[Any, ...]], keyed: list[tuple[Any, ...]]) -> bool | None:
    """Whether ``mine`` is a right answer given the oracle's full answer with its sort keys appended (``keyed``,
    in the query's order): position i holds the i-th key of the oracle's limited answer, and the rows at one key's
    positions are a sub-multiset of the oracle's rows with that key (the rest of them may sit before the OFFSET or
    after the LIMIT). None when the keyed rows are not the oracle's answer (a rewrite that changed the rows or
    keys that do not order it: its own limited answer would fail)."""
    width = len(keyed[0]) - len(shape.key_names) if keyed else 0
    if Counter(row[:width] for row in keyed) != Counter(full):
        return None
    window = [row[width:] for row in keyed[shape.offset:shape.offset + len(want)]]
    by_key: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {key: Counter() for key in window}
    for row in keyed:
        if row[width:] in by_key:
            by_key[row[width:]][row[:width]] += 1

    def fits(rows: list[tuple[Any, ...]]) -> bool:
        taken: dict[tuple[Any, ...], Counter[tuple[Any, ...]]] = {key: Counter() for key in window}
        for key, row in zip(window, rows, strict=True):
            taken[key][row] += 1
        return all(not taken[key] - by_key[key] for key in window)

    if len(window) != len(want) or not fits(want):
        return None
    return fits(mine)


def trivial(rows: Sequence[Sequence[Any]]) -> bool:
    """An oracle answer that checks little: no rows, or only zeros and NULLs (the generated rows missed what the
    query looks for)."""
    return not rows or all(v in (None, 0) for row in rows for v in row)


def _preview(rows: Sequence[Sequence[Any]]) -> str:
    return re.sub(r"\s+", " ", repr([list(r) for r in rows[:3]]))[:300]


def run_oracle(con: duckdb.DuckDBPyConnection, sql: str,
               columns: Sequence[str] | None = None) -> list[tuple[Any, ...]]:
    """The oracle's rows; with ``columns`` (the answer's names, for ``SELECT *``, which Pinot expands in name
    order) its columns put in that order."""
    cursor = con.execute(sql)
    rows = cursor.fetchall()
    if columns is not None:
        names = [d[0] for d in cursor.description]
        if sorted(names) == sorted(columns) and names != list(columns):
            order = [names.index(c) for c in columns]
            rows = [tuple(row[i] for i in order) for row in rows]
    return [tuple(_plain(v) for v in row) for row in rows]


def _plain(value: Any) -> Any:
    """DuckDB's Python values as Pinot's JSON would carry them (decimals as floats, dates and times as text)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "is_finite") and not isinstance(value, float):  # Decimal
        return float(value)
    if hasattr(value, "isoformat"):
        return value.isoformat(sep=" ") if hasattr(value, "hour") else value.isoformat()
    return value


def oracle_connection(tables: dict[str, pa.Table]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for name, table in tables.items():
        register(con, name, table)
    return con
