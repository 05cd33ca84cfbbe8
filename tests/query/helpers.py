"""Shared helpers: a table of random events, a distributed run of a plan, and row comparison."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import strategies as st

from cuvee.query import QueryPlan, TableInfo, merge_partials, plan_sql, run_server_step
from cuvee.query.execute import run_sql
from cuvee.query.lookup import SERVER_RELATION
from cuvee.query.rewrite import DOCS_TOTAL_COLUMN

SCHEMA = pa.schema([("id", pa.int64()), ("city", pa.string()), ("v", pa.int32()), ("d", pa.float64()),
                    ("ts", pa.timestamp("ms"))])
EVENTS = TableInfo("events", tuple(SCHEMA.names), frozenset({"ts"}))
BASE_TS = dt.datetime(2026, 11, 21, 16, 0)
_REFERENCE = duckdb.connect()  # a database separate from the one cuvee.query executes in


def resolve(name: str) -> TableInfo | None:
    return EVENTS if name.lower() in ("events", "events_realtime") else None


@st.composite
def event_tables(draw: st.DrawFn, max_rows: int = 60) -> pa.Table:
    """Events with nulls, duplicates and floats that are exact in binary (quarters), so sums are order-free."""
    n = draw(st.integers(0, max_rows))
    cities = draw(st.lists(st.sampled_from(["amsterdam", "berlin", "bern", "cairo", None]), min_size=n, max_size=n))
    values = draw(st.lists(st.one_of(st.none(), st.integers(-20, 20)), min_size=n, max_size=n))
    quarters = draw(st.lists(st.one_of(st.none(), st.integers(-400, 400)), min_size=n, max_size=n))
    minutes = draw(st.lists(st.integers(0, 600), min_size=n, max_size=n))
    return pa.table({
        "id": list(range(n)),
        "city": cities,
        "v": values,
        "d": [None if q is None else q / 4 for q in quarters],
        "ts": [BASE_TS + dt.timedelta(minutes=m) for m in minutes],
    }, schema=SCHEMA)


@st.composite
def partitions(draw: st.DrawFn, table: pa.Table) -> list[pa.Table]:
    """``table`` cut into 1-4 contiguous parts (some possibly empty), as if held by different servers."""
    count = draw(st.integers(1, 4))
    cuts = sorted(draw(st.lists(st.integers(0, table.num_rows), min_size=count - 1, max_size=count - 1)))
    bounds = [0, *cuts, table.num_rows]
    return [table.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]


def distributed(sql: str, parts: Sequence[pa.Table]) -> pa.Table:
    """Plan ``sql``, run the server step on every part and merge, as broker and servers do."""
    plan = plan_sql(sql, resolve)
    partials = [run_server_step(plan, [part]) for part in parts]
    return merge_partials(plan, partials, SCHEMA)


def one_step(plan: QueryPlan, table: pa.Table) -> tuple[pa.Table, int | None]:
    """A single server's whole answer to ``plan`` over ``table`` (``QueryPlan.whole_sql``), as the server runs it:
    the answer without the docs column, and that column's value (None without WHERE; 0 with no row)."""
    assert plan.whole_sql is not None
    answer = run_sql(plan.whole_sql, SERVER_RELATION, table)
    if answer.schema.get_field_index(DOCS_TOTAL_COLUMN) < 0:
        return answer, None
    column = answer.column(DOCS_TOTAL_COLUMN)
    return answer.drop_columns([DOCS_TOTAL_COLUMN]), column[0].as_py() if len(column) else 0


def reference(sql: str, table: pa.Table) -> pa.Table:
    """DuckDB's own answer to ``sql`` over all rows (the table is bound as ``events``)."""
    con = _REFERENCE.cursor()
    try:
        con.register("events", table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def _norm(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, decimal.Decimal)):
        return round(float(value), 9)
    return value


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """Rows with every number as a rounded float, so LONG vs DOUBLE vs DECIMAL answers compare equal."""
    columns = [column.to_pylist() for column in table.columns]
    return [tuple(_norm(v) for v in row) for row in zip(*columns)]


def sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, "" if v is None else str(v)) for v in row)


def within(seconds: float, work: Any) -> Any:
    """``work()``'s answer, failing the test when it takes longer than ``seconds`` (it then runs on, unheard, in a
    daemon thread: what a quadratic step did before its fix)."""
    import threading

    answer: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"took longer than {seconds} s"
    if failure:
        raise failure[0]
    return answer[0]
