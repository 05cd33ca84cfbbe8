"""`cuvee provision`: how much memory and how many hosts a realtime table needs (the seed's RealtimeProvisioningHelper;
``cuvee.provision``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from cuvee.config.units import parse_size_bytes
from cuvee.controller.catalog import parse_schema, parse_table
from cuvee.errors import UserError
from cuvee.provision import ProvisionInputs, matrices, measure

_TITLES = {"memoryPerHost": "Memory used per host", "optimalSegmentSize": "Optimal segment size",
           "consumingMemoryPerHost": "Consuming memory per host", "segmentsQueriedPerHost": "Segments queried per host"}
DEFAULT_RETENTION_HOURS = 72.0


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("provision", help="memory, segment size and segments per host for a realtime table")
    parser.add_argument("--table", required=True, type=Path, help="the table config (JSON)")
    parser.add_argument("--schema", required=True, type=Path, help="the schema (JSON)")
    parser.add_argument("--sample-segment", required=True, type=Path, help="a built segment of typical rows")
    parser.add_argument("--partitions", required=True, type=int, help="stream partitions")
    parser.add_argument("--ingestion-rate", required=True, type=float, help="rows per second per partition")
    parser.add_argument("--num-hosts", default="2,4,6,8", help="host counts to compare (default 2,4,6,8)")
    parser.add_argument("--num-hours", default="2,4,6,8,12", help="hours a segment consumes (default 2,4,6,8,12)")
    parser.add_argument("--max-usable-host-memory", default="48G", help="memory a host may use (default 48G)")
    parser.add_argument("--retention-hours", type=float, help="hours of data kept (default: the table's retention, "
                        f"else {DEFAULT_RETENTION_HOURS:g})")
    parser.add_argument("--json", action="store_true", help="print the matrices as JSON")
    parser.set_defaults(func=_provision)


def _numbers(text: str, kind: type, what: str) -> tuple[Any, ...]:
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{what} must be a comma-separated list of numbers, got {text!r}") from None
    if not values:
        raise UserError(f"{what} names no value")
    return values


def _provision(args: argparse.Namespace) -> int:
    try:
        table = parse_table(json.loads(args.table.read_text()))
        schema = parse_schema(json.loads(args.schema.read_text()))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read the table config or schema: {exc}") from None
    retention = args.retention_hours
    if retention is None:
        retention = table.segments.retention_ms / 3_600_000 if table.segments.retention_ms else DEFAULT_RETENTION_HOURS
    try:
        inputs = ProvisionInputs(
            partitions=args.partitions, replicas=table.replication, rows_per_second=args.ingestion_rate,
            hosts=_numbers(args.num_hosts, int, "--num-hosts"), hours=_numbers(args.num_hours, float, "--num-hours"),
            max_host_memory=parse_size_bytes(args.max_usable_host_memory), retention_hours=retention)
        measured = measure(args.sample_segment, schema, table)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    result = matrices(inputs, measured)
    if args.json:
        print(json.dumps({"inputs": {"partitions": inputs.partitions, "replicas": inputs.replicas,
                                     "rowsPerSecondPerPartition": inputs.rows_per_second,
                                     "retentionHours": inputs.retention_hours,
                                     "maxUsableHostMemory": inputs.max_host_memory},
                          "sample": {"rows": measured.rows, "committedBytes": measured.committed_bytes,
                                     "consumingBytes": measured.consuming_bytes},
                          **{name: {_key(h): {str(n): v for n, v in row.items()} for h, row in grid.items()}
                             for name, grid in result.items()}}, indent=2))
        return 0
    console = Console()
    console.print(f"sample: {measured.rows:,} rows, {measured.committed_bytes:,} bytes committed "
                  f"({measured.committed_bytes_per_row:.1f} B/row), {measured.consuming_bytes_per_row:.1f} B/row "
                  f"while consuming; {inputs.partitions} partitions × {inputs.replicas} replicas, "
                  f"{inputs.rows_per_second:g} rows/s per partition, {inputs.retention_hours:g} h retention")
    for name, grid in result.items():
        view = Table(title=_TITLES[name], title_justify="left")
        view.add_column("hours \\ hosts")
        for hosts in inputs.hosts:
            view.add_column(str(hosts), justify="right")
        for hours, row in grid.items():
            view.add_row(_key(hours), *(_cell(name, row[h]) for h in inputs.hosts))
        console.print(view)
    return 0


def _key(hours: float) -> str:
    return f"{hours:g}"


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "NA"
    if name == "segmentsQueriedPerHost":
        return str(value)
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    size, unit = float(value), 0
    while size >= 1024 and unit < len(units) - 1:
        size, unit = size / 1024, unit + 1
    return f"{size:.1f} {units[unit]}" if unit else f"{int(size)} B"
