"""``cuvee pipeline ingest``: load files into an OFFLINE table with Spark (docs/pipeline.md). The same options
work under ``spark-submit`` through ``python -m cuvee.pipeline.submit``."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_ingest_arguments(parser: argparse.ArgumentParser, *, with_master: bool) -> None:
    parser.add_argument("--controller", required=True, help="the controller's URL, e.g. http://127.0.0.1:9000")
    parser.add_argument("--table", required=True, help="the table (its OFFLINE part receives the segments)")
    parser.add_argument("--input", required=True, help="a file, directory or glob Spark can read")
    parser.add_argument("--format", choices=("parquet", "json", "csv", "orc"), help="default: from the file suffix")
    parser.add_argument("--mode", choices=("append", "refresh"),
                        help="append: replace what an earlier run over the same input pushed; refresh: replace the "
                             "whole table (default: the table's segmentPushType)")
    parser.add_argument("--deep-store", help="deep store URI the tasks write to (default: the controller's)")
    parser.add_argument("--bad-rows-dir", help="where rows that do not fit the schema are written as JSON text "
                                               "(default: <input dir>/_cuvee_bad_rows)")
    parser.add_argument("--rows-per-segment", type=int, default=5_000_000, help="split larger buckets")
    if with_master:
        parser.add_argument("--master", default="local[*]", help="Spark master (local[*], spark://host:7077, yarn)")


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("pipeline", help="batch jobs on Spark")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True
    ingest = commands.add_parser("ingest", help="build segments from files with Spark and push them")
    add_ingest_arguments(ingest, with_master=True)
    ingest.set_defaults(func=cmd_ingest)
    for command, task_type, text in MAINTENANCE_COMMANDS:
        job = commands.add_parser(command, help=text)
        add_maintenance_arguments(job, with_master=True)
        job.set_defaults(func=cmd_maintenance, task_type=task_type)


MAINTENANCE_COMMANDS = (
    ("merge-rollup", "MergeRollupTask", "merge a table's small segments per time bucket (MergeRollupTask)"),
    ("realtime-to-offline", "RealtimeToOfflineSegmentsTask",
     "move a hybrid table's finished windows of realtime rows into its offline half (RealtimeToOfflineSegmentsTask)"),
    ("compact-upsert", "UpsertCompactionTask",
     "rewrite an upsert table's committed segments without their invalid docs (UpsertCompactionTask)"),
)


def add_maintenance_arguments(parser: argparse.ArgumentParser, *, with_master: bool) -> None:
    parser.add_argument("--controller", required=True, help="the controller's URL, e.g. http://127.0.0.1:9000")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--table", help="the table to run the task on")
    which.add_argument("--all", action="store_true", help="every table with the task configured")
    if with_master:
        parser.add_argument("--master", default="local[*]", help="Spark master (local[*], spark://host:7077, yarn)")


def cmd_maintenance(args: argparse.Namespace) -> int:
    from cuvee.controller import faults
    from cuvee.pipeline.session import spark_session

    faults.arm_from_environment()
    spark = spark_session(args.master)
    try:
        return run_maintenance(spark, args.controller, args.task_type, args.table, every=args.all)
    finally:
        spark.stop()


def run_maintenance(spark: Any, controller: str, task_type: str, table: str | None, *, every: bool) -> int:
    """Run ``task_type`` on one table or every table configured for it; one summary line per table. Exit status
    1 when any table's run failed (the others still ran)."""
    from rich.console import Console

    from cuvee.errors import CuveeError
    from cuvee.maintenance.jobs import JOBS, tables_with_task

    console = Console(stderr=True)
    tables = tables_with_task(controller, task_type) if every else [table or ""]
    failed = 0
    for name in tables:
        try:
            with console.status(f"{task_type} on {name}") as status:
                summary = JOBS[task_type](spark, controller, name, progress=lambda text: status.update(text))
        except CuveeError as exc:
            failed += 1
            print(f"cuvee: error: {task_type} on {name}: {exc}", file=sys.stderr)
            continue
        except Exception as exc:  # a Spark or I/O failure on one table must not stop the others (--all)
            if not every:
                raise
            failed += 1
            print(f"cuvee: error: {task_type} on {name} failed ({type(exc).__name__}); the others go on",
                  file=sys.stderr)
            continue
        print(f"table={name} task={task_type} status={summary.status} tasks={summary.tasks} "
              f"segments_in={summary.segments_in} segments_out={summary.segments_out} rows_in={summary.rows_in} "
              f"rows_out={summary.rows_out} seconds={summary.seconds:.1f}"
              + (f" note={summary.message!r}" if summary.message else ""), file=sys.stdout)
    if every and not tables:
        print(f"no table has {task_type} configured", file=sys.stderr)
    return 1 if failed else 0


def options_from(args: argparse.Namespace) -> Any:
    import os

    from cuvee.pipeline.ingest import IngestOptions

    bad_dir = args.bad_rows_dir or os.path.join(os.path.dirname(args.input.rstrip("/")) or ".", "_cuvee_bad_rows")
    return IngestOptions(controller=args.controller, table=args.table, input=args.input, format=args.format,
                         mode=args.mode, deep_store=args.deep_store, bad_rows_dir=bad_dir,
                         rows_per_segment=args.rows_per_segment)


def cmd_ingest(args: argparse.Namespace) -> int:
    from cuvee.controller import faults
    from cuvee.pipeline.session import spark_session

    faults.arm_from_environment()  # CUVEE_FAULTS: failure tests stop the job at a named point

    spark = spark_session(args.master)
    try:
        return run_and_report(spark, options_from(args))
    finally:
        spark.stop()


def run_and_report(spark: Any, options: Any) -> int:
    from rich.console import Console
    from rich.table import Table

    from cuvee.pipeline.ingest import run_ingest

    console = Console(stderr=True)
    with console.status("starting") as status:
        summary = run_ingest(spark, options, progress=lambda text: status.update(text))
    report = Table(title=f"ingest into {options.table}", show_header=False)
    for label, value in (("rows in", summary.rows_in), ("rows out", summary.rows_out),
                         ("bad rows", summary.bad_rows), ("filtered rows", summary.filtered_rows),
                         ("segments", len(summary.segments)), ("unchanged (not pushed again)", len(summary.unchanged)),
                         ("segments replaced", len(summary.replaced)), ("bytes", summary.bytes),
                         ("seconds", f"{summary.seconds:.1f}")):
        report.add_row(label, str(value))
    if summary.bad_rows:
        report.add_row("bad rows written to", str(summary.bad_rows_path))
    Console().print(report)
    print(f"rows_in={summary.rows_in} rows_out={summary.rows_out} bad_rows={summary.bad_rows} "
          f"segments={len(summary.segments)} bytes={summary.bytes} seconds={summary.seconds:.1f}",
          file=sys.stdout)
    return 0
