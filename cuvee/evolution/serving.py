"""How a server serves a table's current schema over segments built under an earlier one.

A column added to a schema is not in the segments built before it. A reload does not rewrite them: each query's
view of such a segment gets the column as a constant array of its default null value (the schema's
``defaultNullValue``, else Pinot's default for its type and field type), made at read time. Why at read time
rather than rewriting each segment (Pinot's ``DefaultColumnHandler`` writes the column into the server's local
copy): nothing is written, so a reload is instant and a restart cannot lose it (a server reads the current schema
when it starts); the segments' files, and so their CRCs, stay the committed ones on every replica, so the deep
store copy, peer downloads and the CRC checks that decide which copy is valid need nothing new; and a change of
``defaultNullValue`` followed by a reload changes the answer the old segments give, as Pinot's reload does for
columns it generated. The cost is a constant array per segment a query reads the column of: a slice of one shared
buffer per (type, value) (STRING and JSON defaults: of one shared buffer of dictionary ids, with a one-value
dictionary), each buffer at most ``_CACHED_ROWS`` rows, so no memory grows with the number of segments or queries.

The same view also serves the schema's columns only, in the schema's types: a column a forced (backward
incompatible) update removed is no longer served, and one whose type a forced update changed is cast where its
values convert (``ColumnTypeMismatch`` where they do not).

Pure: a schema in, Arrow tables in and out.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.config.schema import DataType, FieldSpec, Schema
from cuvee.errors import CuveeError

INTERNAL_PREFIX = "__cuvee_"  # columns the server adds to a view for its own use (valid docs): always kept
_CACHED_ROWS = 1 << 24  # constant arrays up to this many rows are slices of one cached buffer; longer ones are made
_DICTIONARY_TYPES = {DataType.STRING, DataType.JSON}  # defaults served dictionary-encoded, as segments hold
# such dimensions: a query then scans one value, and the union with the segments that hold the column needs no
# decoding. Not BYTES: DuckDB fails filtering a dictionary of binary values (cuvee.query.execute.duckdb_readable
# decodes them anyway), so its default is served plain


class ColumnTypeMismatch(CuveeError):
    """A segment stores a column in another type than the schema now says (a forced update), and its values do
    not convert."""

    def __init__(self, column: str, stored: pa.DataType, wanted: pa.DataType):
        super().__init__(f"column {column!r} is stored as {stored} but the schema now says {wanted}, and its values "
                         "do not convert (a forced, backward-incompatible schema update)")
        self.column = column


@dataclass(frozen=True)
class ServedSchema:
    """A table's schema as one server serves it, and the metadata-store version it was read at."""

    schema: Schema
    version: int = -1
    _specs: dict[str, FieldSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_specs", {spec.name: spec for spec in self.schema.fields})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def spec(self, name: str) -> FieldSpec | None:
        return self._specs.get(name)

    def conform(self, table: pa.Table, wanted: Collection[str] | None = None) -> pa.Table:
        """``table`` (a segment's view) as this schema serves it: the schema's columns in ``wanted`` (all when
        None), in schema order, each the segment's own column (cast to the schema's type when a forced update
        changed it) or its default null value when the segment has none; the server's internal columns kept. Zero
        copy for the columns the segment has in the schema's type."""
        have = set(table.schema.names)
        names = [n for n in self._specs if wanted is None or n in wanted]
        if all(n in have for n in names) and not any(_stale(table, self._specs[n]) for n in names) and \
                [n for n in table.schema.names if not n.startswith(INTERNAL_PREFIX)] == names:
            return table  # the common case: a segment built under this schema, read as it is
        arrays: list[pa.ChunkedArray | pa.Array] = []
        fields: list[pa.Field] = []
        for name in names:
            spec = self._specs[name]
            if name in have:
                column = table.column(name)
                if _stale(table, spec):
                    column = _cast(name, column, spec.arrow_type())
                arrays.append(column)
                fields.append(pa.field(name, column.type))
            else:
                column = default_column(spec, table.num_rows)
                arrays.append(column)
                fields.append(pa.field(name, column.type))
        for name in table.schema.names:
            if name.startswith(INTERNAL_PREFIX):
                arrays.append(table.column(name))
                fields.append(table.schema.field(name))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def describe(self, stored: Mapping[str, str]) -> list[dict[str, Any]]:
        """Each column as served over a segment that stores ``stored`` (column → its stored data type): where its
        values come from (``segment``, or ``default``: the default null value, not stored), and the segment's
        columns the schema no longer has (``notServed``)."""
        out: list[dict[str, Any]] = []
        for spec in self.schema.fields:
            item: dict[str, Any] = {"name": spec.name, "dataType": spec.data_type.value,
                                    "fieldType": _FIELD_TYPES[spec.role.value], "singleValue": spec.single_value}
            if spec.name in stored:
                item["source"] = "segment"
                if stored[spec.name] != spec.data_type.value:
                    item["storedDataType"] = stored[spec.name]
            else:
                item["source"] = "default"
                item["defaultNullValue"] = _json_value(spec.null_value)
            out.append(item)
        for name, data_type in stored.items():
            if name not in self._specs and not name.startswith(INTERNAL_PREFIX):
                out.append({"name": name, "storedDataType": data_type, "source": "notServed"})
        return out


_FIELD_TYPES = {"dimensionFieldSpecs": "DIMENSION", "metricFieldSpecs": "METRIC", "dateTimeFieldSpecs": "DATE_TIME"}


def _logical(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(arrow_type):
        return arrow_type.value_type
    if pa.types.is_list(arrow_type) and pa.types.is_dictionary(arrow_type.value_type):
        return pa.list_(arrow_type.value_type.value_type)
    return arrow_type


def _stale(table: pa.Table, spec: FieldSpec) -> bool:
    """The segment holds the column in another logical type than the schema's (a forced type change)."""
    index = table.schema.get_field_index(spec.name)
    return index >= 0 and _logical(table.schema.field(index).type) != spec.arrow_type()


def _cast(name: str, column: pa.ChunkedArray, wanted: pa.DataType) -> pa.ChunkedArray:
    chunks = []
    try:
        for chunk in column.chunks:
            if pa.types.is_dictionary(chunk.type):  # only the distinct values convert
                chunks.append(pa.DictionaryArray.from_arrays(chunk.indices, chunk.dictionary.cast(wanted)))
            else:
                chunks.append(_decoded(chunk).cast(wanted))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        raise ColumnTypeMismatch(name, _logical(column.type), wanted) from None
    kinds = {c.type for c in chunks}
    if len(kinds) > 1:  # some chunks encoded, some not: one form
        chunks = [_decoded(c) for c in chunks]
    return pa.chunked_array(chunks, type=chunks[0].type if chunks else wanted)


def _decoded(chunk: pa.Array) -> pa.Array:
    if pa.types.is_dictionary(chunk.type):
        return chunk.dictionary.take(chunk.indices)
    if pa.types.is_list(chunk.type) and pa.types.is_dictionary(chunk.type.value_type):
        values = chunk.values
        return pa.ListArray.from_arrays(chunk.offsets, values.dictionary.take(values.indices))
    return chunk


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value


# ---- constant arrays -----------------------------------------------------------------------------------------


class _Constants:
    """Arrays of one repeated value, sliced (zero copy) from the longest one made so far per (type, value)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrays: dict[tuple[str, str], pa.Array] = {}

    def get(self, key: tuple[str, str], rows: int, make: Any) -> pa.Array:
        if rows > _CACHED_ROWS:
            return make(rows)
        with self._lock:
            held = self._arrays.get(key)
        if held is None or len(held) < rows:  # grown by doubling (fewer rebuilds), never past _CACHED_ROWS
            held = make(max(rows, min(max(2 * len(held) if held is not None else rows, 1024), _CACHED_ROWS)))
            with self._lock:
                current = self._arrays.get(key)
                if current is None or len(current) < len(held):
                    self._arrays[key] = held
        return held.slice(0, rows)


_CONSTANTS = _Constants()


def with_defaults(table: pa.Table, fields: Sequence[FieldSpec]) -> pa.Table:
    """``table``'s columns ``fields``, in that order, each a column the table lacks as its default null value, plain
    (for readers of decoded rows: the Spark data source, maintenance jobs rebuilding segments)."""
    arrays = [table.column(f.name) if f.name in table.schema.names else default_column(f, table.num_rows, encoded=False)
              for f in fields]
    return pa.Table.from_arrays(arrays, names=[f.name for f in fields])


def default_column(spec: FieldSpec, rows: int, *, encoded: bool = True) -> pa.Array:
    """``rows`` copies of ``spec``'s default null value, in the schema's type (a multi-value column: one list of
    that one value per row, as Pinot fills a multi-value default); string-like single values dictionary-encoded
    unless not ``encoded``."""
    base = spec.data_type.arrow_type()
    value = spec.null_value
    if spec.single_value and spec.data_type in _DICTIONARY_TYPES and encoded:  # ids into a one-value dictionary:
        # the decoded values are never made (nor cached) for this form
        ids = _CONSTANTS.get(("ids", ""), rows, lambda n: pa.array(np.zeros(n, dtype=np.int32)))
        return pa.DictionaryArray.from_arrays(ids, pa.array([value], base))
    values = _CONSTANTS.get((str(base), repr(value)), rows, lambda n: _repeat(base, value, n))
    if not spec.single_value:
        offsets = _CONSTANTS.get(("offsets", ""), rows + 1, lambda n: pa.array(np.arange(n, dtype=np.int32)))
        return pa.ListArray.from_arrays(offsets, values)
    return values


def _repeat(arrow_type: pa.DataType, value: Any, rows: int) -> pa.Array:
    if pa.types.is_timestamp(arrow_type):
        return pa.array(np.full(rows, int(value), dtype=np.int64)).cast(arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.array(np.full(rows, bool(value)))
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return pa.array(np.full(rows, value, dtype=arrow_type.to_pandas_dtype()))
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, dtype=np.int32)),
                                          pa.array([value], arrow_type)).dictionary_decode()
