"""Distinct counts and sketches over several servers of a live in-process cluster: a partitioned OFFLINE table
(its distinct counts on the partition column counted per server and summed, no values shipped) and a REALTIME
table spread over the servers with committed and consuming segments (values shipped and merged), each answering
DuckDB's exact count over the same rows; the sketches within their error."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.partitioned import by_partition, partitioned_table, push_segment
from cuvee.testing.waiting import wait_until
from tests.broker.helpers import spy_summed_plans

VISITS_SCHEMA = {"schemaName": "visits", "dimensionFieldSpecs": [
    {"name": "userId", "dataType": "STRING"}, {"name": "page", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "ms", "dataType": "DOUBLE"}]}
VISITS_TABLE = partitioned_table("visits", "userId", 4)
VISITS = pa.table({"userId": [f"u{(i * 37) % 311}" for i in range(1500)],
                   "page": [f"p{i % 7}" for i in range(1500)],
                   "ms": [float((i * 13) % 1000) for i in range(1500)]})
CLICKS_SCHEMA = {"schemaName": "clicks", "dimensionFieldSpecs": [
    {"name": "id", "dataType": "LONG"}, {"name": "user", "dataType": "LONG"}, {"name": "page", "dataType": "STRING"}]}
CLICKS = [{"id": i, "user": (i * 7919) % 613, "page": f"p{i % 5}"} for i in range(1200)]


@pytest.fixture(scope="module", params=["arrow views", "duckdb copies"])
def cluster(request: pytest.FixtureRequest) -> Iterator[InProcessCluster]:
    """Committed segments read as Arrow views, or from the servers' DuckDB copies (their own databases, which
    must offer the sketch functions too)."""
    copies = request.param == "duckdb copies"
    server = {"native_copy_bytes": 64 << 20, "native_copy_min_rows": 1, "native_copy_min_idle_seconds": 0} \
        if copies else {"native_copy_bytes": 0}
    with tempfile.TemporaryDirectory(prefix="cuvee-distinct-") as root, \
            InProcessCluster(Path(root), servers=3, server=server) as running:
        running.add_schema(VISITS_SCHEMA)
        running.add_table(VISITS_TABLE)
        for i, rows in enumerate(by_partition(VISITS, VISITS_SCHEMA, VISITS_TABLE)):
            push_segment(running.http, running.controller_url, running.deep_store, VISITS_SCHEMA, VISITS_TABLE,
                         f"visits_{i}", rows)
        configs = running.realtime_table(CLICKS_SCHEMA, partitions=3, replicas=1, flush_rows=500)
        running.produce(configs, CLICKS, key_field="id")
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM visits") == VISITS.num_rows, 30)
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM clicks") == len(CLICKS), 30)
        if copies:  # every pushed segment's copy ready (a query lets the servers see them used)
            wait_until(lambda: running.scalar("SELECT COUNT(DISTINCT page) FROM visits") is not None and sum(
                server.natives.summary()[0].get("visits_OFFLINE", (0, 0))[0] for server in running.servers) == 4, 30)
        yield running


@pytest.fixture
def chosen(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per query, whether the broker sent the summed plan (``QueryPlan.disjoint``)."""
    return spy_summed_plans(monkeypatch)


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]]:
    answer = cluster.query(sql)
    assert not answer["exceptions"], answer["exceptions"]
    assert answer["numServersQueried"] >= 2
    return answer["resultTable"]["rows"]


def _oracle(sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.register("visits", VISITS)
    con.register("clicks", pa.Table.from_pylist(CLICKS))
    return [list(row) for row in con.sql(sql).fetchall()]


@pytest.mark.parametrize("sql, summed", [
    ("SELECT COUNT(DISTINCT userId) FROM visits", True),
    ("SELECT page, COUNT(DISTINCT userId) FROM visits GROUP BY page ORDER BY page LIMIT 20", True),
    ("SELECT COUNT(DISTINCT userId) FROM visits WHERE ms > 500", True),
    ("SELECT COUNT(DISTINCT page) FROM visits", False),  # not the partition column: values shipped
])
def test_a_partitioned_tables_distinct_counts_are_exact(cluster: InProcessCluster, chosen: list[bool], sql: str,
                                                        summed: bool) -> None:
    assert _rows(cluster, sql) == _oracle(sql)
    assert chosen == [summed]


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(DISTINCT user) FROM clicks",
    "SELECT page, COUNT(DISTINCT user) FROM clicks GROUP BY page ORDER BY page LIMIT 20",
    "SELECT COUNT(DISTINCT user), COUNT(DISTINCT page) FROM clicks WHERE id % 3 = 0",
])
def test_a_realtime_tables_distinct_counts_over_servers_are_exact(cluster: InProcessCluster, chosen: list[bool],
                                                                 sql: str) -> None:
    segments = cluster.ideal_state("clicks_REALTIME")
    assert "CONSUMING" in {state for replicas in segments.values() for state in replicas.values()}
    assert _rows(cluster, sql.replace("user", '"user"')) == _oracle(sql.replace("user", '"user"'))
    assert chosen == [False]


def test_sketches_over_servers_are_within_their_error(cluster: InProcessCluster) -> None:
    [[hll, theta, kll]] = _rows(cluster, 'SELECT DISTINCTCOUNTHLL("user", 12), DISTINCTCOUNTTHETASKETCH("user"), '
                                         "PERCENTILEKLL(id, 50) FROM clicks")
    assert abs(hll - 613) <= 4 * 1.04 / 64 * 613
    assert theta == 613  # below the nominal entries a Theta sketch is exact
    assert abs(kll - 600) <= 1200 * 0.04


def test_explain_shows_the_summed_distinct_count(cluster: InProcessCluster) -> None:
    answer = cluster.query("EXPLAIN PLAN FOR SELECT COUNT(DISTINCT userId) FROM visits")
    assert not answer["exceptions"], answer["exceptions"]
    rows = answer["resultTable"]["rows"]
    servers = [row[0] for row in rows if row[0].startswith("SERVER_AGGREGATE")]
    assert servers and 'count(DISTINCT "userId")' in servers[0] and "list(" not in servers[0]
