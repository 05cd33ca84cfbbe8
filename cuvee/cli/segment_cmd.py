"""`cuvee segment ...` commands: build an offline segment from a file, inspect a segment, pack/unpack archives."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import Schema
from cuvee.errors import UserError

if TYPE_CHECKING:
    from cuvee.decode.transform import RowTransformer
    from cuvee.segment.immutable import ImmutableSegment

JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}
PARQUET_SUFFIXES = {".parquet", ".pq"}
DECODE_CHUNK_LINES = 100_000
BAD_ROWS_SHOWN = 5


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("segment", help="segment commands")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True

    build = commands.add_parser("build", help="build an offline segment from a JSONL or Parquet file")
    build.add_argument("--schema", required=True, help="Pinot schema JSON file")
    build.add_argument("--table", required=True, help="Pinot table config JSON file")
    build.add_argument("--input", required=True, help="rows: F.jsonl (one JSON object a line) or F.parquet")
    build.add_argument("--out", required=True, help="directory to write the segment directory into")
    build.add_argument("--sequence", type=int, default=0, help="sequence number in the segment name (default 0)")
    build.add_argument("--name", help="segment name (default <table>_<minTime>_<maxTime>_<sequence>)")
    build.add_argument("--archive", action="store_true", help="also write <segment>.tar.zst next to it")
    build.set_defaults(func=cmd_build)

    inspect = commands.add_parser("inspect", help="print a segment's metadata and column stats as JSON")
    inspect.add_argument("path", help="a segment directory or a segment archive (.tar.zst, or .tar.gz); with "
                                      "--server, a segment name")
    inspect.add_argument("--server", help="ask this server (URL) what it serves of the segment: its metadata and "
                                          "each column as served (from the segment, or its default value)")
    inspect.add_argument("--table", help="with --server: the segment's table, with its type (events_REALTIME)")
    inspect.set_defaults(func=cmd_inspect)

    pack = commands.add_parser("pack", help="write a segment directory as one deterministic .tar.zst")
    pack.add_argument("path", help="segment directory")
    pack.add_argument("--out", help="archive file (default <dir>.tar.zst)")
    pack.set_defaults(func=cmd_pack)

    unpack = commands.add_parser("unpack", help="extract and verify a segment archive")
    unpack.add_argument("path", help="segment archive")
    unpack.add_argument("--out", required=True, help="directory to extract the segment directory into")
    unpack.set_defaults(func=cmd_unpack)


@dataclass
class InputRows:
    """Rows read from an input file, with the rows that could not be used (line number and reason). ``lines`` gives
    each batch's rows' line numbers (JSONL) or 1-based row numbers (Parquet)."""

    batches: list[pa.RecordBatch]
    lines: list[np.ndarray] = field(default_factory=list)
    bad_count: int = 0
    bad_examples: list[tuple[int, str]] = field(default_factory=list)


def cmd_build(args: argparse.Namespace) -> int:
    from cuvee.config.files import load_table
    from cuvee.segment.archive import pack
    from cuvee.segment.builder import build_segment
    from cuvee.segment.naming import offline_segment_name, time_range

    from cuvee.decode.transform import compile_ingestion, decode_schema

    schema, table = load_table(args.schema, args.table)
    transformer = compile_ingestion(schema, table.ingestion)
    rows = read_input(Path(args.input), decode_schema(schema, transformer))
    filtered = apply_ingestion(rows, transformer)
    if rows.bad_count:
        print(f"{rows.bad_count} bad row(s) in {args.input} were skipped:", file=sys.stderr)
        for line, reason in rows.bad_examples:
            print(f"  line {line}: {reason}", file=sys.stderr)
    data = pa.Table.from_batches(rows.batches, schema=schema.arrow_schema()) if rows.batches else schema.arrow_schema().empty_table()
    name = args.name
    if name is None:
        low, high = time_range(data, table.time_column)
        name = offline_segment_name(table.table_name, args.sequence, low, high)
    segment = build_segment(
        data,
        schema,
        table.indexing,
        args.out,
        name,
        table_name=table.table_name,
        time_column=table.time_column,
        extra_metadata={"badRowCount": rows.bad_count,
                        **({"filteredRowCount": filtered} if transformer is not None else {})},
    )
    print(segment.path)
    if args.archive:
        print(pack(segment.path))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from cuvee.segment.archive import unpack
    from cuvee.segment.immutable import ImmutableSegment

    if args.server is not None:
        return _inspect_served(args.server, args.table, args.path)
    if args.table is not None:
        raise UserError("--table goes with --server (a segment directory or archive names its own table)")
    path = Path(args.path)
    if not path.exists():
        raise UserError(f"no segment at {str(path)!r}")
    if path.is_dir():
        report = _describe(ImmutableSegment.load(path, verify=True))
    else:
        with tempfile.TemporaryDirectory(prefix="cuvee-inspect-") as tmp:
            report = _describe(ImmutableSegment.load(unpack(path, tmp)))
    sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def cmd_pack(args: argparse.Namespace) -> int:
    from cuvee.segment.archive import pack
    from cuvee.segment.immutable import ImmutableSegment

    ImmutableSegment.load(args.path, verify=True)
    print(pack(args.path, args.out))
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    from cuvee.segment.archive import unpack

    print(unpack(args.path, args.out))
    return 0


def _inspect_served(server: str, table: str | None, segment: str) -> int:
    """What ``server`` serves of ``segment`` (``GET {server}/tables/{table}/segments/{segment}/metadata``)."""
    import httpx

    from cuvee.auth.client import user_headers
    from cuvee.protocol.completion_http import SERVER_SEGMENT_METADATA

    if not table:
        raise UserError("--server needs --table, the segment's table with its type (e.g. events_REALTIME)")
    url = server.rstrip("/") + SERVER_SEGMENT_METADATA.format(table=quote(table, safe=""),
                                                              segment=quote(segment, safe=""))
    try:
        reply = httpx.get(url, headers=user_headers(), timeout=30)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach server {server!r}: {type(exc).__name__}") from None
    if reply.status_code >= 400:
        try:
            reason = reply.json().get("error", reply.text)
        except ValueError:
            reason = reply.text
        raise UserError(f"server {server!r} answered {reply.status_code}: {str(reason)[:300]}")
    sys.stdout.write(orjson.dumps(reply.json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _describe(segment: ImmutableSegment) -> dict[str, Any]:
    doc = segment.metadata.to_json()
    doc["sizeBytes"] = segment.size_bytes
    return doc


# ---------------------------------------------------------------- input files


def apply_ingestion(rows: InputRows, transformer: RowTransformer | None) -> int:
    """The table's ingestion transforms and filter over the rows read (decoded with ``decode_schema``), as
    consuming segments apply them; returns how many rows the filter dropped (reported, and kept in the segment's
    metadata)."""
    if transformer is None:
        return 0
    dropped = 0
    kept: list[pa.RecordBatch] = []
    kept_lines: list[np.ndarray] = []
    for batch, lines in zip(rows.batches, rows.lines, strict=True):
        result = transformer.apply(batch, lines)
        dropped += len(result.dropped_offsets)
        rows.bad_count += len(result.failed)  # continueOnError unset/false: skipped as bad rows, as Pinot
        room = BAD_ROWS_SHOWN - len(rows.bad_examples)
        rows.bad_examples += [(int(lines[row]), f"ingestion transform failed: {reason}")
                              for row, reason in result.failed[:max(room, 0)]]
        if result.batch.num_rows:
            kept.append(result.batch)
            kept_lines.append(result.offsets)
    rows.batches, rows.lines = kept, kept_lines
    if dropped:
        print(f"{dropped} row(s) dropped by the table's filterConfig", file=sys.stderr)
    return dropped


def read_input(path: Path, schema: Schema) -> InputRows:
    """Rows of a JSONL or Parquet file as record batches of the schema's Arrow types."""
    if not path.is_file():
        raise UserError(f"input file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return _read_jsonl(path, schema)
    if suffix in PARQUET_SUFFIXES:
        batches = _read_parquet(path, schema).to_batches()
        starts = np.cumsum([0] + [b.num_rows for b in batches])
        return InputRows(batches=batches, lines=[np.arange(n, n + b.num_rows) + 1 for n, b in zip(starts, batches)])
    raise UserError(f"cannot tell the format of {str(path)!r}: use a .jsonl or .parquet file")


def _read_jsonl(path: Path, schema: Schema) -> InputRows:
    from cuvee.decode.json import JsonDecoder

    decoder = JsonDecoder(schema)
    rows = InputRows(batches=[])
    for lines, line_numbers in _jsonl_chunks(path):
        result = decoder.decode(lines, line_numbers)
        if result.batch.num_rows:
            rows.batches.append(result.batch)
            rows.lines.append(np.asarray(result.offsets, np.int64))
        rows.bad_count += len(result.bad)
        room = BAD_ROWS_SHOWN - len(rows.bad_examples)
        rows.bad_examples += [(bad.offset, bad.reason) for bad in result.bad[:max(room, 0)]]
    return rows


def _jsonl_chunks(path: Path) -> Iterator[tuple[list[bytes], list[int]]]:
    """Non-blank lines with their 1-based line numbers, a chunk at a time."""
    lines: list[bytes] = []
    numbers: list[int] = []
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            stripped = line.strip()
            if not stripped:
                continue
            lines.append(stripped)
            numbers.append(number)
            if len(lines) >= DECODE_CHUNK_LINES:
                yield lines, numbers
                lines, numbers = [], []
    if lines:
        yield lines, numbers


def _read_parquet(path: Path, schema: Schema) -> pa.Table:
    """Schema columns cast to their types; a column missing from the file is all nulls, extra ones are ignored."""
    import pyarrow.parquet as pq

    try:
        source = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise UserError(f"cannot read Parquet file {str(path)!r}: {exc}") from exc
    arrays = []
    for spec in schema.fields:
        target = spec.arrow_type()
        if spec.name not in source.column_names:
            arrays.append(pa.nulls(source.num_rows, target))
            continue
        column = source.column(spec.name)
        try:
            arrays.append(column if column.type == target else column.cast(target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UserError(f"{path}: column {spec.name!r} ({column.type}) cannot be read as {spec.data_type.value}: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=schema.arrow_schema())
