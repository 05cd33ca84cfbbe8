"""``GROUP BY … LIMIT n`` without ORDER BY on several servers: every group answered is whole.

Three servers, a realtime table of 3 partitions with one replica each (a partition per server), rows keyed by
``id`` on the stream and grouped by ``g = id % 120``: every group has rows on every server. Each server keeps at
most ``numGroupsLimit`` groups; when each kept whichever it met first, the broker merged a group one server sent
and the others cut, and answered its count short. Every answer is compared with DuckDB over the same rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "gl"
ROWS = 1_440
GROUPS = 120
SCHEMA: dict[str, Any] = {"schemaName": TABLE,
                          "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"},
                                                  {"name": "g", "dataType": "INT"},
                                                  {"name": "tag", "dataType": "STRING"}],
                          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


def _row(i: int) -> dict[str, Any]:
    return {"id": i, "g": (i * 7) % GROUPS, "tag": f"t{i % 3}", "v": i % 11}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path_factory.mktemp("grouplimit"), servers=3) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=3, replicas=1, flush_rows=200)
        cluster.produce(configs, (_row(i) for i in range(ROWS)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == ROWS, 30)
        yield cluster


@pytest.fixture(scope="module")
def reference() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    rows = [_row(i) for i in range(ROWS)]
    con.register(TABLE, pa.Table.from_pylist(rows))
    return con


def _answer(cluster: InProcessCluster, sql: str, **options: Any) -> dict[str, Any]:
    answer = cluster.query(sql, **options)
    assert not answer.get("exceptions"), (sql, answer["exceptions"])
    return answer


def _whole(reference: duckdb.DuckDBPyConnection, sql: str) -> set[tuple[Any, ...]]:
    return {tuple(row) for row in reference.sql(sql).fetchall()}


def test_every_group_answered_has_its_exact_aggregates(cluster: InProcessCluster,
                                                        reference: duckdb.DuckDBPyConnection) -> None:
    sql = f"SELECT g, COUNT(*), SUM(v), DISTINCTCOUNT(tag) FROM {TABLE} GROUP BY g LIMIT 10"
    answer = _answer(cluster, sql, numGroupsLimit=10)
    assert answer["numServersQueried"] == 3 and answer["numServersResponded"] == 3
    got = [tuple(row) for row in answer["resultTable"]["rows"]]
    whole = _whole(reference, f"SELECT g, COUNT(*), SUM(v)::DOUBLE, COUNT(DISTINCT tag) FROM {TABLE} GROUP BY g")
    assert len(got) == 10 and set(got) <= whole, sorted(set(got) - whole)
    assert [row[0] for row in got] == list(range(10))  # the first groups by key, the ones servers agree on
    assert answer["numGroupsLimitReached"] is True  # each server held 120 groups and sent 10: truly dropped
    assert answer["groupsTrimmed"] is False


def test_two_keys_and_an_offset(cluster: InProcessCluster, reference: duckdb.DuckDBPyConnection) -> None:
    sql = f"SELECT tag, g, COUNT(*), MAX(v) FROM {TABLE} GROUP BY tag, g LIMIT 5 OFFSET 7"
    answer = _answer(cluster, sql, numGroupsLimit=12)
    got = [tuple(row) for row in answer["resultTable"]["rows"]]
    whole = _whole(reference, f"SELECT tag, g, COUNT(*), MAX(v) FROM {TABLE} GROUP BY tag, g")
    assert len(got) == 5 and set(got) <= whole, sorted(set(got) - whole)


def test_the_trim_alone_keeps_groups_whole_and_reports_no_limit(cluster: InProcessCluster,
                                                                reference: duckdb.DuckDBPyConnection) -> None:
    """Servers trimmed to 5 × LIMIT by key (``minServerGroupTrimSize`` 1), under a numGroupsLimit above that: the
    answer is whole, and neither flag is set (the trim is exact; the limit dropped no group, though each server
    held more groups than it)."""
    whole = _whole(reference, f"SELECT g, COUNT(*) FROM {TABLE} GROUP BY g")
    for limit in (100_000, 60):  # a limit above the trim size (15) drops no group: not reported either
        answer = _answer(cluster, f"SELECT g, COUNT(*) FROM {TABLE} GROUP BY g LIMIT 3", minServerGroupTrimSize=1,
                         numGroupsLimit=limit)
        got = [tuple(row) for row in answer["resultTable"]["rows"]]
        assert set(got) <= whole and len(got) == 3
        assert answer["numGroupsLimitReached"] is False and answer["groupsTrimmed"] is False
    everything = _answer(cluster, f"SELECT g, COUNT(*) FROM {TABLE} GROUP BY g LIMIT 1000")
    assert len(everything["resultTable"]["rows"]) == GROUPS
    assert everything["numGroupsLimitReached"] is False
