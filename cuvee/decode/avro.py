"""Avro messages (binary, one record each, no container header) with an inline writer schema: Pinot's
SimpleAvroMessageDecoder. ``cuvee.decode.registry`` reads the same records when the schema comes from a registry.

Values become columns as Pinot's AvroRecordExtractor gives them, then the usual coercion rules apply
(``cuvee.decode.rows``): fields by name; a union is its branch's value; enums are their symbol (text); ``bytes``
and ``fixed`` are bytes (a BYTES column takes them, a STRING one gets hex); arrays go to multi-value columns;
records and maps go to JSON (or STRING) columns as JSON text, as Pinot stores them.

Logical types (``enableLogicalTypes``; on by default here, as in Pinot's SimpleAvroMessageDecoder): timestamps
become epoch milliseconds (micros are cut to millis), dates and times ISO text, decimals numbers, UUIDs text.
Off, the underlying Avro value is kept (a ``timestamp-micros`` field gives micros, a ``date`` days since 1970).
Differs from Pinot: a timestamp read into a STRING column is its epoch millis, not Java's ``Timestamp`` text.

A message that is not a record of the schema (too short, bytes left over, an invalid union branch...) is a bad
record with the reason. The schema is checked against ``cuvee.config.avro_limits`` first (so no message can build
more than a bounded multiple of its size), and each message of a recursive schema is walked before it is read
(``nesting_problem``): nested deeper than MAX_AVRO_DEPTH, it is a bad record, where fastavro's reader would
overflow the C stack and kill the process.
"""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import orjson

from cuvee.config.avro_limits import (
    ARRAY,
    BOOLEAN,
    BYTES,
    DOUBLE,
    FLOAT,
    MAP,
    MAX_AVRO_DEPTH,
    NULL,
    RECORD,
    UNION,
    VARINT,
    AvroSchemaRefused,
    AvroShape,
    avro_shape,
    record_problem,
)
from cuvee.config.decoder_config import AvroOptions
from cuvee.config.schema import Schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import DecoderSetupError
from cuvee.decode.rows import MessageError, ParsingDecoder

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MILLI = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True)
class ReaderSchema:
    """A writer schema ready to read messages: fastavro's parsed form and its shape (the limits' checks)."""

    parsed: Any
    shape: AvroShape


def reader_schema(schema: str | Mapping[str, Any], logical_types: bool) -> ReaderSchema:
    """A writer schema (JSON text or document) ready to read messages; without logical types the ``logicalType``
    annotations are dropped, so values stay as written. AvroSchemaRefused (a ValueError) for a schema whose
    messages are not records or could cost more than ``cuvee.config.avro_limits`` allows."""
    doc = orjson.loads(schema) if isinstance(schema, str) else schema
    named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(doc, named_schemas=named)
    shape = avro_shape(parsed, named)
    kinds, root = shape.kinds, shape.root
    if kinds[root] != RECORD and not (kinds[root] == UNION and RECORD in (kinds[b] for b in shape.children[root])):
        # (a union holding a record is read as Pinot reads it: a message of another branch is a bad record)
        raise AvroSchemaRefused(record_problem(parsed) or "must be an Avro record schema")
    if not logical_types:
        parsed = fastavro.parse_schema(_without_logical_types(doc))
    return ReaderSchema(parsed, shape)


def _without_logical_types(doc: Any) -> Any:
    """A copy of a schema document without ``logicalType`` keys (iteratively: a schema may nest as deep as JSON
    allows)."""
    holder: list[Any] = [None]
    work: list[tuple[Any, Any, Any]] = [(doc, holder, 0)]
    while work:
        node, parent, key = work.pop()
        if isinstance(node, dict):
            copy = parent[key] = {name: None for name in node if name != "logicalType"}
            work.extend((value, copy, name) for name, value in node.items() if name != "logicalType")
        elif isinstance(node, list):
            copy = parent[key] = [None] * len(node)
            work.extend((value, copy, index) for index, value in enumerate(node))
        else:
            parent[key] = node
    return holder[0]


_ENDS = "not an Avro record of the schema: the message ends inside the record"


