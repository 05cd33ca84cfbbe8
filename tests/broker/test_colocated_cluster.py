"""Colocated joins on a live in-process cluster: two OFFLINE tables partitioned alike on the join key (3 servers,
4 partitions, one table pushed as archives and the other by metadata), placed partition by partition on the same
servers, joined on the servers (only joined rows reach the broker) and answering as DuckDB's join over the same
rows; a join the servers cannot answer (another key, a segment spanning partitions) is the broker's join, with the
same answer. The tests run in file order over one cluster (the last one pushes a segment of mixed partitions)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.partitioned import (CUSTOMERS_SCHEMA, ORDERS_SCHEMA, by_partition, partitioned_table,
                                       push_segment)
from cuvee.testing.waiting import wait_until

PARTITIONS = 4
SCHEMAS = {"orders": ORDERS_SCHEMA, "customers": CUSTOMERS_SCHEMA}
TABLES = {name: partitioned_table(name, "customerId", PARTITIONS) for name in SCHEMAS}

CUSTOMER_IDS = [f"c{i}" for i in range(30)]
ORDERS = pa.table({
    "customerId": [CUSTOMER_IDS[(i * 7) % 29] for i in range(200)] + ["nobody"] * 5,  # c29 never orders
    "status": [("open", "paid", "void")[i % 3] for i in range(205)],
    "amount": pa.array([float(i % 17) for i in range(205)])})
CUSTOMERS = pa.table({
    "customerId": CUSTOMER_IDS,
    "region": [("north", "south", "east")[i % 3] for i in range(30)],
    "tier": [("gold", "silver")[i % 2] for i in range(30)]})


def _push(cluster: InProcessCluster, table: str, segment: str, rows: pa.Table, *, metadata: bool) -> None:
    push_segment(cluster.http, cluster.controller_url, cluster.deep_store, SCHEMAS[table], TABLES[table], segment,
                 rows, metadata=metadata)


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with tempfile.TemporaryDirectory(prefix="cuvee-colocated-cluster-") as root, \
            InProcessCluster(Path(root), servers=3) as running:
        for name in SCHEMAS:
            running.add_schema(SCHEMAS[name])
            running.add_table(TABLES[name])
        for i, rows in enumerate(by_partition(ORDERS, ORDERS_SCHEMA, TABLES["orders"])):  # partition 0: 2 segments
            halves = [rows.slice(0, rows.num_rows // 2), rows.slice(rows.num_rows // 2)] if i == 0 else [rows]
            for j, half in enumerate(halves):
                _push(running, "orders", f"orders_{i}_{j}", half, metadata=False)
        for i, rows in enumerate(by_partition(CUSTOMERS, CUSTOMERS_SCHEMA, TABLES["customers"])):
            _push(running, "customers", f"customers_{i}", rows, metadata=True)
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM orders") == ORDERS.num_rows, 30)
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM customers") == CUSTOMERS.num_rows, 30)
        yield running


def _oracle(sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.register("orders", ORDERS)
    con.register("customers", CUSTOMERS)
    return [list(row) for row in con.sql(sql).fetchall()]


def _answer(cluster: InProcessCluster, sql: str) -> dict[str, Any]:
    answer = cluster.query(sql)
    assert not answer.get("exceptions"), answer["exceptions"]
    return answer


def test_segments_of_one_partition_of_both_tables_share_their_server(cluster: InProcessCluster) -> None:
    where: dict[int, set[str]] = {}
    for table in ("orders_OFFLINE", "customers_OFFLINE"):
        ideal = cluster.ideal_state(table)
        for segment, replicas in ideal.get("OFFLINE", ideal).items():
            record = cluster.segment_metadata(table, segment)
            partition = record["partitionMetadata"]["partitions"]
            assert record["partitionMetadata"]["functionName"] == "Murmur" and len(partition) == 1
            where.setdefault(partition[0], set()).update(replicas)
    assert len(where) == PARTITIONS and all(len(servers) == 1 for servers in where.values())
    assert len(set.union(*where.values())) == 3  # the partitions spread over every server


@pytest.mark.parametrize("sql", [
    "SELECT c.region, SUM(o.amount) AS total, COUNT(*) FROM orders o JOIN customers c "
    "ON o.customerId = c.customerId WHERE c.tier = 'gold' GROUP BY c.region ORDER BY c.region",
    "SELECT o.status, COUNT(*) FROM orders o LEFT JOIN customers c ON o.customerId = c.customerId "
    "WHERE c.customerId IS NULL GROUP BY o.status ORDER BY o.status",
    "SELECT COUNT(*) FROM orders JOIN customers ON customers.customerId = orders.customerId",
])
def test_a_join_on_the_partition_key_runs_on_the_servers_and_answers_as_the_join(cluster: InProcessCluster,
                                                                                  sql: str) -> None:
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(sql)
    assert answer["numServersQueried"] == 3  # one request per server holding partitions: no table-wide leaves


def test_only_the_joined_rows_are_scanned_into_the_broker(cluster: InProcessCluster) -> None:
    sql = ("SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
           "WHERE c.region = 'north' AND o.status = 'paid'")
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(sql)
    # the servers scanned the orders' rows (their numDocsScanned), and sent only joined ones
    assert answer["numDocsScanned"] == ORDERS.num_rows


def test_a_join_on_another_column_is_the_brokers_and_answers_the_same(cluster: InProcessCluster) -> None:
    sql = "SELECT COUNT(*) FROM orders o JOIN customers c ON o.status = c.tier"  # no partition key: no push down
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(sql)
    assert answer["numServersQueried"] == 6  # each table read as a leaf of its own from every server


def test_joined_rows_over_the_leaf_bound_fall_back_to_the_brokers_join(cluster: InProcessCluster) -> None:
    """A self-join multiplies rows: more joined rows than ``multistage_leaf_rows`` would be refused, but each
    side's filtered rows fit, so the broker joins them instead, with the statistics of that run alone."""
    sql = ("SELECT COUNT(*) FROM orders o1 JOIN orders o2 ON o1.customerId = o2.customerId "
           "WHERE o1.status = 'paid' AND o2.status = 'void'")
    expected = _oracle(sql)
    handler = cluster.broker.handler
    original = handler.config
    assert expected[0][0] > 100 and ORDERS.num_rows > 100  # joined rows over the bound, each side's under it
    try:
        handler.config = dataclasses.replace(original, multistage_leaf_rows=100)
        answer = _answer(cluster, sql)
    finally:
        handler.config = original
    assert answer["resultTable"]["rows"] == expected
    assert answer["numServersQueried"] == 6  # the two leaves of the broker's join, not the failed attempt too


def test_a_segment_spanning_partitions_makes_the_broker_join(cluster: InProcessCluster) -> None:
    mixed = pa.table({"customerId": ["c1", "c2", "c3", "c4"], "status": ["late"] * 4,
                      "amount": pa.array([100.0] * 4)})
    _push(cluster, "orders", "orders_mixed", mixed, metadata=False)
    wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM orders") == ORDERS.num_rows + 4, 30)
    sql = ("SELECT c.region, SUM(o.amount) FROM orders o JOIN customers c ON o.customerId = c.customerId "
           "GROUP BY c.region ORDER BY c.region")
    answer = _answer(cluster, sql)
    con = duckdb.connect()
    con.register("orders", pa.concat_tables([ORDERS, mixed]))
    con.register("customers", CUSTOMERS)
    assert answer["resultTable"]["rows"] == [list(r) for r in con.sql(sql).fetchall()]
    assert answer["numServersQueried"] == 6
