"""Spark's pushed filters as our own predicates: applied to the Arrow batches a reader yields, and used to skip
whole segments by their time range. Pure (no pyspark import: filters are recognised by their class names).

Only filters Arrow evaluates exactly as Spark does are taken (the reader does not hand them back, so Spark does
not evaluate them again): comparisons and ``IN`` on integer, string and boolean columns, comparisons on
TIMESTAMP columns with a zone-aware literal (Spark sends timestamps as UTC ``datetime``s; compared as epoch
microseconds), ``IS [NOT] NULL`` on any single-value column. Floats (Spark orders NaN above every number, Arrow
does not), multi-value columns, negations and string matching are left to Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import DataType, FieldSpec, Schema

_COMPARE = {"EqualTo": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=", "LessThan": "<",
            "LessThanOrEqual": "<="}
_ARROW_OPS = {"=": pc.equal, ">": pc.greater, ">=": pc.greater_equal, "<": pc.less, "<=": pc.less_equal}
_EXACT_TYPES = {DataType.INT: int, DataType.LONG: int, DataType.STRING: str, DataType.JSON: str,
                DataType.BOOLEAN: bool}
_INT_RANGES = {DataType.INT: (-(2**31), 2**31 - 1), DataType.LONG: (-(2**63), 2**63 - 1)}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_TIME_TYPES = {DataType.INT, DataType.LONG, DataType.TIMESTAMP}
MAX_IN_VALUES = 10_000  # a longer IN list is left to Spark


@dataclass(frozen=True)
class Predicate:
    """``column op value``; ``op`` one of = > >= < <= in is_null not_null. TIMESTAMP values are epoch
    microseconds (Spark's unit)."""

    column: str
    op: str
    value: Any = None


def from_spark(spark_filter: Any, schema: Schema) -> Predicate | None:
    """Our predicate for one of Spark's pushed filters, or None when we cannot take it."""
    kind = type(spark_filter).__name__
    path = getattr(spark_filter, "attribute", ())
    if len(path) != 1 or not schema.has_column(path[0]):
        return None
    spec = schema.column(path[0])
    if not spec.single_value:
        return None
    if kind == "IsNull":
        return Predicate(spec.name, "is_null")
    if kind == "IsNotNull":
        return Predicate(spec.name, "not_null")
    if kind in _COMPARE:
        value = _literal(spark_filter.value, spec)
        if value is None:
            return None
        return Predicate(spec.name, _COMPARE[kind], value)
    if kind == "In" and len(spark_filter.value) <= MAX_IN_VALUES:
        values = [_literal(v, spec) for v in spark_filter.value]
        if any(v is None for v in values):
            return None
        return Predicate(spec.name, "in", tuple(values))
    return None


def _literal(value: Any, spec: FieldSpec) -> Any:
    """The filter's literal in the column's Spark-side terms, or None when it is not the column's kind."""
    if spec.data_type is DataType.TIMESTAMP:
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return (value - _EPOCH) // dt.timedelta(microseconds=1)
        return None  # a naive (TIMESTAMP_NTZ) literal: Spark casts the column first; leave it to Spark
    kind = _EXACT_TYPES.get(spec.data_type)
    if kind is None or isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        return None
    if kind is int and not _INT_RANGES[spec.data_type][0] <= value <= _INT_RANGES[spec.data_type][1]:
        return None
    return value


def apply(table: pa.Table, predicates: Sequence[Predicate]) -> pa.Table:
    """The rows of ``table`` (Spark-typed: timestamps in microseconds) every predicate keeps."""
    if not predicates or table.num_rows == 0:
        return table
    mask = None
    for predicate in predicates:
        keep = _mask(table.column(predicate.column), predicate)
        mask = keep if mask is None else pc.and_kleene(mask, keep)
    return table.filter(mask, null_selection_behavior="drop")


def _mask(column: pa.ChunkedArray, predicate: Predicate) -> pa.ChunkedArray:
    if predicate.op == "is_null":
        return pc.is_null(column)
    if predicate.op == "not_null":
        return pc.is_valid(column)
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    if predicate.op == "in":
        return pc.is_in(column, value_set=pa.array(predicate.value, type=column.type))
    return _ARROW_OPS[predicate.op](column, pa.scalar(predicate.value, type=column.type))


def may_match(predicates: Iterable[Predicate], time_spec: FieldSpec | None, time_min: int | None,
              time_max: int | None) -> bool:
    """False when a segment whose time column spans [time_min, time_max] (stored units: milliseconds for
    TIMESTAMP) cannot hold a row the predicates keep; True whenever that is not certain."""
    if time_spec is None or time_min is None or time_max is None or time_spec.data_type not in _TIME_TYPES:
        return True  # a date-string time column's range says nothing comparable
    scale = 1000 if time_spec.data_type is DataType.TIMESTAMP else 1  # predicate units per stored unit
    low, high = time_min * scale, time_max * scale + scale - 1
    for p in predicates:
        if p.column != time_spec.name or p.op in ("is_null", "not_null"):
            continue
        v = p.value
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (v if p.op == "in" else (v,))):
            continue
        if p.op == "in":
            if not any(low <= x <= high for x in v):
                return False
        elif not {"=": low <= v <= high, ">": high > v, ">=": high >= v, "<": low < v, "<=": low <= v}[p.op]:
            return False
    return True
