"""Shared builders for the immutable-segment tests: schemas, tables, and value normalisation for comparisons."""

from __future__ import annotations

import math
import struct
from typing import Any

import pyarrow as pa

from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema

ALL_TYPES = list(DataType)


def schema_of(*fields: tuple[str, DataType, bool] | tuple[str, DataType, bool, FieldRole], name: str = "t") -> Schema:
    specs = []
    for f in fields:
        role = f[3] if len(f) > 3 else FieldRole.DIMENSION  # type: ignore[misc]
        fmt = "1:MILLISECONDS:EPOCH" if role is FieldRole.DATE_TIME else None
        specs.append(FieldSpec(name=f[0], data_type=f[1], role=role, single_value=f[2], format=fmt))
    return Schema(name=name, fields=tuple(specs))


def table_of(schema: Schema, columns: dict[str, list[Any]]) -> pa.Table:
    return pa.table({f.name: pa.array(columns[f.name], f.arrow_type()) for f in schema.fields}, schema=schema.arrow_schema())


def normalise(value: Any) -> Any:
    """A hashable, totally ordered stand-in that keeps -0.0 apart from 0.0 and compares NaN equal to itself."""
    if isinstance(value, list):
        return ("list", tuple(normalise(v) for v in value))
    if isinstance(value, float):
        return ("float", struct.pack(">d", value)) if not math.isnan(value) else ("float", "nan", struct.pack(">d", value))
    if value is None:
        return ("null",)
    return (type(value).__name__, value)


def row_multiset(table: pa.Table) -> list[tuple[Any, ...]]:
    rows = [tuple(normalise(r[c]) for c in table.column_names) for r in table.to_pylist()]
    return sorted(rows, key=repr)
