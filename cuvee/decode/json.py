"""JSON messages to Arrow columns: Arrow's JSON reader as the fast path, per-message coercion as the fallback.

Fast path: the batch is joined into newline-delimited JSON and read by ``pyarrow.json.read_json`` with the
schema's types, so well-typed batches never touch Python per message. It fails as a whole on any message that
is malformed or needs coercion; the batch is then cut into chunks and retried, and only the chunks that still
fail go message by message through orjson and ``cuvee.decode.rows`` (the rules of ``cuvee.decode.coerce``, as
every other format). A poison message therefore
costs a slow path for its chunk, not for its batch, and never loses the good messages around it.

TIMESTAMP columns are read as epoch millis (numbers) or as ISO-8601 strings; the decoder remembers which of the
two the stream used last and tries that first. Known leniency of the fast path: Arrow accepts the bare tokens
``NaN``/``Infinity`` for float columns, which strict JSON (and so the fallback) rejects.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from cuvee.config.schema import DataType, FieldSpec, Schema
from cuvee.decode.arrow_ops import drop_null_list_elements, hex_to_binary
from cuvee.decode.bad_records import BadRecordLog
from cuvee.decode.base import BadRecord, DecodeResult, Decoder
from cuvee.decode.rows import MessageError, RowBuilder

_JSON_KIND = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _read_type(spec: FieldSpec, timestamps_as_iso: bool) -> pa.DataType:
    """The type Arrow's reader parses a column as (before the decoder's own conversions)."""
    if spec.data_type is DataType.TIMESTAMP:
        base = pa.timestamp("ms") if timestamps_as_iso else pa.int64()
    elif spec.data_type is DataType.BYTES:
        base = pa.string()  # hex text, decoded afterwards
    elif spec.data_type is DataType.FLOAT:
        base = pa.float64()  # rounded to float32 afterwards, exactly as the fallback rounds a parsed double
    else:
        base = spec.data_type.arrow_type()
    return base if spec.single_value else pa.list_(base)


class JsonDecoder(Decoder):
    """Decodes JSON object messages into the columns of ``schema``; see the module docstring for the paths."""

    def __init__(
        self,
        schema: Schema,
        bad_record_log: BadRecordLog | None = None,
        *,
        source: str = "",
        retry_chunks: int = 16,
        min_chunk_rows: int = 32,
        use_threads: bool = False,
    ) -> None:
        self._schema = schema
        self._fields = schema.fields
        self._target = schema.arrow_schema()
        self._rows = RowBuilder(schema)
        self._bad_log = bad_record_log
        self._source = source
        self._retry_chunks = max(1, retry_chunks)
        self._min_chunk_rows = max(1, min_chunk_rows)
        self._use_threads = use_threads
        has_timestamps = any(f.data_type is DataType.TIMESTAMP for f in self._fields)
        variants = (False, True) if has_timestamps else (False,)
        self._read_schemas = [
            pa.schema([pa.field(f.name, _read_type(f, iso)) for f in self._fields]) for iso in variants
        ]
        self._preferred = 0
        self._empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in self._target], schema=self._target)

    @property
    def schema(self) -> Schema:
        return self._schema

    def decode(self, values: Sequence[bytes], offsets: Sequence[int]) -> DecodeResult:
        messages = list(values)
        stream_offsets = np.asarray(offsets, dtype=np.int64)
        if len(messages) != len(stream_offsets):
            raise ValueError(f"{len(messages)} messages but {len(stream_offsets)} offsets")
        batches: list[pa.RecordBatch] = []
        good_offsets: list[np.ndarray] = []
        bad: list[BadRecord] = []
        whole = self.decode_fast(messages)
        if whole is not None:
            batches.append(whole)
            good_offsets.append(stream_offsets)
        else:
            for start, stop in self._chunks(len(messages)):
                chunk = messages[start:stop]
                fast = self.decode_fast(chunk) if stop - start < len(messages) else None
                if fast is not None:
                    batches.append(fast)
                    good_offsets.append(stream_offsets[start:stop])
                    continue
                batch, kept, chunk_bad = self.decode_each(chunk, stream_offsets[start:stop])
                batches.append(batch)
                good_offsets.append(stream_offsets[start:stop][kept])
                bad.extend(chunk_bad)
        if self._bad_log is not None and bad:
            self._bad_log.record(bad, source=self._source)
        return DecodeResult(
            batch=self._concat(batches),
            offsets=np.concatenate(good_offsets) if good_offsets else np.zeros(0, np.int64),
            bad=bad,
        )

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        if n < 2 * self._min_chunk_rows:
            return [(0, n)]
        size = max(self._min_chunk_rows, -(-n // self._retry_chunks))
        return [(start, min(start + size, n)) for start in range(0, n, size)]

    def _concat(self, batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        batches = [b for b in batches if b.num_rows]
        if not batches:
            return self._empty
        return batches[0] if len(batches) == 1 else pa.concat_batches(batches)

    def decode_fast(self, messages: list[bytes]) -> pa.RecordBatch | None:
        """All messages through Arrow's reader, or None if any of them needs the per-message path."""
        try:
            if not messages or not all(messages) or not all(map(bytes.startswith, messages, repeat(b"{"))):
                # Arrow skips blank lines and reads a bare `null` as a row of nulls: only objects go this way.
                return None
        except TypeError:
            return None  # not all bytes (None, bytearray, memoryview): the per-message path copes
        joined = b"\n".join(messages)
        if joined.count(b"\n") != len(messages) - 1 or b"\r" in joined:
            return None  # a message spans lines: rows would not line up with messages
        if not joined.isascii():
            try:
                joined.decode("utf-8")
            except UnicodeDecodeError:
                return None
        order = [self._preferred] + [i for i in range(len(self._read_schemas)) if i != self._preferred]
        for variant in order:
            batch = self._read(joined, len(messages), self._read_schemas[variant])
            if batch is not None:
                self._preferred = variant
                return batch
        return None

    def _read(self, joined: bytes, rows: int, read_schema: pa.Schema) -> pa.RecordBatch | None:
        options = pa_json.ParseOptions(explicit_schema=read_schema, unexpected_field_behavior="ignore")
        read_options = pa_json.ReadOptions(use_threads=self._use_threads, block_size=len(joined) + 1)
        try:
            table = pa_json.read_json(io.BytesIO(joined), read_options=read_options, parse_options=options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != rows:
            return None
        arrays: list[pa.Array] = []
        for spec, column in zip(self._fields, table.itercolumns()):
            array = self._finish_column(spec, column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
            if array is None:
                return None
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, schema=self._target)

    @staticmethod
    def _finish_column(spec: FieldSpec, array: pa.Array) -> pa.Array | None:
        """Turn what Arrow's reader produced into the column's stored type (None: needs the slow path)."""
        if spec.single_value:
            if spec.data_type is DataType.BYTES:
                return hex_to_binary(array)
            if spec.data_type is DataType.TIMESTAMP and array.type != pa.timestamp("ms"):
                return array.cast(pa.timestamp("ms"))
            if spec.data_type is DataType.FLOAT:
                return array.cast(pa.float32(), safe=False)
            return array
        array = drop_null_list_elements(array)
        values = array.values
        if spec.data_type is DataType.BYTES:
            decoded = hex_to_binary(values)
            if decoded is None:
                return None
            values = decoded
        elif spec.data_type is DataType.TIMESTAMP and values.type != pa.timestamp("ms"):
            values = values.cast(pa.timestamp("ms"))
        elif spec.data_type is DataType.FLOAT:
            values = values.cast(pa.float32(), safe=False)
        else:
            return array
        mask = array.is_null() if array.null_count else None
        return pa.ListArray.from_arrays(array.offsets, values, type=spec.arrow_type(), mask=mask)

    def decode_each(
        self, messages: list[bytes], offsets: np.ndarray
    ) -> tuple[pa.RecordBatch, np.ndarray, list[BadRecord]]:
        """The slow path: parse message by message and coerce (``cuvee.decode.rows``); returns the batch, the kept
        positions and the bad records."""
        return self._rows.build(messages, offsets, _parse_object)


def _parse_object(raw: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise MessageError(f"malformed JSON: {error}") from None
    if not isinstance(doc, dict):
        kind = "null" if doc is None else _JSON_KIND.get(type(doc), type(doc).__name__)
        raise MessageError(f"not a JSON object (got {kind})")
    return doc
