"""When pruning leaves no rows to any server, the broker's answer over no partials runs the server step over an
empty table of only the columns the query names (a 105-column empty table cost DuckDB 7-35 ms), typed as before."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import cuvee.query.execute as execute
from cuvee.query import TableInfo, merge_partials, plan_sql

SCHEMA = pa.schema([(f"c{i}", pa.int64() if i % 2 else pa.string()) for i in range(60)] + [("x y", pa.float64())])
INFO = TableInfo("w_OFFLINE", tuple(SCHEMA.names), number_columns=frozenset(SCHEMA.names[1::2]))


@pytest.mark.parametrize(("sql", "columns", "types"), [
    ("SELECT c1 FROM w WHERE c3 = 5", ["c1", "c3"], [pa.int64()]),
    ("SELECT COUNT(*), SUM(c5) FROM w WHERE \"x y\" > 1", ["c5", "x y"], [pa.int64(), pa.float64()]),
    ("SELECT c0, MAX(c7) FROM w WHERE c9 IN (1, 2) GROUP BY c0", ["c0", "c7", "c9"], [pa.string(), pa.int64()]),
    ("SELECT COUNT(*) FROM w", ["c0"], [pa.int64()]),
])
def test_no_partials_read_only_the_named_columns(monkeypatch: pytest.MonkeyPatch, sql: str, columns: list[str],
                                                 types: list[pa.DataType]) -> None:
    seen: list[pa.Schema] = []
    real = execute.run_server_step

    def spy(plan: Any, segments: Any, schema: pa.Schema | None = None, *args: Any, **kwargs: Any) -> pa.Table:
        assert schema is not None
        seen.append(schema)
        return real(plan, segments, schema, *args, **kwargs)

    monkeypatch.setattr(execute, "run_server_step", spy)
    answer = merge_partials(plan_sql(sql, lambda name, **_: INFO), [], SCHEMA)
    assert seen[0].names == columns
    assert answer.num_rows == (0 if "GROUP BY" in sql or "COUNT" not in sql else 1)
    assert [f.type for f in answer.schema][:len(types)] == types
