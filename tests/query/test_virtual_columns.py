"""Pinot's virtual columns as the broker reads them (``cuvee.query.virtual_columns``): DuckDB parses ``$name`` as a
prepared statement's parameter, so each becomes the quoted column ``"$name"`` before columns are resolved."""

from __future__ import annotations

import pytest

from cuvee.query import QueryError, TableInfo, plan_sql

TABLE = TableInfo("t", ("id", "s"))


def _server_sql(sql: str) -> str:
    return plan_sql(sql, lambda name: TABLE).server_sql


@pytest.mark.parametrize("sql, fragment", [
    ("SELECT t.$docId FROM t", 'SELECT "$docId" AS __c0'),
    ("SELECT id FROM t WHERE t.$segmentName = 'x'", "WHERE \"$segmentName\" = 'x'"),
    ("SELECT t_REALTIME.$HOSTNAME, COUNT(*) FROM t_REALTIME GROUP BY t_REALTIME.$hostName", 'SELECT "$hostName"'),
    ("SELECT x.$docId FROM t AS x WHERE x.$docId < 3", 'WHERE "$docId" < 3'),
])
def test_a_qualified_virtual_column_is_that_column(sql: str, fragment: str) -> None:
    assert fragment in _server_sql(sql)


def test_a_virtual_column_of_another_table_is_refused() -> None:
    with pytest.raises(QueryError) as raised:
        _server_sql("SELECT u.$docId FROM t")
    assert raised.value.code == 150 and "refers to a table not in FROM" in str(raised.value)


@pytest.mark.parametrize("sql, kept", [
    ("SELECT id FROM t WHERE $docId = ?", 'WHERE "$docId" = ?'),
    ("SELECT id FROM t WHERE id = ?", 'WHERE "id" = ?'),
    ("SELECT id FROM t WHERE id = $1", 'WHERE "id" = $1'),
])
def test_only_parameters_named_like_columns_become_columns(sql: str, kept: str) -> None:
    # ? and $1 stay parameters (a server refuses them: no values are given), never a column "$?" or "$1"
    assert kept in _server_sql(sql)
