"""Parsed messages (one mapping of field name to value per message) to an Arrow batch of a schema's columns: the
one path every per-message decoder shares (the JSON decoder's fallback, Avro, Protobuf, CSV), so the coercion
rules of ``cuvee.decode.coerce``, the schema's columns and the bad-record reasons are the same whatever the format.

A message its format cannot parse is a ``BadRecord`` (the parser raises ``MessageError`` with the reason); so is a
message one of whose values cannot become its column's type. Fields of a message that are not columns are not
read; columns a message lacks (or holds null) are null, and the mutable segment stores the column's default there.

Column by column, Arrow converts the values in one call when every value already has the column's Python type
(ints for INT/LONG/TIMESTAMP, floats or ints for FLOAT/DOUBLE, bools, strs, bytes; lists of them for multi-value
columns); any other column goes value by value through the coercion rules. Both give the same values: Arrow
refuses what the rules would refuse too (an int out of range), and then the rules decide.
"""

from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import DataType, FieldSpec, Schema
from cuvee.decode.arrow_ops import drop_null_list_elements
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import BadRecord, DecodeResult, Decoder, DecoderUnavailable
from cuvee.decode.coerce import CoercionError, column_coercer

# The Python types Arrow converts to a column's type exactly as the coercion rules would.
_EXACT_TYPES: dict[DataType, frozenset[type]] = {
    DataType.INT: frozenset({int}),
    DataType.LONG: frozenset({int}),
    DataType.TIMESTAMP: frozenset({int}),
    DataType.FLOAT: frozenset({float, int}),
    DataType.DOUBLE: frozenset({float, int}),
    DataType.BOOLEAN: frozenset({bool}),
    DataType.STRING: frozenset({str}),
    DataType.JSON: frozenset({str}),
    DataType.BYTES: frozenset({bytes}),
}
_NONE = type(None)
_REASON_CHARS = 300  # an unexpected parser error's text kept in a bad record's reason


class MessageError(ValueError):
    """A message its format cannot parse; the text is the bad record's reason."""


Parse = Callable[[bytes], Mapping[str, Any]]


class RowBuilder:
    """Builds batches of ``schema``'s columns from messages, with a format's ``parse``."""

    def __init__(self, schema: Schema):
        self.schema = schema
        self._fields = schema.fields
        self._target = schema.arrow_schema()
        self._coercers = [column_coercer(spec) for spec in self._fields]

    def build(self, messages: Sequence[Any], offsets: np.ndarray, parse: Parse, *,
              empty_is_bad: bool = True) -> tuple[pa.RecordBatch, np.ndarray, list[BadRecord]]:
        """The batch of the messages that decode, their positions in ``messages``, and the bad records (in
        order). ``empty_is_bad``: an empty (or blank) message is a bad record without being parsed (formats in
        which it means something, like Protobuf's all-defaults message, pass False). Never raises on bad input;
        DecoderUnavailable from ``parse`` goes to the caller."""
        docs: list[Mapping[str, Any]] = []
        positions: list[int] = []
        failures: dict[int, BadRecord] = {}
        raws: list[bytes] = []
        for position, raw in enumerate(messages):
            if raw is not None and not isinstance(raw, bytes):
                raw = raw.encode() if isinstance(raw, str) else bytes(raw)
            raw = raw or b""
            reason = None
            if empty_is_bad and (not raw or raw.isspace()):
                reason = "empty message"
            else:
                try:
                    doc = parse(raw)
                except MessageError as error:
                    reason = str(error)
                except DecoderUnavailable:
                    raise
                except Exception as error:  # noqa: BLE001 - a parser's surprise must cost one row, not the consumer
                    text = str(error).splitlines()[0][:_REASON_CHARS] if str(error) else ""
                    reason = f"cannot be decoded ({type(error).__name__}: {text})"
            if reason is not None:
                failures[position] = BadRecord.of(int(offsets[position]), reason, raw)
                continue
            docs.append(doc)
            positions.append(position)
            raws.append(raw)
        arrays, bad_rows = self._columns(docs)
        for row, reason in bad_rows.items():
            failures[positions[row]] = BadRecord.of(int(offsets[positions[row]]), reason, raws[row])
        if bad_rows:
            keep = np.ones(len(docs), dtype=bool)
            keep[list(bad_rows)] = False
            mask = pa.array(keep)
            arrays = [pc.filter(array, mask) for array in arrays]
            positions = [p for p, kept in zip(positions, keep) if kept]
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._target)
        return batch, np.asarray(positions, dtype=np.int64), [failures[p] for p in sorted(failures)]

    def _columns(self, docs: list[Mapping[str, Any]]) -> tuple[list[pa.Array], dict[int, str]]:
        """One array per column (rows in ``docs`` order) and the rows that failed: row -> reason (the first
        column in schema order that refused the row, as the JSON decoder reports it)."""
        arrays: list[pa.Array] = []
        bad: dict[int, str] = {}
        for spec, coerce, field in zip(self._fields, self._coercers, self._target):
            values = [doc.get(spec.name) for doc in docs]
            array = _exact(spec, field.type, values)
            if array is None:
                converted: list[Any] = []
                for row, value in enumerate(values):
                    if value is None:
                        converted.append(None)
                        continue
                    try:
                        converted.append(coerce(value))
                    except CoercionError as error:
                        converted.append(None)
                        bad.setdefault(row, f"column {spec.name!r}: {error}")
                array = pa.array(converted, type=field.type)
            arrays.append(array)
        return arrays, bad


