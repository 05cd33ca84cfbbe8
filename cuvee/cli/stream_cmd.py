"""`cuvee stream ...` commands: create a topic in an embedded log, produce JSON lines to it, show its offsets."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import IO

import orjson

from cuvee.errors import UserError
from cuvee.stream.log import LogAdmin, LogProducer, TopicSettings


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("stream", help="stream commands")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    commands.required = True

    create = commands.add_parser("create-topic", help="create a topic in an embedded log directory")
    create.add_argument("--log-dir", required=True, help="the embedded log's directory (created if missing)")
    create.add_argument("name", help="topic name")
    create.add_argument("--partitions", type=int, required=True, help="number of partitions")
    create.add_argument("--segment-bytes", type=int, default=TopicSettings().segment_bytes,
                        help="roll a new segment file at this size")
    create.add_argument("--retention-bytes", type=int, help="keep at most this many bytes per partition")
    create.add_argument("--retention-ms", type=int, help="drop segments whose newest message is older than this")
    create.set_defaults(func=_create_topic)

    produce = commands.add_parser("produce", help="produce JSON lines (one message per non-empty line)")
    produce.add_argument("--log-dir", required=True, help="the embedded log's directory")
    produce.add_argument("name", help="topic name")
    produce.add_argument("--file", default="-", help="a .jsonl file, or - for standard input (the default)")
    produce.add_argument("--key-field", help="use this JSON field's value (as text) as the message key")
    produce.set_defaults(func=_produce)

    offsets = commands.add_parser("offsets", help="print each partition's earliest and latest offset as JSON")
    offsets.add_argument("--log-dir", required=True, help="the embedded log's directory")
    offsets.add_argument("name", help="topic name")
    offsets.set_defaults(func=_offsets)


def _create_topic(args: argparse.Namespace) -> int:
    settings = TopicSettings(args.segment_bytes, args.retention_bytes, args.retention_ms)
    LogAdmin(args.log_dir).create_topic(args.name, args.partitions, settings)
    print(f"created topic {args.name!r} with {args.partitions} partitions in {args.log_dir}")
    return 0


def key_text(line: bytes, key_field: str) -> bytes:
    """The key of one JSON line: the field's value as text (strings as they are, other values as JSON)."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(event, dict):
        raise ValueError("not a JSON object")
    if key_field not in event or event[key_field] is None:
        raise ValueError(f"no value for the key field {key_field!r}")
    value = event[key_field]
    return value.encode() if isinstance(value, str) else orjson.dumps(value)


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for number, line in enumerate(stream, start=1):
        line = line.strip()
        if line:
            yield number, line


def _produce(args: argparse.Namespace) -> int:
    if args.file == "-":
        return _produce_from(args, sys.stdin.buffer)
    try:
        with open(args.file, "rb") as source:
            return _produce_from(args, source)
    except IsADirectoryError:
        raise UserError(f"{args.file} is a directory, not a JSON-lines file") from None


def _produce_from(args: argparse.Namespace, source: IO[bytes]) -> int:
    written = skipped = 0
    with LogProducer(args.log_dir, args.name) as producer:
        for number, line in _lines(source):
            key = None
            if args.key_field:
                try:
                    key = key_text(line, args.key_field)
                except ValueError as exc:
                    print(f"line {number}: skipped: {exc}", file=sys.stderr)
                    skipped += 1
                    continue
            producer.produce(line, key=key)
            written += 1
    print(f"wrote {written} messages to {args.name!r}" + (f" ({skipped} lines skipped)" if skipped else ""))
    return 0


def _offsets(args: argparse.Namespace) -> int:
    offsets = LogAdmin(args.log_dir).offsets(args.name)
    report = {str(p): {"earliest": earliest, "latest": latest} for p, (earliest, latest) in offsets.items()}
    print(json.dumps({"topic": args.name, "partitions": report}, indent=2))
    return 0
