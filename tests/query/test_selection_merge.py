"""Selections merged in Arrow (no DuckDB at the broker) answer what the final SQL answers."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.query import merge_partials, plan_sql, run_server_step
from tests.query.helpers import SCHEMA, event_tables, resolve

# Keys that leave no ties (id last) so both merges must give the same rows in the same order.
ORDERED = [
    "SELECT id, city FROM events ORDER BY city, id LIMIT 7",
    "SELECT id, city FROM events ORDER BY city DESC, id LIMIT 5 OFFSET 2",
    "SELECT id, v FROM events ORDER BY v NULLS FIRST, id DESC LIMIT 6",
    "SELECT id, v FROM events ORDER BY v DESC NULLS FIRST, id LIMIT 6 OFFSET 1",
    "SELECT id, v FROM events ORDER BY v ASC NULLS LAST, id LIMIT 4",
    "SELECT id, city FROM events WHERE v > 0 ORDER BY ts DESC, id LIMIT 3",
    "SELECT city FROM events ORDER BY v * 2, id LIMIT 8",
    "SELECT * FROM events ORDER BY ts, id LIMIT 4",
]


@pytest.mark.parametrize("sql, in_arrow", [
    ("SELECT id FROM events LIMIT 3", True),
    ("SELECT id FROM events ORDER BY v DESC NULLS FIRST, city LIMIT 3", True),
    ("SELECT id FROM events ORDER BY v + 1 LIMIT 3", True),  # a hidden partial column: still a column
    ("SELECT id, id FROM events ORDER BY id LIMIT 3", False),  # one name twice: the SQL names them
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY city LIMIT 3", False),
])
def test_which_selections_merge_in_arrow(sql: str, in_arrow: bool) -> None:
    assert (plan_sql(sql, resolve).selection_order is not None) is in_arrow


@settings(max_examples=15, deadline=None)
@given(event_tables(), event_tables(), st.sampled_from(ORDERED))
def test_the_arrow_merge_answers_what_the_final_sql_answers(first: pa.Table, second: pa.Table, sql: str) -> None:
    plan = plan_sql(sql, resolve)
    assert plan.selection_order is not None
    second = second.set_column(0, "id", pa.array([1000 + i for i in range(second.num_rows)], pa.int64()))  # unique
    partials = [run_server_step(plan, [first]), run_server_step(plan, [second])]
    fast = merge_partials(plan, partials, SCHEMA)
    slow = merge_partials(dataclasses.replace(plan, selection_order=None), partials, SCHEMA)
    assert fast.schema == slow.schema
    assert fast.to_pylist() == slow.to_pylist()


def test_without_order_the_limit_and_offset_apply_to_the_servers_rows() -> None:
    plan = plan_sql("SELECT id FROM events LIMIT 3 OFFSET 2", resolve)
    partials = [pa.table({"__c0": pa.array([1, 2], pa.int64())}),
                pa.table({"__c0": pa.array([3, 4, 5, 6], pa.int64())})]
    got = merge_partials(plan, partials, SCHEMA)
    assert got.column_names == ["id"] and got.num_rows == 3
    assert set(got.column("id").to_pylist()) <= {1, 2, 3, 4, 5, 6}


def test_a_float_sort_key_is_left_to_the_sql_which_orders_nan_above_every_number() -> None:
    plan = plan_sql("SELECT id FROM events ORDER BY d DESC LIMIT 2", resolve)
    partials = [pa.table({"__c0": pa.array([1, 2, 3], pa.int64()), "__o0": [1.5, float("nan"), None]})]
    assert merge_partials(plan, partials, SCHEMA).column("id").to_pylist() == [2, 1]
