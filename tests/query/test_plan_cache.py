"""Reused plans: a repeated text is not planned again while its table resolves to the same columns; a schema
change, an unknown table or a failed plan is never served from the cache; the cache stays within its bound."""

from __future__ import annotations

import pytest

from cuvee.query.errors import QueryError
from cuvee.query.parse import TableInfo
from cuvee.query.plan_cache import PlanCache
from cuvee.query.rewrite import plan_sql


def test_a_repeated_query_is_planned_once_until_its_table_changes() -> None:
    tables = {"t": TableInfo("t", ("a", "b"))}
    calls: list[str] = []

    def counting(sql: str, resolve):  # type: ignore[no-untyped-def]
        calls.append(sql)
        return plan_sql(sql, resolve)

    cache = PlanCache(8, plan=counting)
    sql = "SELECT a, COUNT(*) FROM t GROUP BY a"
    assert cache.cached(sql, tables.get) is None
    first = cache.plan(sql, tables.get)
    assert cache.cached(sql, tables.get) is first and calls == [sql]
    tables["t"] = TableInfo("t", ("a", "b", "c"))  # a column added: planned afresh
    assert cache.cached(sql, tables.get) is None
    del tables["t"]
    with pytest.raises(QueryError):
        cache.plan(sql, tables.get)
    assert cache.cached(sql, tables.get) is None


def test_the_cache_keeps_its_bound_and_drops_the_least_recently_used() -> None:
    tables = {"t": TableInfo("t", ("a",))}
    cache = PlanCache(2)
    for n in range(3):
        cache.plan(f"SELECT a FROM t LIMIT {n + 1}", tables.get)
    assert cache.cached("SELECT a FROM t LIMIT 1", tables.get) is None
    assert cache.cached("SELECT a FROM t LIMIT 3", tables.get) is not None
    long_text = "SELECT a FROM t WHERE a IN (" + ",".join(str(i) for i in range(5000)) + ")"
    cache.plan(long_text, tables.get)
    assert cache.cached(long_text, tables.get) is None  # too long to keep


def test_a_fingerprint_catches_a_type_change_the_planners_view_does_not_show() -> None:
    tables = {"t": TableInfo("t", ("x",))}
    types = {"t": "INT"}
    cache = PlanCache(8, fingerprint=lambda name: (tables.get(name), types.get(name)))
    sql = "SELECT SUM(x) FROM t"
    cache.plan(sql, tables.get)
    assert cache.cached(sql, tables.get) is not None
    types["t"] = "STRING"  # re-created with x as a string: same columns, other types
    assert cache.cached(sql, tables.get) is None
