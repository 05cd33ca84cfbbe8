"""The external query sets at size: every query judged right or not, and Cuvee's time against DuckDB's.

A cluster (``--servers``, default 1; each role in a process of its own as deployed, or with ``--in-process``
every role in this process, sharing its GIL) serves the generated rows (``--rows`` per table, default
1,000,000, in ``--segments`` offline segments); DuckDB holds the same rows in its own tables (in memory, or with
``--duckdb-file`` in a database file), which also judge every answer. Each query runs once to warm
up, then ``--repeat`` times on each side; the figures are the medians: Cuvee's broker ``timeUsedMs`` and DuckDB's
wall time for the same question (the set's oracle text) over the same rows loaded into its own tables (a DuckDB
user's setup; DuckDB scanning the Arrow tables in memory pays per column of a wide table and would flatter Cuvee).
Printed: every query's verdict, both times and their ratio, and per set the geometric mean of the ratios (issue
10's target: ≤ 1.5× at 1M rows, ≤ 1.2× at 10M).

    .venv/bin/python bench/compat.py [--rows 1000000] [--set clickbench|pinot|all] [--repeat 3] [--queries 31,32]
                                     [--native-copy-mib 4096] [--in-process] [--duckdb-file]

``--queries`` runs only the listed queries of each set (numbers, or ids such as ``clickbench-031``), so one slow
question can be measured at size in minutes.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from cuvee.testing.cluster import Endpoints, bench_cluster
from cuvee.testing.compat.judge import Verdict, oracle_sql, shape_of
from cuvee.testing.compat.queries import CLICKBENCH, PINOT, clickbench_queries, pinot_queries
from cuvee.testing.compat.run import ask, generated, judge_all, load
from cuvee.testing.waiting import wait_until


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--set", choices=["clickbench", "pinot", "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", default="", help="comma-separated query numbers or ids (default: every one)")
    parser.add_argument("--native-copy-mib", type=int, default=None,
                        help="the servers' native_copy_bytes in MiB: segments copied into DuckDB database files "
                             "(default: the servers' default, 4096; 0 = none)")
    parser.add_argument("--in-process", action="store_true", help="every role in this process (shares the GIL)")
    parser.add_argument("--duckdb-file", action="store_true",
                        help="DuckDB's tables in a database file (its buffer pool caches them; for 10M rows, whose "
                             "in-memory tables and the cluster's copies pass 24 GB) instead of in memory")
    args = parser.parse_args()
    wanted = {item.strip() for item in args.queries.split(",") if item.strip()}
    suites = [CLICKBENCH, PINOT] if args.set == "all" else [args.set]
    console = Console(width=160)
    # generated before the cluster starts: at 10M rows the generation holds the GIL for a minute, and the roles'
    # metadata sessions expired under it (a controller lost its leadership mid-setup)
    generated_rows = {suite: generated(suite, args.rows) for suite in suites}
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-compat-") as tmp, \
            bench_cluster(Path(tmp), args.servers, in_process=args.in_process,
                          server={} if args.native_copy_mib is None else
                          {"native_copy_bytes": args.native_copy_mib << 20}) as roles, \
            httpx.Client(timeout=600) as http:
        # the timing baseline and the judge: the same rows in DuckDB's own tables (a DuckDB user's setup)
        native = duckdb.connect(str(Path(tmp) / "baseline.duckdb") if args.duckdb_file else ":memory:")
        for suite in suites:
            started = time.perf_counter()
            rows = generated_rows.pop(suite)
            name = "hits" if suite == CLICKBENCH else "mytable"
            load(http, roles.controller, suite, rows, args.segments)
            native.register(f"{name}_arrow", rows)
            native.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
            native.unregister(f"{name}_arrow")
            del rows  # DuckDB and the cluster hold the rows now: at 10M rows a copy less is 7 GB
            gc.collect()
            wait_until(lambda: _count(http, roles, name) == args.rows, 600)
            console.print(f"{name}: {args.rows:,} rows in {args.segments} segments, loaded in "
                          f"{time.perf_counter() - started:.1f} s")
        for suite in suites:
            queries = [q for q in (clickbench_queries() if suite == CLICKBENCH else pinot_queries())
                       if _chosen(q.id, wanted)]
            verdicts = {o.query_id: o for o in judge_all(http, roles.broker, native, queries)}
            # the judging run asked for the segments' DuckDB copies (--native-copy-mib): timed once they are made
            wait_until(lambda: _copies_building(http, roles) == 0, 600)
            table = Table(title=f"{suite}: {args.rows:,} rows, medians of {args.repeat}")
            for column in ("query", "verdict", "cuvee ms", "duckdb ms", "ratio"):
                table.add_column(column, justify="right" if column.endswith(("ms", "ratio")) else "left")
            ratios = []
            for query in queries:
                outcome = verdicts[query.id]
                if outcome.verdict is not Verdict.PASS:
                    table.add_row(query.id, outcome.verdict.value, "", "", outcome.detail[:60])
                    continue
                limited = shape_of(query.sql, oracle_sql(query.id, query.oracle_sql)).limited_sql
                cuvee, duck = [], []
                for _ in range(args.repeat):
                    cuvee.append(ask(http, roles.broker, query.sql).used_ms)
                    began = time.perf_counter()
                    native.execute(limited).fetchall()
                    duck.append((time.perf_counter() - began) * 1000)
                c, d = statistics.median(cuvee), max(statistics.median(duck), 0.01)
                ratios.append(max(c, 0.01) / d)
                table.add_row(query.id, "pass", f"{c:.1f}", f"{d:.1f}", f"{c / d:.2f}")
            console.print(table)
            passed = sum(o.verdict is Verdict.PASS for o in verdicts.values())
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
            console.print(f"{suite}: {passed}/{len(queries)} right; geometric mean of Cuvee/DuckDB = {mean:.2f}x")
    return 0


def _count(http: httpx.Client, roles: Endpoints, table: str) -> int | None:
    rows = ask(http, roles.broker, f"SELECT COUNT(*) FROM {table}").rows
    return rows[0][0] if rows else None


def _copies_building(http: httpx.Client, roles: Endpoints) -> float:
    """DuckDB copies asked for and not made yet, over every server (their metrics)."""
    return sum(sample.value for server in roles.servers
               for family in text_string_to_metric_families(http.get(f"{server}/metrics").text)
               if family.name == "cuvee_server_native_copies_building" for sample in family.samples)


def _chosen(query_id: str, wanted: set[str]) -> bool:
    """Every query when none is named; else those named by id or by number (``31`` is ``clickbench-031``)."""
    if not wanted:
        return True
    number = query_id.rsplit("-", 1)[-1]
    return query_id in wanted or any(w.isdigit() and number.isdigit() and int(w) == int(number) for w in wanted)


if __name__ == "__main__":
    raise SystemExit(main())
