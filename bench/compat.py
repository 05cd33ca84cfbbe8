"""The external query sets at size, in the shapes users run: every answer judged, Cuvee's time against DuckDB's.

A cluster of ``--servers`` servers (each role in a process of its own, as deployed; ``--in-process``: every role
in this process, sharing its GIL) serves the generated rows (``--rows`` per table) in one of three shapes
(``--table-type``, ``cuvee/testing/compat/shapes.py``):

- ``offline``: pushed as ``--segments`` OFFLINE segments (the kindest shape: every segment committed);
- ``realtime``: produced through the stream (the embedded log, ``--partitions`` partitions, JSON rows) into a
  REALTIME table whose ``realtime.segment.flush.threshold.rows`` leaves at least 10% of the rows in consuming
  segments (the figure chosen, and the rows left consuming, are printed);
- ``hybrid``: the older half by the time column pushed OFFLINE, the rest produced REALTIME, split by the broker's
  time boundary (only Pinot's set: ClickBench's ``hits`` has no epoch time column, so no boundary).

``--replicas`` gives each segment (and partition) that many replicas; ``--partition-column`` keys the realtime rows
by a column and declares the table partitioned on it (Pinot's ``segmentPartitionConfig``, Murmur). DuckDB holds the same rows in its own tables
in memory (``--duckdb-file``: in a database file), the judge of every answer and the timing baseline (a DuckDB
user's setup; DuckDB scanning Arrow tables would flatter Cuvee).

Each set is measured twice: **fresh**, as soon as the broker counts every row (consuming segments holding the
newest rows, no DuckDB copy made yet), and **settled**, once the servers report no DuckDB copy still being made
(``cuvee_server_native_copies_building``) after every segment the rows fill has committed and every query has
run once more (asking for the copies of what committed late). In each phase every query is
judged against DuckDB (that run is its warm-up; a wrong answer is printed in red, never timed, and makes the
bench exit 1), then run ``--repeat`` times alternating with DuckDB. Printed per query: the client's wall time
(Python's ``http.client``: HTTP included), the broker's ``timeUsedMs``, DuckDB's time and the ratio of wall time
to DuckDB's (medians), and the CPU ratio: the broker's and servers' processes' CPU time for the query (from
``/proc``, summed over the repeats) against DuckDB's (the bench process's, every thread) — what the roles cost
whatever the machine: with 3 servers and a broker on 2 cores, wall time follows CPU time; per phase the ratios'
geometric means and the worst, and ``SELECT COUNT(*)``'s p50 through the broker (``--count-runs`` runs). ``--json`` writes the figures (``run_all.py`` prints shapes side by side).

    .venv/bin/python bench/compat.py [--table-type offline|realtime|hybrid] [--servers 1] [--replicas 1]
        [--rows 1000000] [--set clickbench|pinot|all] [--repeat 3] [--queries 31,32] [--segments 8]
        [--partitions N] [--partition-column UserID] [--native-copy-mib 4096] [--in-process] [--duckdb-file] [--json out.json]

Issue 28's figures: ``--table-type realtime --servers 3 --set clickbench`` at 1M and 10M rows (``--rows 10000000
--segments 40 --native-copy-mib 8192``); ``--set pinot`` for Pinot's 200 queries. ``--queries`` runs only the
listed queries of each set (numbers, or ids such as ``clickbench-031``).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker_client import BrokerClient  # noqa: E402
from _compat_report import PHASES, Phase, Run, SetResult, Timing, summary_lines  # noqa: E402
from _proc import cpu_seconds  # noqa: E402

from cuvee.testing.cluster import Endpoints, bench_cluster  # noqa: E402
from cuvee.testing.compat.judge import Verdict, oracle_sql, shape_of  # noqa: E402
from cuvee.testing.compat.queries import CLICKBENCH, PINOT, CompatQuery, clickbench_queries, pinot_queries  # noqa: E402
from cuvee.testing.compat.run import ask, generated, judge_all  # noqa: E402
from cuvee.testing.compat.shapes import (CONSUMING_SHARE, ShapeUnavailable, TableShape,  # noqa: E402
                                         commits_done, load_shape, settled_layout)
from cuvee.testing.waiting import wait_until  # noqa: E402

TABLES = {CLICKBENCH: "hits", PINOT: "mytable"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table-type", choices=[s.value for s in TableShape], default=TableShape.OFFLINE.value)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=8,
                        help="offline segments (hybrid: half of them); realtime: about as many committed")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--replicas", type=int, choices=[1, 2], default=1)
    parser.add_argument("--partitions", type=int, default=0, help="stream partitions (default: one per server)")
    parser.add_argument("--partition-column", default=None,
                        help="realtime: key every row by this column and declare the table partitioned on it "
                             "(segmentPartitionConfig, Murmur; default: no key, round-robin)")
    parser.add_argument("--set", choices=[CLICKBENCH, PINOT, "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each query (0: only judged)")
    parser.add_argument("--count-runs", type=int, default=100, help="SELECT COUNT(*) runs for its p50")
    parser.add_argument("--queries", default="", help="comma-separated query numbers or ids (default: every one)")
    parser.add_argument("--native-copy-mib", type=int, default=None,
                        help="the servers' native_copy_bytes in MiB: segments copied into DuckDB database files "
                             "(default: the servers' default, 4096; 0 = none)")
    parser.add_argument("--settle-timeout", type=float, default=900, help="seconds to wait for the copies")
    parser.add_argument("--in-process", action="store_true", help="every role in this process (shares the GIL)")
    parser.add_argument("--duckdb-file", action="store_true",
                        help="DuckDB's tables in a database file (its buffer pool caches them; for 10M rows, whose "
                             "in-memory tables and the cluster's copies pass 24 GB) instead of in memory")
    parser.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.replicas > args.servers:
        parser.error(f"--replicas {args.replicas} needs at least as many servers (--servers {args.servers})")
    shape = TableShape(args.table_type)
    partitions = args.partitions or args.servers
    wanted = {item.strip() for item in args.queries.split(",") if item.strip()}
    suites = [CLICKBENCH, PINOT] if args.set == "all" else [args.set]
    console = Console(width=170)
    run = Run(shape.value, args.servers, args.replicas, args.rows, args.in_process)
    # generated before the cluster starts: at 10M rows the generation holds the GIL for a minute, and the roles'
    # metadata sessions expired under it (a controller lost its leadership mid-setup)
    generated_rows = {suite: generated(suite, args.rows) for suite in suites}
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-compat-") as tmp, \
            bench_cluster(Path(tmp), args.servers, in_process=args.in_process,
                          server={} if args.native_copy_mib is None else
                          {"native_copy_bytes": args.native_copy_mib << 20}) as roles, \
            httpx.Client(timeout=600) as http:
        console.print(f"{shape.value} table, {args.servers} server(s) "
                      f"({'one process' if args.in_process else 'a process per role'}), {args.replicas} replica(s)")
        # the timing baseline and the judge: the same rows in DuckDB's own tables (a DuckDB user's setup)
        native = duckdb.connect(str(Path(tmp) / "baseline.duckdb") if args.duckdb_file else ":memory:")
        client = BrokerClient(roles.broker)
        for suite in suites:
            result = run.sets.setdefault(suite, SetResult())
            rows = generated_rows.pop(suite)
            name = TABLES[suite]
            native.register(f"{name}_arrow", rows)
            native.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_arrow")
            native.unregister(f"{name}_arrow")
            started = time.perf_counter()
            try:
                layout = load_shape(http, roles.controller, suite, rows, shape, stream_dir=Path(tmp) / "stream",
                                    segments=args.segments, partitions=partitions, servers=args.servers,
                                    replicas=args.replicas, partition_column=args.partition_column)
            except ShapeUnavailable as exc:
                result.skipped = str(exc)
                console.print(f"[yellow]{suite}: not measured: {exc}[/yellow]")
                continue
            del rows  # DuckDB and the cluster hold the rows now: at 10M rows a copy less is 7 GB
            gc.collect()
            wait_until(lambda: _count(http, roles, name) == args.rows, 3600, interval=0.2,  # noqa: B023
                       message=lambda: f"{name}: the broker counts {_count(http, roles, name)} rows, not {args.rows}")  # noqa: B023
            ingested = time.perf_counter()
            result.ingest_s = ingested - started
            console.print(f"{name}: {args.rows:,} rows queryable {result.ingest_s:.1f} s after the load began")
            queries = [q for q in (clickbench_queries() if suite == CLICKBENCH else pinot_queries())
                       if _chosen(q.id, wanted)]
            for phase_name in PHASES:
                if phase_name == "settled":  # every commit done, every segment read once, its copies made
                    wait_until(lambda: commits_done(http, roles.controller, suite, layout), args.settle_timeout,  # noqa: B023
                               interval=0.5, message=lambda: f"{name}: segments still committing: "  # noqa: B023
                               f"{settled_layout(http, roles.controller, suite, layout).describe()}")  # noqa: B023
                    for query in queries if args.repeat else ():  # (nothing is timed with --repeat 0)
                        client.post(query.sql)
                    wait_until(lambda: _copies_building(http, roles) == 0, args.settle_timeout, interval=0.5,
                               message="the servers' DuckDB copies were still being made")
                result.phases[phase_name] = _measure(http, client, roles, native, queries, args.repeat,
                                                     args.count_runs, name, time.perf_counter() - ingested)
            # read once settled: right after ingest the last segments to fill may still be committing
            layout = settled_layout(http, roles.controller, suite, layout)
            result.layout = layout.describe()
            result.consuming_share = layout.consuming_rows / layout.realtime_rows if layout.realtime_rows else 0.0
            console.print(f"{name}: {result.layout}")
            if layout.realtime_rows and result.consuming_share < CONSUMING_SHARE:  # (replicas spread unevenly)
                console.print(f"[bold red]{name}: only {result.consuming_share:.0%} of the streamed rows are in "
                              f"consuming segments, not the {CONSUMING_SHARE:.0%} this shape promises[/bold red]")
            console.print(_table(suite, run, result))
            for line in summary_lines(suite, result):
                console.print(line)
        client.close()
    wrong = [f"{suite} {phase}: {line}" for suite, result in run.sets.items()
             for phase, measured in result.phases.items() for line in measured.wrong()]
    for line in wrong:
        console.print(f"[bold red]WRONG ANSWER {line}[/bold red]")
    if args.json is not None:
        args.json.write_text(json.dumps(run.to_json(), indent=1))
    return 1 if wrong else 0


def _measure(http: httpx.Client, client: BrokerClient, roles: Endpoints, native: duckdb.DuckDBPyConnection,
             queries: list[CompatQuery], repeat: int, count_runs: int, table: str, since_ingest: float) -> Phase:
    """Each query judged (its warm-up), then, when right, timed ``repeat`` times alternating with DuckDB."""
    phase = Phase(started_s=since_ingest)
    for query in queries:
        outcome = judge_all(http, roles.broker, native, [query])[0]
        if outcome.verdict is not Verdict.PASS or not repeat:  # (--repeat 0: answers judged, nothing timed)
            phase.timings[query.id] = Timing(outcome.verdict.value, detail=outcome.detail[:300]
                                             if outcome.verdict is not Verdict.PASS else "")
            continue
        limited = shape_of(query.sql, oracle_sql(query.id, query.oracle_sql)).limited_sql
        wall, used, duck = [], [], []
        cluster_cpu = duck_cpu = 0.0
        for _ in range(repeat):
            before = _cpu_seconds(roles.pids)
            answer, ms = client.timed(query.sql)
            cluster_cpu += _cpu_seconds(roles.pids) - before
            if answer.get("exceptions"):  # right when judged, failing now: reported, never timed
                phase.timings[query.id] = Timing(Verdict.ERROR.value, detail=str(answer["exceptions"])[:300])
                break
            wall.append(ms)
            used.append(float(answer.get("timeUsedMs", 0)))
            began, began_cpu = time.perf_counter(), time.process_time()
            native.execute(limited).fetchall()
            duck.append((time.perf_counter() - began) * 1000)
            duck_cpu += time.process_time() - began_cpu
        else:
            phase.timings[query.id] = Timing(Verdict.PASS.value, statistics.median(wall), statistics.median(used),
                                             statistics.median(duck),
                                             cpu_ms=cluster_cpu * 1000 / repeat if roles.pids else None,
                                             duckdb_cpu_ms=duck_cpu * 1000 / repeat)
    count_sql = f"SELECT COUNT(*) FROM {table}"
    for _ in range(10):
        client.post(count_sql)
    phase.count_p50_ms = statistics.median(client.timed(count_sql)[1] for _ in range(count_runs))
    return phase


def _cpu_seconds(pids: tuple[int, ...]) -> float:
    """CPU seconds ``pids`` spent so far, together (10 ms ticks, so summed over the repeats; a process that
    cannot be read counts 0)."""
    return sum(seconds for pid in pids if not math.isnan(seconds := cpu_seconds(pid)))


def _table(suite: str, run: Run, result: SetResult) -> Table:
    table = Table(title=f"{suite}: {run.rows:,} rows, {run.label}, medians of the repeats "
                        f"(wall: the client's, HTTP included; used: the broker's timeUsedMs)")
    table.add_column("query")
    for name in PHASES:
        for column in ("wall ms", "used ms", "duckdb ms", "ratio", "cpu ratio"):
            table.add_column(f"{name} {column}", justify="right")
    fresh = result.phases["fresh"].timings
    for query in fresh:
        cells = []
        for name in PHASES:
            timing = result.phases[name].timings.get(query)
            if timing is None or timing.verdict != "pass" or timing.ratio is None:
                verdict = timing.verdict if timing else ""
                style = "bold red" if verdict in ("wrong", "error") else "green" if verdict == "pass" else "yellow"
                cells += [f"[{style}]{verdict}[/{style}]", "", "", (timing.detail[:30] if timing else ""), ""]
            else:
                cells += [f"{timing.wall_ms:.1f}", f"{timing.used_ms:.0f}", f"{timing.duckdb_ms:.1f}",
                          f"{timing.ratio:.2f}", "-" if timing.cpu_ratio is None else f"{timing.cpu_ratio:.2f}"]
        table.add_row(query, *cells)
    return table


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