def read_record(payload: bytes | memoryview, schema: ReaderSchema) -> dict[str, Any]:
    """One Avro record of ``schema`` that fills ``payload`` exactly; MessageError otherwise. A message of a
    recursive schema is first walked without building anything: nested deeper than MAX_AVRO_DEPTH, it is a bad
    record (fastavro's reader would overflow the C stack and kill the process)."""
    if schema.shape.recursive:
        problem = nesting_problem(payload, schema.shape)
        if problem is not None:
            raise MessageError(problem)
    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, schema.parsed, None)
    except EOFError:
        raise MessageError(_ENDS) from None
    except (ValueError, IndexError, UnicodeDecodeError, TypeError, OverflowError, KeyError) as error:
        raise MessageError(f"not an Avro record of the schema ({type(error).__name__}: "
                           f"{str(error).splitlines()[0][:200] if str(error) else ''})") from None
    left = len(payload) - stream.tell()
    if left:
        raise MessageError(f"not an Avro record of the schema: {left} bytes left over after the record")
    if not isinstance(record, dict):
        raise MessageError("not an Avro record")
    return {name: _plain(value) for name, value in record.items()}


_LEAVE, _KEY = -1, -2


def nesting_problem(payload: bytes | memoryview, shape: AvroShape) -> str | None:
    """Why a message of ``shape`` cannot be read safely (values nested deeper than MAX_AVRO_DEPTH), or why it is
    not a message of the schema at all; None when fastavro may read it. Walks the message with a stack of its own,
    building nothing: each node is skipped as Avro's binary encoding lays it out."""
    data = bytes(payload)
    kinds, children, sizes = shape.kinds, shape.children, shape.sizes
    end, position, depth = len(data), 0, 0

    def varint() -> int:
        nonlocal position
        shift = result = 0
        while True:
            if position >= end:
                raise EOFError
            byte = data[position]
            position += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise ValueError("a varint longer than 10 bytes")

    todo: list[Any] = [shape.root]
    try:
        while todo:
            item = todo.pop()
            if item.__class__ is list:  # an array's or map's block: [items' node, items left, is a map]
                if item[1] == 0:
                    count = varint()
                    if count == 0:
                        continue
                    if count < 0:
                        count = -count
                        varint()  # the block's size in bytes
                    item[1] = count
                item[1] -= 1
                todo.append(item)
                todo.append(item[0])
                if item[2]:
                    todo.append(_KEY)
                continue
            if item == _LEAVE:
                depth -= 1
                continue
            kind = NULL if item == _KEY else kinds[item]
            if item == _KEY or kind == BYTES:
                length = varint()
                if length < 0:
                    raise ValueError(f"a negative length ({length})")
                position += length
            elif kind == VARINT:
                varint()
            elif kind == RECORD:
                depth += 1
                if depth > MAX_AVRO_DEPTH:
                    return f"values nested more than {MAX_AVRO_DEPTH} levels deep (records, arrays, maps)"
                todo.append(_LEAVE)
                todo.extend(reversed(children[item]))
            elif kind == UNION:
                branch = varint()
                if not 0 <= branch < len(children[item]):
                    raise ValueError(f"union branch {branch} of {len(children[item])}")
                todo.append(children[item][branch])
            elif kind in (ARRAY, MAP):
                depth += 1
                if depth > MAX_AVRO_DEPTH:
                    return f"values nested more than {MAX_AVRO_DEPTH} levels deep (records, arrays, maps)"
                todo.append(_LEAVE)
                todo.append([children[item][0], 0, kind == MAP])
            elif kind != NULL:
                position += {BOOLEAN: 1, FLOAT: 4, DOUBLE: 8}.get(kind) or sizes[item]
            if position > end:
                raise EOFError
    except EOFError:
        return _ENDS
    except ValueError as error:
        return f"not an Avro record of the schema ({error})"
    return None


def _plain(value: Any) -> Any:
    """A logical type's Python value as a column value (lists: each element)."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _EPOCH) // _MILLI
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class AvroDecoder(ParsingDecoder):
    """SimpleAvroMessageDecoder: every message is written with the one schema in the table config."""

    def __init__(self, schema: Schema, options: AvroOptions, bad_record_log: BadRecordLog | None = None, *,
                 source: str = ""):
        super().__init__(schema, bad_record_log, source=source)
        try:
            self._avro = reader_schema(options.schema, options.logical_types)
        except AvroSchemaRefused as refused:  # a table stored before a limit was added
            raise DecoderSetupError(f"the table's Avro schema is refused: {refused}") from None

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        return read_record(raw, self._avro)
