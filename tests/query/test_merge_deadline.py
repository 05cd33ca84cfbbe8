"""The broker's merge runs under its query's deadline: DuckDB's statement is interrupted then (again and again
until it ends: an interrupt before the statement starts is lost), so a merge no longer holds a broker worker past
its query's time."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from cuvee.query.execute import PastDeadlineError, run_sql
from tests.query.helpers import within

SLOW = "SELECT count(*) FROM range(200000000) a, range(100000) b WHERE a.range + b.range = -1"


def test_a_merge_past_its_deadline_is_interrupted() -> None:
    table = pa.table({"x": [1]})
    started = time.monotonic()
    with pytest.raises(PastDeadlineError):
        within(20, lambda: run_sql(SLOW, "cuvee_partials", table, deadline=time.monotonic() + 0.2))
    assert time.monotonic() - started < 20
    assert run_sql("SELECT count(*) AS n FROM cuvee_partials", "cuvee_partials", table,
                   deadline=time.monotonic() + 30).to_pylist() == [{"n": 1}]
