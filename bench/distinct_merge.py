"""What distinct counts and sketches cost over two servers, in one process: each way of answering, step by step.

The generated ClickBench ``hits`` rows (``--rows``) are split over two "servers": by halves (every UserID may be on
both) and by ``UserID % 2`` (each UserID on one: what ``QueryPlan.disjoint`` sums). For each query and way, the
two server steps (run one after the other), their Arrow IPC answers encoded and decoded, and the broker's merge,
``--repeat`` times; printed: medians of CPU time per step (``time.process_time``: DuckDB's and Arrow's threads
included, far less disturbed than wall time by other work on a shared machine) and the bytes both servers send. No cluster, no HTTP
(``bench/compat.py`` measures those end to end). The ways:

- ``lists, SQL merge``: each server's distinct values, merged by the final SQL (the only way before issue 28);
- ``lists, Arrow merge``: the same lists, a one-row count merged in Arrow (``QueryPlan.simple_merge``);
- ``summed``: each server's ``count(DISTINCT)``, summed (rows split by UserID % 2);
- ``sketch``: DISTINCTCOUNTHLL's sketches (``cuvee.query.sketches``), against its former exact lists.

    .venv/bin/python bench/distinct_merge.py [--rows 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import pyarrow as pa
import pyarrow.compute as pc

from cuvee.protocol.query import ServerQueryStats, decode_response, encode_response
from cuvee.query import QueryPlan, TableInfo, merge_partials, plan_sql, run_server_step
from cuvee.testing.compat.queries import CLICKBENCH
from cuvee.testing.compat.run import generated

COUNT = "SELECT COUNT(DISTINCT UserID) FROM hits"
GROUPED = "SELECT RegionID, COUNT(DISTINCT UserID) AS u FROM hits GROUP BY RegionID ORDER BY u DESC LIMIT 10"
HLL = "SELECT DISTINCTCOUNTHLL(UserID) FROM hits"
EXACT_HLL = "SELECT DISTINCTCOUNTSMARTHLL(UserID) FROM hits"  # still answered from lists: the former HLL's cost


def run(plan: QueryPlan, servers: list[pa.Table]) -> tuple[float, float, float, int, object]:
    """(server ms, IPC ms, merge ms, bytes, answer) for one query over the servers' rows, in CPU time."""
    started = time.process_time()
    partials = [run_server_step(plan, [rows]) for rows in servers]
    served = time.process_time()
    bodies = [encode_response(partial, ServerQueryStats()) for partial in partials]
    received = [decode_response(body)[0] for body in bodies]
    shipped = time.process_time()
    answer = merge_partials(plan, [r for r in received if r is not None], servers[0].schema)
    merged = time.process_time()
    return ((served - started) * 1000, (shipped - served) * 1000, (merged - shipped) * 1000,
            sum(len(body) for body in bodies), answer.column(answer.num_columns - 1)[0].as_py())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = generated(CLICKBENCH, args.rows).select(["UserID", "RegionID"])
    info = TableInfo("hits", tuple(rows.schema.names))
    halves = [rows.slice(0, rows.num_rows // 2), rows.slice(rows.num_rows // 2)]
    odd = pc.equal(pc.bit_wise_and(rows.column("UserID"), 1), 1)
    by_user = [rows.filter(pc.invert(odd)), rows.filter(odd)]
    print(f"hits: {args.rows:,} rows, {len(pc.unique(rows.column('UserID'))):,} distinct UserIDs, 2 servers; "
          f"medians of {args.repeat} (CPU ms)")
    count, grouped = plan_sql(COUNT, lambda _: info), plan_sql(GROUPED, lambda _: info)
    ways = [
        ("COUNT(DISTINCT)", "lists, SQL merge", dataclasses.replace(count, simple_merge=None), halves),
        ("COUNT(DISTINCT)", "lists, Arrow merge", count, halves),
        ("COUNT(DISTINCT)", "summed", count.disjoint["UserID"], by_user),
        ("GROUP BY Region", "lists, SQL merge", grouped, halves),
        ("GROUP BY Region", "summed", grouped.disjoint["UserID"], by_user),
        ("DISTINCTCOUNTHLL", "lists (before)", plan_sql(EXACT_HLL, lambda _: info), halves),
        ("DISTINCTCOUNTHLL", "sketch", plan_sql(HLL, lambda _: info), halves),
    ]
    results: dict[int, list[tuple[float, float, float, int, object]]] = {i: [] for i in range(len(ways))}
    for _ in range(args.repeat):
        for i, (_, _, plan, servers) in enumerate(ways):  # alternately, so every way sees the same machine
            results[i].append(run(plan, servers))
    print(f"{'query':17} {'way':19} {'servers':>8} {'IPC':>6} {'merge':>6} {'total':>7} {'bytes':>11}  answer")
    for i, (query, way, _, _) in enumerate(ways):
        done = results[i]
        server, ipc, merge = (statistics.median(r[k] for r in done) for k in range(3))  # type: ignore[misc]
        print(f"{query:17} {way:19} {server:8.1f} {ipc:6.1f} {merge:6.1f} {server + ipc + merge:7.1f} "
              f"{done[0][3]:11,}  {done[0][4]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
