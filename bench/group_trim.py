"""What the server-side group trim saves, in one process: CPU time, groups and bytes a server sends.

For each chosen ClickBench query over the generated ``hits`` rows (``--rows``), one server's step (all rows as its
segments), the Arrow IPC answer both ways, and the broker's merge run with and without the server's bound on its
groups (``cuvee.query.execute.keep_groups`` with Pinot's defaults: numGroupsLimit 100,000, minServerGroupTrimSize
5,000), alternately, ``--repeat`` times each. Printed: medians of CPU time (``time.process_time``: DuckDB's threads
included, and far less disturbed than wall time by other work on a shared machine) and wall time, and the groups
and bytes the server sends. No cluster, no HTTP: ``bench/compat.py`` measures those end to end.

    .venv/bin/python bench/group_trim.py [--rows 1000000] [--queries 18,31,32,33] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import pyarrow as pa

from cuvee.protocol.query import ServerQueryStats, decode_response, encode_response
from cuvee.query import QueryPlan, TableInfo, merge_partials, plan_sql
from cuvee.query.execute import keep_groups, run_sql, sandboxed_cursor
from cuvee.query.group_trim import DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE, DEFAULT_NUM_GROUPS_LIMIT
from cuvee.query.rewrite import SERVER_RELATION
from cuvee.testing.compat.queries import CLICKBENCH, clickbench_queries
from cuvee.testing.compat.run import generated


@dataclass(frozen=True)
class Run:
    cpu_ms: float
    wall_ms: float
    groups: int
    bytes: int


def one_query(plan: QueryPlan, rows: pa.Table, bounded: bool) -> Run:
    """Server step, IPC encode and decode, broker merge; the server's groups bounded or not."""
    cpu, wall = time.process_time(), time.perf_counter()
    read = [name for name in rows.schema.names if f'"{name}"' in plan.server_sql] or rows.schema.names[:1]
    partial = run_sql(plan.server_sql, SERVER_RELATION, rows.select(read))  # the server reads only these columns
    if plan.docs_column is not None:
        partial = partial.drop_columns([plan.docs_column])
    if bounded and plan.group_trim is not None:
        con = sandboxed_cursor(partial.num_rows)
        try:
            partial = keep_groups(con, partial, plan.group_trim, DEFAULT_NUM_GROUPS_LIMIT,
                                  DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE)[0]
        finally:
            con.close()
    body = encode_response(partial, ServerQueryStats())
    received, _ = decode_response(body)
    assert received is not None
    merge_partials(plan, [received], rows.schema)
    return Run((time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000, partial.num_rows, len(body))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", default="18,31,32,33", help="comma-separated ClickBench query numbers")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = generated(CLICKBENCH, args.rows)
    info = TableInfo("hits", tuple(rows.schema.names))
    by_id = {query.id: query for query in clickbench_queries()}
    print(f"hits: {args.rows:,} rows; medians of {args.repeat}")
    for number in (int(n) for n in args.queries.split(",") if n.strip()):
        query = by_id[f"clickbench-{number:03d}"]
        plan = plan_sql(query.sql, lambda _: info)
        runs: dict[bool, list[Run]] = {False: [], True: []}
        for _ in range(args.repeat):
            for bounded in (False, True):  # alternately, so both see the same machine
                runs[bounded].append(one_query(plan, rows, bounded))
        for bounded in (False, True):
            done = runs[bounded]
            print(f"{query.id} {'bounded' if bounded else 'every group':11}  "
                  f"cpu {statistics.median(r.cpu_ms for r in done):7.0f} ms  "
                  f"wall {statistics.median(r.wall_ms for r in done):7.0f} ms  "
                  f"groups sent {done[0].groups:>9,}  bytes {done[0].bytes:>12,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