def _exact(spec: FieldSpec, arrow_type: pa.DataType, values: list[Any]) -> pa.Array | None:
    """The column in one Arrow call when every value has an exact type (see the module docs), else None."""
    allowed = _EXACT_TYPES[spec.data_type]
    if spec.single_value:
        kinds = set(map(type, values))
        kinds.discard(_NONE)
        if not kinds <= allowed:
            return None
    else:
        if not set(map(type, values)) <= {list, _NONE}:
            return None
        kinds = set(map(type, itertools.chain.from_iterable(v for v in values if v is not None)))
        kinds.discard(_NONE)
        if not kinds <= allowed:
            return None
    try:
        array = pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return None  # e.g. an int out of the column's range: the rules say why, row by row
    return array if spec.single_value else drop_null_list_elements(array)


class ParsingDecoder(Decoder):
    """A decoder whose format parses one message at a time (``parse``: bytes to a mapping of field values, or
    MessageError); the rows, their offsets and the bad records come from RowBuilder."""

    def __init__(self, schema: Schema, bad_record_log: BadRecordLog | None = None, *, source: str = ""):
        self._rows = RowBuilder(schema)
        self._bad_log = bad_record_log
        self._source = source

    @property
    def schema(self) -> Schema:
        return self._rows.schema

    # Whether an empty message is a bad record (True) or is parsed like any other (a Protobuf message of defaults)
    empty_is_bad = True

    @abc.abstractmethod
    def parse(self, raw: bytes) -> Mapping[str, Any]:
        """One message's fields by name; MessageError (with the reason) when it is not a message of the format."""

    def decode(self, values: Sequence[bytes], offsets: Sequence[int]) -> DecodeResult:
        messages = list(values)
        stream_offsets = np.asarray(offsets, dtype=np.int64)
        if len(messages) != len(stream_offsets):
            raise ValueError(f"{len(messages)} messages but {len(stream_offsets)} offsets")
        batch, kept, bad = self._rows.build(messages, stream_offsets, self.parse, empty_is_bad=self.empty_is_bad)
        if self._bad_log is not None and bad:
            self._bad_log.record(bad, source=self._source)
        return DecodeResult(batch=batch, offsets=stream_offsets[kept], bad=bad)
