"""Pinot's multi-value predicates: any value matching makes a row match; the negations hold when none does.
Checked by running the rewritten WHERE in DuckDB over list columns, against a Python reading of the rule."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from cuvee.query.errors import QueryError
from cuvee.query.parse import TableInfo, parse_query

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
])
def test_a_row_matches_when_any_value_does_and_a_negation_when_none_does(where: str, expected: list[int]) -> None:
    assert ids(where) == expected


def test_a_multi_value_column_compared_with_a_column_is_refused_clearly() -> None:
    with pytest.raises(QueryError) as info:
        parse_query("SELECT id FROM t WHERE nums = id", lambda _: TABLE)
    assert "only be compared with constants" in str(info.value)
