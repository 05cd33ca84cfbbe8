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
