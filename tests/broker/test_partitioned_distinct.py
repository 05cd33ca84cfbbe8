"""Distinct counts summed over servers (``cuvee.broker.partitioned_distinct``): the summed plan is chosen only when
the routing proves no value of the counted column is on two servers asked, and then answers the exact count."""

from __future__ import annotations

import dataclasses

import duckdb
import pyarrow as pa
import pytest

from cuvee.broker.cluster_view import TableEntry
from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.partitioned_distinct import disjoint_plan
from cuvee.broker.routing import RoutingTable
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.protocol.query import TimeFilter
from cuvee.query import TableInfo, merge_partials, plan_sql, run_server_step
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions, partitions

ON = SegmentState.ONLINE
SPEC = PartitionSpec("k", "Modulo", 4)
SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string())])
INFO = TableInfo("t", ("k", "g"))
SQL = "SELECT COUNT(DISTINCT k), DISTINCTCOUNT(g), COUNT(*) FROM t"


def _entry(parts: dict[str, tuple[int, ...] | None], spec: PartitionSpec | None = SPEC) -> TableEntry:
    view = ExternalView("t_OFFLINE", {s: {"a": ON} for s in parts})
    recorded = {s: None if p is None else SegmentPartitions("k", "Modulo", 4, p) for s, p in parts.items()}
    return TableEntry("t_OFFLINE", INFO, SCHEMA, view, partition_spec=spec, partitions=recorded)


PARTS: dict[str, tuple[int, ...] | None] = {"s0": (0,), "s0b": (0,), "s1": (1, 2), "s3": (3,), "empty": ()}
ROUTING = RoutingTable({"a": ("s0", "s0b", "empty"), "b": ("s1", "s3")})


def test_distinct_counts_of_the_partition_column_are_summed_when_each_partition_is_on_one_server() -> None:
    plan = plan_sql(SQL, lambda _: INFO)
    chosen = disjoint_plan(plan, [QueryTarget(_entry(PARTS))], [ROUTING])
    assert chosen is plan.disjoint["k"]
    assert "count(DISTINCT \"k\")" in chosen.server_sql and "list(DISTINCT \"g\")" in chosen.server_sql


def test_a_hybrid_tables_halves_are_summed_when_no_partition_is_read_by_both() -> None:
    # a value is in one partition, each partition in one request (a half's server): each counted once
    plan = plan_sql(SQL, lambda _: INFO)
    half = QueryTarget(_entry(PARTS), TimeFilter("ts", "<=", 5))
    assert disjoint_plan(plan, [half], [ROUTING]) is plan.disjoint["k"]  # the other half held nothing
    realtime = dataclasses.replace(_entry({"rt3": PARTS["s3"]}), name="t_REALTIME")
    assert disjoint_plan(plan, [half, QueryTarget(realtime)], [RoutingTable({"a": ("s0", "s1")}),
                                                                RoutingTable({"b": ("rt3",)})]) is plan.disjoint["k"]
    offline_only = RoutingTable({"a": ("s0", "s3")})  # partition 3 in the offline half's request too
    assert disjoint_plan(plan, [half, QueryTarget(realtime)], [offline_only, RoutingTable({"a": ("rt3",)})]) is plan


def test_anything_short_of_proof_keeps_the_plan_that_ships_values() -> None:
    plan = plan_sql(SQL, lambda _: INFO)
    target = QueryTarget(_entry(PARTS))
    split = RoutingTable({"a": ("s0", "empty"), "b": ("s0b", "s1", "s3")})  # partition 0 on two servers
    assert disjoint_plan(plan, [target], [split]) is plan
    unknown = QueryTarget(_entry({**PARTS, "s3": None}))  # a segment without partition metadata
    assert disjoint_plan(plan, [unknown], [ROUTING]) is plan
    other = dataclasses.replace(_entry(PARTS), partition_spec=PartitionSpec("k", "Murmur", 4))  # another function
    assert disjoint_plan(plan, [QueryTarget(other)], [ROUTING]) is plan
    by_g = dataclasses.replace(_entry(PARTS), partition_spec=PartitionSpec("g", "Modulo", 4))
    assert disjoint_plan(plan, [QueryTarget(by_g)], [ROUTING]) is plan  # recorded for k, not g
    assert disjoint_plan(plan, [QueryTarget(_entry(PARTS, None))], [ROUTING]) is plan  # not partitioned
    half = QueryTarget(_entry(PARTS), TimeFilter("ts", "<=", 5))  # a hybrid table's two halves
    assert disjoint_plan(plan, [half, half], [ROUTING, ROUTING]) is plan  # each partition in two requests
    alike = RoutingTable({"a": ("s0",), "b": ("s1",)})
    assert disjoint_plan(plan, [half, half], [ROUTING, alike]) is plan  # partitions 0 and 1 in both halves
    plain = plan_sql("SELECT COUNT(DISTINCT g) FROM t", lambda _: INFO)
    assert disjoint_plan(plain, [target], [ROUTING]) is plain  # g is not the partition column


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(DISTINCT k), DISTINCTCOUNT(g), COUNT(*) FROM t",
    "SELECT g, COUNT(DISTINCT k) AS c FROM t GROUP BY g ORDER BY g LIMIT 100",
    "SELECT COUNT(DISTINCT k) FROM t WHERE k % 5 <> 0",
    "SELECT g, DISTINCTCOUNT(k) FROM t GROUP BY g HAVING DISTINCTCOUNT(k) > 3 ORDER BY 1 LIMIT 100",
])
def test_the_summed_counts_over_partitioned_servers_are_duckdbs_exact_answer(sql: str) -> None:
    keys = pa.array([(i * 7919) % 500 for i in range(4000)] + [None] * 7, pa.int64())
    rows = pa.table({"k": keys, "g": [f"g{i % 9}" for i in range(len(keys))]}, schema=SCHEMA)
    of = partitions(keys, PartitionSpec("k", "Modulo", 4, 0))
    servers = [rows.filter(pa.array((of == 0) | (of == 3))), rows.filter(pa.array(of == 1)),
               rows.filter(pa.array(of == 2))]
    plan = plan_sql(sql, lambda _: INFO)
    summed = plan.disjoint["k"]
    got = merge_partials(summed, [run_server_step(summed, [part]) for part in servers], SCHEMA)
    shipped = merge_partials(plan, [run_server_step(plan, [part]) for part in servers], SCHEMA)
    con = duckdb.connect()
    con.register("t", rows)
    want = con.sql(sql.replace("DISTINCTCOUNT(", "COUNT(DISTINCT ")).fetchall()
    assert [tuple(row.values()) for row in got.to_pylist()] == want
    assert got.to_pylist() == shipped.to_pylist() and got.schema == shipped.schema
