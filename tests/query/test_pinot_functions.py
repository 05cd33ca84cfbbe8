"""Pinot scalar functions that DuckDB lacks or reads differently, translated with Pinot's meaning: run through the
planner and DuckDB over a small table."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from cuvee.query import QueryError
from cuvee.query.execute import merge_partials, run_server_step
from cuvee.query.parse import TableInfo
from cuvee.query.rewrite import plan_sql

TABLE = TableInfo("t", ("s", "tags"), multi_value_columns=frozenset({"tags"}))
ROWS = pa.table({"s": ["xaby", "zzz"], "tags": [["a", "b", "c"], ["d"]]})


def answer(sql: str) -> list[tuple]:
    plan = plan_sql(sql, lambda _: TABLE)
    merged = merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema)
    return [tuple(r.values()) for r in merged.to_pylist()]


def test_array_length_and_cardinality_count_a_multi_value_columns_values() -> None:
    assert answer("SELECT arrayLength(tags), cardinality(tags) FROM t ORDER BY s") == [(3, 3), (1, 1)]


def test_regexp_extract_answers_its_default_when_nothing_matches() -> None:
    assert answer("SELECT regexp_extract(s, 'a(b)', 1, 'none') FROM t ORDER BY s") == [("b",), ("none",)]
    assert answer("SELECT regexp_extract(s, 'a(b)', 1) FROM t ORDER BY s") == [("b",), ("",)]


def test_now_and_ago_are_epoch_millis() -> None:
    before = int(time.time() * 1000)
    [(now, hour_ago, day_and_half)] = answer("SELECT now(), ago('PT1H'), ago('P1DT12H') FROM t LIMIT 1")
    after = int(time.time() * 1000)
    assert before - 1000 <= now <= after + 1000
    assert abs((now - hour_ago) - 3_600_000) < 1000 and abs((now - day_and_half) - 129_600_000) < 1000
    with pytest.raises(QueryError):
        answer("SELECT ago('an hour') FROM t")
