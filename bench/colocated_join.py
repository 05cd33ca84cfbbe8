"""A join of two tables partitioned alike on its key: on the servers (colocated) against the broker's join.

``orders`` (``--rows`` rows) and ``customers`` (``--customers`` rows), both partitioned on ``customerId``
(Murmur, ``--partitions`` partitions, one segment per partition and table), are served by an in-process cluster
of ``--servers`` servers. Each query runs once to warm up, then ``--runs`` times as written (the join runs on the
servers) and with its ON equality written as ``o.customerId || '' = c.customerId`` (the same answer, but no longer
an equality of the two partition columns: the broker fetches both tables' rows and joins them). Printed: the
broker's ``timeUsedMs`` medians of both forms and their ratio.

    .venv/bin/python bench/colocated_join.py [--rows 1000000] [--customers 100000] [--servers 2] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.partitioned import (CUSTOMERS_SCHEMA, ORDERS_SCHEMA, by_partition, partitioned_table,
                                       push_segment)
from cuvee.testing.waiting import wait_until

QUERIES = [
    "SELECT c.region, SUM(o.amount), COUNT(*) FROM orders o JOIN customers c ON {on} GROUP BY c.region "
    "ORDER BY c.region",
    "SELECT COUNT(*) FROM orders o JOIN customers c ON {on} WHERE c.tier = 'gold' AND o.status = 'paid'",
]
COLOCATED = "o.customerId = c.customerId"
AT_THE_BROKER = "o.customerId || '' = c.customerId"


def _rows(orders: int, customers: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(7)
    ids = np.array([f"c{i}" for i in range(customers)], dtype=object)
    order_rows = pa.table({"customerId": pa.array(ids[rng.integers(0, customers, orders)], pa.string()),
                           "status": pa.array(np.array(["open", "paid", "void"], dtype=object)[
                               rng.integers(0, 3, orders)], pa.string()),
                           "amount": pa.array(rng.random(orders) * 100)})
    customer_rows = pa.table({"customerId": pa.array(ids, pa.string()),
                              "region": pa.array([("north", "south", "east", "west")[i % 4] for i in range(customers)]),
                              "tier": pa.array([("gold", "silver", "bronze")[i % 3] for i in range(customers)])})
    return order_rows, customer_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--customers", type=int, default=100_000)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    console = Console(width=140)
    orders, customers = _rows(args.rows, args.customers)
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-colocated-") as tmp, \
            InProcessCluster(Path(tmp), servers=args.servers,
                             broker={"multistage_leaf_rows": 10_000_000, "multistage_memory_mb": 8192}) as cluster:
        for schema, name, rows in ((ORDERS_SCHEMA, "orders", orders), (CUSTOMERS_SCHEMA, "customers", customers)):
            table = partitioned_table(name, "customerId", args.partitions)
            cluster.add_schema(schema)
            cluster.add_table(table)
            for i, part in enumerate(by_partition(rows, schema, table)):
                push_segment(cluster.http, cluster.controller_url, cluster.deep_store, schema, table, f"{name}_{i}",
                             part)
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM orders") == args.rows, 300)
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM customers") == args.customers, 300)
        shown = Table(title=f"{args.rows:,} orders x {args.customers:,} customers, {args.servers} servers, "
                            f"medians of {args.runs}")
        for column in ("query", "colocated ms", "broker join ms", "speed-up"):
            shown.add_column(column, justify="left" if column == "query" else "right")
        for query in QUERIES:
            times = []
            for on in (COLOCATED, AT_THE_BROKER):
                sql = query.format(on=on)
                first = cluster.query(sql)
                assert not first.get("exceptions"), first["exceptions"]
                times.append(statistics.median(cluster.query(sql)["timeUsedMs"] for _ in range(args.runs)))
            shown.add_row(query.format(on="…")[:70], f"{times[0]:.0f}", f"{times[1]:.0f}",
                          f"{times[1] / max(times[0], 1):.1f}x")
        console.print(shown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
