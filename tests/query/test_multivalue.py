"""Pinot's multi-value predicates: any value matching makes a row match; the negations hold when none does.
Checked by running the rewritten WHERE in DuckDB over list columns, against a Python reading of the rule."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from cuvee.query.errors import QueryError
from cuvee.query.parse import TableInfo, parse_query
from tests.query.helpers import one_step

TABLE = TableInfo("t", ("id", "tags", "nums"), multi_value_columns=frozenset({"tags", "nums"}))
ROWS = pa.table({"id": [1, 2, 3, 4],
                 "tags": [["a", "b"], ["b"], ["c", "d", "a"], ["x"]],
                 "nums": [[1, 5], [7], [2, 3, 9], [10, 11]]})


def ids(where: str) -> list[int]:
    parsed = parse_query(f"SELECT id FROM t WHERE {where}", lambda _: TABLE)
    condition = parsed.select.args["where"].this.sql(dialect="duckdb")
    con = duckdb.connect()
    con.register("t", ROWS)
    return sorted(r[0] for r in con.execute(f"SELECT id FROM t WHERE {condition}").fetchall())


@pytest.mark.parametrize("where, expected", [
    ("tags = 'a'", [1, 3]),
    ("'a' = tags", [1, 3]),
    ("tags IN ('b', 'x')", [1, 2, 4]),
    ("nums > 8", [3, 4]),
    ("8 < nums", [3, 4]),  # flipped
    ("nums BETWEEN 2 AND 5", [1, 3]),
    ("tags LIKE 'x%'", [4]),
    ("tags != 'a'", [2, 4]),  # none of the values is 'a'
    ("tags NOT IN ('a', 'b')", [4]),
    ("NOT (tags != 'a')", [1, 3]),  # some value is 'a'
    ("nums NOT BETWEEN 1 AND 9", [4]),
    ("tags = 'a' AND nums < 2", [1]),
    ("id = 2 OR tags = 'x'", [2, 4]),
    ("arrayToMv(tags) = 'a'", [1, 3]),  # the multi-stage engine's spelling: the same rule
    ("ARRAY_TO_MV(tags) NOT IN ('a', 'b')", [4]),
    ("arrayToMv(arrayToMv(tags)) = 'a'", [1, 3]),
])
def test_a_row_matches_when_any_value_does_and_a_negation_when_none_does(where: str, expected: list[int]) -> None:
    assert ids(where) == expected


def test_a_multi_value_column_compared_with_a_column_is_refused_clearly() -> None:
    with pytest.raises(QueryError) as info:
        parse_query("SELECT id FROM t WHERE nums = id", lambda _: TABLE)
    assert "only be compared with constants" in str(info.value)


def test_the_mv_aggregations_run_over_every_value_and_merge_across_servers() -> None:
    from cuvee.query.execute import merge_partials, run_server_step
    from cuvee.query.rewrite import plan_sql

    table = TableInfo("t", ("g", "nums"), multi_value_columns=frozenset({"nums"}))
    rows = pa.table({"g": ["a", "a", "b", "b"], "nums": [[1, 5], [7], [2, 3, 9], [10, 10]]})

    def answer(sql: str) -> list[dict]:
        plan = plan_sql(sql, lambda _: table)
        partials = [run_server_step(plan, [rows.slice(0, 2)]), run_server_step(plan, [rows.slice(2)])]  # 2 servers
        merged = merge_partials(plan, partials, rows.schema)
        if plan.whole_sql is not None:  # one server answers it whole: the same answer, typed the same
            whole, _ = one_step(plan, rows)
            assert whole.schema == merged.schema and whole.to_pylist() == merged.to_pylist()
        return merged.to_pylist()

    values = [1, 5, 7, 2, 3, 9, 10, 10]
    [got] = answer("SELECT COUNTMV(nums), SUMMV(nums), MINMV(nums), MAXMV(nums), AVGMV(nums), MINMAXRANGEMV(nums), "
                   "DISTINCTCOUNTMV(nums), DISTINCTSUMMV(nums), PERCENTILE90MV(nums), PERCENTILEMV(nums, 50) FROM t")
    assert list(got.values()) == [8, sum(values), 1, 10, sum(values) / 8, 9.0, 7, sum(set(values)),
                                  sorted(values)[7], sorted(values)[4]]
    assert list(got) == ["countmv(nums)", "summv(nums)", "minmv(nums)", "maxmv(nums)", "avgmv(nums)",
                         "minmaxrangemv(nums)", "distinctcountmv(nums)", "distinctsummv(nums)",
                         "percentile90mv(nums)", "percentilemv(nums, 50)"]
    assert answer("SELECT g, COUNTMV(nums) FROM t GROUP BY g ORDER BY g") == [
        {"g": "a", "countmv(nums)": 3}, {"g": "b", "countmv(nums)": 5}]


def test_group_by_a_multi_value_column_makes_a_group_of_each_value_after_the_rows_are_filtered() -> None:
    from cuvee.query.execute import merge_partials, run_server_step
    from cuvee.query.rewrite import plan_sql

    table = TableInfo("t", ("id", "tags", "nums"), multi_value_columns=frozenset({"tags", "nums"}))
    rows = pa.table({"id": [1, 2, 3, 4], "tags": [["a", "b"], ["b"], ["c", "a"], ["x"]],
                     "nums": [[1], [2, 3], [4], [5]]})

    def answer(sql: str) -> list[tuple]:
        plan = plan_sql(sql, lambda _: table)
        partials = [run_server_step(plan, [rows.slice(0, 2)]), run_server_step(plan, [rows.slice(2)])]
        return [tuple(r.values()) for r in merge_partials(plan, partials, rows.schema).to_pylist()]

    assert answer("SELECT tags, COUNT(*) FROM t GROUP BY tags ORDER BY tags") == [
        ("a", 2), ("b", 2), ("c", 1), ("x", 1)]
    # WHERE picks rows (any value matches) before they are unnested: row 3 (c, a) brings its 'c' along.
    assert answer("SELECT tags, SUM(id) FROM t WHERE tags = 'a' GROUP BY tags ORDER BY tags") == [
        ("a", 4.0), ("b", 1.0), ("c", 3.0)]
    assert answer("SELECT tags, nums, COUNT(*) FROM t WHERE id < 3 GROUP BY tags, nums ORDER BY 1, 2") == [
        ("a", 1, 1), ("b", 1, 1), ("b", 2, 1), ("b", 3, 1)]
    with pytest.raises(QueryError):
        answer("SELECT upper(tags), COUNT(*) FROM t GROUP BY upper(tags)")
    rows = pa.table({"id": [1, 2, 3], "tags": [["a"], [], None], "nums": [[1], [2], [3]]})  # no values: kept
    assert answer("SELECT tags, COUNT(*) FROM t GROUP BY tags ORDER BY tags") == [("a", 1), (None, 2)]


@pytest.mark.parametrize("sql", [
    "SELECT CASE WHEN tags = 'a' THEN 1 ELSE 0 END FROM t",
    "SELECT id FROM t ORDER BY tags = 'a' LIMIT 3",
])
def test_a_multi_value_comparison_outside_where_is_refused_in_plain_words(sql: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_query(sql, lambda _: TABLE)
    assert "can be compared only in WHERE" in str(info.value)


def test_a_grouped_multi_value_column_is_one_value_per_group_outside_where() -> None:
    parse_query("SELECT tags, COUNT(*) FROM t GROUP BY tags HAVING tags <> 'x' ORDER BY tags = 'a'", lambda _: TABLE)
