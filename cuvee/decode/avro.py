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
record with the reason.
"""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from collections.abc import Mapping
from typing import Any

import fastavro
import orjson

from cuvee.config.decoder_config import AvroOptions, unbounded_avro_array
from cuvee.config.schema import Schema
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.rows import MessageError, ParsingDecoder

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MILLI = datetime.timedelta(milliseconds=1)


def reader_schema(schema: str | Mapping[str, Any], logical_types: bool) -> Any:
    """fastavro's parsed form of a writer schema (JSON text or document); without logical types the
    ``logicalType`` annotations are dropped, so values stay as written. ValueError for a schema refused by
    ``unbounded_avro_array``."""
    doc = orjson.loads(schema) if isinstance(schema, str) else schema
    problem = unbounded_avro_array(doc)
    if problem is not None:
        raise ValueError(problem)
    return fastavro.parse_schema(doc if logical_types else _without_logical_types(doc))


def _without_logical_types(node: Any) -> Any:
    if isinstance(node, dict):
        return {key: _without_logical_types(value) for key, value in node.items() if key != "logicalType"}
    if isinstance(node, list):
        return [_without_logical_types(item) for item in node]
    return node


def read_record(payload: bytes | memoryview, schema: Any) -> dict[str, Any]:
    """One Avro record of ``schema`` that fills ``payload`` exactly; MessageError otherwise."""
    stream = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(stream, schema, None)
    except EOFError:
        raise MessageError("not an Avro record of the schema: the message ends inside the record") from None
    except (ValueError, IndexError, UnicodeDecodeError, TypeError, OverflowError, KeyError) as error:
        raise MessageError(f"not an Avro record of the schema ({type(error).__name__}: "
                           f"{str(error).splitlines()[0][:200] if str(error) else ''})") from None
    left = len(payload) - stream.tell()
    if left:
        raise MessageError(f"not an Avro record of the schema: {left} bytes left over after the record")
    if not isinstance(record, dict):
        raise MessageError("not an Avro record")
    return {name: _plain(value) for name, value in record.items()}


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
        self._avro = reader_schema(options.schema, options.logical_types)

    def parse(self, raw: bytes) -> Mapping[str, Any]:
        return read_record(raw, self._avro)
