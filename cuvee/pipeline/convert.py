"""Rows read by Spark (Arrow batches in Spark's types) to rows of the table's schema, inside a Spark task.

Each column is cast vectorised (Spark's microsecond timestamps become epoch milliseconds, CSV text becomes
numbers); only when a whole-column cast fails are that column's values coerced one by one with the decoder's own
rules (``cuvee.decode.coerce``), so the rows that cannot be converted are found, described and set aside as bad
rows instead of failing the job. The table's ingestion transforms and filter then run as they do for streams
(``cuvee.decode.transform``). Pure: no Spark, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import DataType, FieldSpec, Schema
from cuvee.decode.coerce import CoercionError, column_coercer
from cuvee.decode.transform import RowTransformer, decode_schema

MAX_BAD_TEXT = 10_000  # a bad row's description is cut here: one huge row must not blow up the bad-rows output


@dataclass
class Converted:
    """The rows that fit the schema (transformed and filtered), the bad ones described as JSON text, and how many
    rows the table's filter dropped."""

    batch: pa.RecordBatch
    bad: list[str] = field(default_factory=list)
    filtered: int = 0


def to_wire(arr: pa.Array, spec: FieldSpec) -> pa.Array:
    """TIMESTAMP columns as epoch milliseconds (int64), the form batches travel in between Spark stages."""
    if spec.data_type is DataType.TIMESTAMP and spec.single_value:
        return arr.cast(pa.int64())
    return arr


def from_wire(arr: pa.Array, spec: FieldSpec) -> pa.Array:
    if spec.data_type is DataType.TIMESTAMP and spec.single_value and not pa.types.is_timestamp(arr.type):
        return arr.cast(pa.timestamp("ms"))
    return arr


SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")  # Spark's TimestampType: microseconds since the epoch, UTC


def spark_arrow_type(spec: FieldSpec) -> pa.DataType:
    """The Arrow type Spark reads a column as: TIMESTAMP in microseconds UTC (Spark's TimestampType), multi-value
    columns as lists (ArrayType), JSON as text; the rest as stored."""
    base = SPARK_TIMESTAMP if spec.data_type is DataType.TIMESTAMP else spec.data_type.arrow_type()
    return base if spec.single_value else pa.list_(base)


def to_spark(table: pa.Table, fields: list[FieldSpec]) -> pa.Table:
    """``table``'s columns named by ``fields`` (stored, or as a server answers them: dictionary-encoded, any
    timestamp unit) in Spark's types, in that order."""
    columns = []
    for spec in fields:
        column = table.column(spec.name)
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        columns.append(column.cast(spark_arrow_type(spec)))
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, spark_arrow_type(f)) for f in fields]))


def convert_batch(batch: pa.RecordBatch, schema: Schema, transformer: RowTransformer | None) -> Converted:
    """``batch`` (any column names and types) as the schema's columns."""
    source_schema = decode_schema(schema, transformer)
    n = batch.num_rows
    good = np.ones(n, dtype=bool)
    reasons: dict[int, str] = {}
    columns: list[pa.Array] = []
    names = {name.lower(): name for name in batch.schema.names}
    for spec in source_schema.fields:
        name = spec.name if spec.name in batch.schema.names else names.get(spec.name.lower())
        if name is None:
            columns.append(pa.nulls(n, spec.arrow_type()))
            continue
        arr = batch.column(name)
        converted = _cast(arr, spec)
        if converted is None:
            converted, failures = _coerce(arr, spec)
            for row, reason in failures.items():
                good[row] = False
                reasons.setdefault(row, f"column {spec.name!r}: {reason}")
        columns.append(converted)
    table = pa.RecordBatch.from_arrays(columns, schema=source_schema.arrow_schema())
    bad = [_describe(batch, row, reason) for row, reason in sorted(reasons.items())]
    if not good.all():
        table = table.filter(pa.array(good))
    filtered = 0
    if transformer is not None and table.num_rows:
        result = transformer.apply(table, np.arange(table.num_rows))
        filtered = len(result.dropped_offsets)
        bad += [_describe(table, row, f"ingestion transform failed: {reason}") for row, reason in result.failed]
        table = result.batch
    return Converted(table, bad, filtered)


def _cast(arr: pa.Array, spec: FieldSpec) -> pa.Array | None:
    """The whole column in the schema's type, or None when some value does not convert."""
    target = spec.arrow_type()
    if arr.type == target:
        return arr
    try:
        if spec.data_type is DataType.TIMESTAMP and spec.single_value:
            if pa.types.is_timestamp(arr.type):  # Spark: microseconds, UTC
                return pc.cast(arr, pa.timestamp("ms", tz=arr.type.tz), safe=False).cast(target)
            if pa.types.is_integer(arr.type):
                return arr.cast(pa.int64()).cast(target)
            return None
        if spec.data_type in (DataType.LONG, DataType.INT) and pa.types.is_timestamp(arr.type):
            return pc.cast(arr, pa.timestamp("ms", tz=arr.type.tz), safe=False).cast(pa.int64()).cast(target)
        if spec.data_type is DataType.STRING and not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            return None  # numbers as text follow the coercion rules (JSON text), not Arrow's formatting
        return arr.cast(target)  # safe: overflow, fractions and unparsable text raise
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _coerce(arr: pa.Array, spec: FieldSpec) -> tuple[pa.Array, dict[int, str]]:
    coerce = column_coercer(spec)
    values: list[object] = []
    failures: dict[int, str] = {}
    for row, value in enumerate(arr.to_pylist()):
        if value is None:
            values.append(None)
            continue
        if hasattr(value, "timestamp"):  # a datetime from a timestamp column: epoch millis
            value = int(value.timestamp() * 1000)
        try:
            values.append(coerce(value))
        except (CoercionError, ValueError, TypeError, OverflowError) as exc:
            values.append(None)
            failures[row] = str(exc)
    return pa.array(values, spec.arrow_type()), failures


def _describe(batch: pa.RecordBatch, row: int, reason: str) -> str:
    values = batch.slice(row, 1).to_pylist()[0]
    text = orjson.dumps({"reason": reason, "row": values}, default=str).decode()
    return text if len(text) <= MAX_BAD_TEXT else text[:MAX_BAD_TEXT] + "…"
