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
    LIMIT/OFFSET."""

    limit: int | None
    offset: int
    order_columns: tuple[int, ...] | None
    ordered: bool
    star: bool
    unlimited_sql: str
    limited_sql: str


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
    return Shape(limit, offset, order_columns, order is not None, star, unlimited, limited)


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


def compare(shape: Shape, got: Sequence[Sequence[Any]], limited: Sequence[Sequence[Any]],
            unlimited: Sequence[Sequence[Any]] | Callable[[], Sequence[Sequence[Any]]], *,
            float_inputs: bool = False) -> tuple[bool | None, str]:
    """Whether ``got`` is a right answer (None: it cannot be told), given the oracle's rows with and without the
    LIMIT (``unlimited`` may be a function giving them: asked only when ``got`` is not the limited answer itself,
    so a ``SELECT * … LIMIT 10`` over millions of matching rows fetches them only to judge ties). ``float_inputs``:
    the query reads FLOAT (32-bit) columns, whose sums two engines add in different orders: 6 significant digits
    then suffice; otherwise 9 must match."""
    full = functools.cache(unlimited if callable(unlimited) else lambda: unlimited)  # fetched at most once

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
            if keys is None:  # sorted by a column the answer does not show: ties cannot be told from errors
                return None, "rows of the full answer, sorted by a column not selected (ties not checkable)"
    return False, f"got {len(got)} row(s) {_preview(got)}; the oracle {len(limited)} {_preview(limited)}"


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
