"""Queries DuckDB cannot bind over the table's columns are refused at the broker with Pinot's 700, before any
server is asked, in words that name the function and the types, not DuckDB's."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cuvee.query import QueryError, QueryErrorCode, check_plan, plan_sql
from cuvee.query.parse import TableInfo

TABLE = TableInfo("t", ("id", "name", "tags"), multi_value_columns=frozenset({"tags"}))
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.string()))])


def check(sql: str) -> None:
    check_plan(plan_sql(sql, lambda _: TABLE), SCHEMA)


def test_a_function_that_does_not_take_the_columns_type_is_refused_before_execution() -> None:
    with pytest.raises(QueryError) as info:
        check("SELECT COUNT(*) FROM t WHERE upper(id) = 'x'")
    assert info.value.code is QueryErrorCode.QUERY_VALIDATION
    assert "upper(BIGINT)" in info.value.message
    assert "Binder Error" not in info.value.message and "explicit type casts" not in info.value.message


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM t",
    "SELECT name, SUM(id) FROM t WHERE tags = 'a' GROUP BY name ORDER BY SUM(id) DESC LIMIT 5",
    "SELECT COUNTMV(tags), DISTINCTCOUNTMV(tags) FROM t WHERE id > 3",
    "SELECT * FROM t ORDER BY id LIMIT 2",
])
def test_queries_that_bind_pass(sql: str) -> None:
    check(sql)


def test_the_check_binds_without_evaluating_what_the_query_computes() -> None:
    # Evaluated (constant-folded), this would fail; bound only, it passes (and a costly constant costs nothing).
    check("SELECT COUNT(*) FROM t WHERE id = CAST('not a number' AS BIGINT)")
    check("SELECT COUNT(*) FROM t WHERE id = list_sum(range(200000000))")
