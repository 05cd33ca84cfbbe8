"""One-row aggregations merged in Arrow (no DuckDB at the broker) answer exactly what the final SQL answers."""

from __future__ import annotations

import dataclasses
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings

from cuvee.query import merge_partials, plan_sql, run_server_step
from tests.query.helpers import SCHEMA, event_tables, resolve

SIMPLE = "SELECT COUNT(*), SUM(v), MIN(city), MAX(ts), AVG(d), COUNT(v), MIN(d) FROM events WHERE id > 3"


@pytest.mark.parametrize("sql, simple", [
    (SIMPLE, True),
    ("SELECT COUNT(*) FROM events", True),
    ("SELECT COUNT(*) + 1 FROM events", False),
    ("SELECT SUM(v) FROM events HAVING SUM(v) > 0", False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city", False),
    ("SELECT DISTINCTCOUNT(city), COUNT(DISTINCT v) FROM events", True),
    ("SELECT DISTINCTCOUNT(city) + 1 FROM events", False),
    ("SELECT COUNT(*) FROM events LIMIT 1 OFFSET 1", False),
])
def test_which_plans_merge_in_arrow(sql: str, simple: bool) -> None:
    assert (plan_sql(sql, resolve).simple_merge is not None) is simple


@settings(max_examples=60, deadline=None)
@given(event_tables(), event_tables())
def test_the_arrow_merge_answers_what_the_final_sql_answers(first: pa.Table, second: pa.Table) -> None:
    plan = plan_sql(SIMPLE, resolve)
    partials = [run_server_step(plan, [first]), run_server_step(plan, [second])]
    fast = merge_partials(plan, partials, SCHEMA).to_pylist()
    slow = merge_partials(dataclasses.replace(plan, simple_merge=None), partials, SCHEMA).to_pylist()
    assert list(fast[0]) == list(plan.column_names)
    for (name, got), want in zip(fast[0].items(), slow[0].values()):
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, name


DISTINCT = "SELECT COUNT(DISTINCT city), DISTINCTCOUNT(v), COUNT(DISTINCT ts), DISTINCTCOUNT(d), COUNT(*) FROM events"


@settings(max_examples=60, deadline=None)
@given(event_tables(), event_tables())
def test_distinct_counts_merged_in_arrow_answer_what_the_final_sql_answers(first: pa.Table, second: pa.Table) -> None:
    plan = plan_sql(DISTINCT, resolve)
    partials = [run_server_step(plan, [first]), run_server_step(plan, [second])]
    fast = merge_partials(plan, partials, SCHEMA)
    slow = merge_partials(dataclasses.replace(plan, simple_merge=None), partials, SCHEMA)
    assert fast.schema == slow.schema
    assert fast.to_pylist() == slow.to_pylist()


def test_a_distinct_count_of_floats_is_left_to_the_final_sql() -> None:
    """Arrow hashes -0.0 and 0.0 apart; DuckDB counts them as one value."""
    plan = plan_sql("SELECT DISTINCTCOUNT(d) FROM events", resolve)
    partials = [pa.table({"__p0": pa.array([[0.0, 1.5]], pa.list_(pa.float64()))}),
                pa.table({"__p0": pa.array([[-0.0]], pa.list_(pa.float64()))})]
    assert merge_partials(plan, partials, SCHEMA).to_pylist() == [{"distinctcount(d)": 2}]


def test_a_nan_is_left_to_the_final_sql_which_orders_it_above_every_number() -> None:
    plan = plan_sql("SELECT MAX(d) FROM events", resolve)
    partials = [pa.table({"__p0": [1.5]}), pa.table({"__p0": [math.nan]})]
    [[value]] = [list(r.values()) for r in merge_partials(plan, partials, SCHEMA).to_pylist()]
    assert math.isnan(value)


def test_multi_value_aggregations_merge_right_or_leave_it_to_the_sql() -> None:
    """A review found AVGMV's HUGEINT count (a Decimal) and MIN/MAX of a list crashing the Arrow merge."""
    from cuvee.query import TableInfo

    info = TableInfo("t", ("tags",), multi_value_columns=frozenset({"tags"}))
    rows = pa.table({"tags": pa.array([[1, 2, 3], [4], None], pa.list_(pa.int32()))})
    for sql, want in [("SELECT AVGMV(tags), COUNTMV(tags), SUMMV(tags), MAXMV(tags) FROM t", [16 / 7, 7, 16.0, 4]),
                      ("SELECT MIN(tags), MAX(tags) FROM t", None)]:
        plan = plan_sql(sql, lambda _: info)
        partials = [run_server_step(plan, [rows]), run_server_step(plan, [rows.slice(0, 1)])]
        fast = merge_partials(plan, partials, rows.schema).to_pylist()
        slow = merge_partials(dataclasses.replace(plan, simple_merge=None), partials, rows.schema).to_pylist()
        assert fast == slow
        if want is not None:
            assert list(fast[0].values()) == [pytest.approx(v) for v in want]


def test_one_server_still_counts_distinct_values_in_one_step() -> None:
    """A distinct count merged in Arrow still lets a lone server answer it with count(DISTINCT) (no list)."""
    plan = plan_sql("SELECT COUNT(DISTINCT city) FROM events", resolve)
    assert plan.simple_merge is not None and plan.whole_sql is not None
    assert "count(DISTINCT" in plan.whole_sql and "list(" not in plan.whole_sql
    assert plan_sql("SELECT COUNT(*), SUM(v) FROM events", resolve).whole_sql is None  # Arrow's merge is cheaper
