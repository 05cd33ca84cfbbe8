"""Build an immutable segment from Arrow data: a mutable segment's snapshot or plain record batches (Spark tasks).

Everything is vectorised: dictionary columns are re-encoded against a sorted dictionary by remapping indices
(argsort of the dictionary values, never a row loop), the sorted column is applied as one permutation, and index
bitmaps come from one argsort of dictionary ids. See ``format.py`` for the files written and ``encoding.py`` for
why their bytes are deterministic.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.datetime_format import TimeFormatKind, parse_datetime_format
from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.config.string_times import column_string_times, millis_range
from cuvee.config.table import IndexingConfig
from cuvee.errors import UserError
from cuvee.segment import encoding, indexes, stats
from cuvee.segment.errors import SegmentError
from cuvee.segment.format import ColumnFile, column_file, compute_crc, write_array, write_arrow, write_metadata
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.metadata import ColumnMetadata, SegmentMetadata
from cuvee.segment.naming import check_segment_name
from cuvee.segment.partitioning import PARTITIONS_KEY, partition_spec, segment_partitions

log = logging.getLogger(__name__)

_RANGE_TYPES = {DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE, DataType.TIMESTAMP}


@dataclass(frozen=True)
class ColumnPlan:
    """What to build for one column, decided from the schema and the table's indexing config."""

    spec: FieldSpec
    has_dictionary: bool
    inverted: bool
    range: bool
    bloom: bool


def plan_columns(schema: Schema, indexing: IndexingConfig) -> list[ColumnPlan]:
    """Validate the indexing config against the schema; dimensions and time columns get dictionaries,
    metrics and noDictionaryColumns stay raw (a metric with an inverted index gets a dictionary)."""
    problems: list[str] = []
    configured = {
        "invertedIndexColumns": indexing.inverted_index_columns,
        "noDictionaryColumns": indexing.no_dictionary_columns,
        "rangeIndexColumns": indexing.range_index_columns,
        "bloomFilterColumns": indexing.bloom_filter_columns,
        "sortedColumn": (indexing.sorted_column,) if indexing.sorted_column else (),
    }
    for key, columns in configured.items():
        problems += [f"{key} names unknown column {c!r}" for c in columns if not schema.has_column(c)]
    no_dict, inverted = set(indexing.no_dictionary_columns), set(indexing.inverted_index_columns)
    problems += [f"column {c!r} is in both noDictionaryColumns and invertedIndexColumns" for c in sorted(no_dict & inverted)]
    sorted_col = indexing.sorted_column
    if sorted_col and schema.has_column(sorted_col) and not schema.column(sorted_col).single_value:
        problems.append(f"sortedColumn {sorted_col!r} is multi-valued; only single-value columns can be sorted")
    for c in indexing.range_index_columns:
        if schema.has_column(c) and schema.column(c).data_type not in _RANGE_TYPES:
            problems.append(f"range index on {c!r} needs a numeric or TIMESTAMP column")
    if problems:
        raise UserError("indexing config does not fit the schema: " + "; ".join(problems))
    return [
        ColumnPlan(
            spec=spec,
            has_dictionary=spec.name not in no_dict and (spec.role is not FieldRole.METRIC or spec.name in inverted),
            inverted=spec.name in inverted,
            range=spec.name in indexing.range_index_columns,
            bloom=spec.name in indexing.bloom_filter_columns,
        )
        for spec in schema.fields
    ]


def build_segment(
    data: pa.Table | Iterable[pa.RecordBatch],
    schema: Schema,
    indexing: IndexingConfig,
    out_dir: str | Path,
    segment_name: str,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    extra_metadata: dict[str, Any] | None = None,
    table_name: str | None = None,
    time_column: str | None = None,
    creation_time_ms: int | None = None,
    overwrite: bool = False,
) -> ImmutableSegment:
    """Write ``out_dir/segment_name/`` from Arrow data whose columns are the schema's (plain or dictionary arrays;
    extra columns are ignored) and return it loaded. The directory appears atomically (built aside, renamed)."""
    check_segment_name(segment_name)
    plans = plan_columns(schema, indexing)
    if time_column is not None and not schema.has_column(time_column):
        raise UserError(f"time column {time_column!r} is not in schema {schema.name!r}")
    columns = _conformed_columns(data, schema)
    num_docs = len(next(iter(columns.values()))) if columns else 0
    if indexing.sorted_column:
        permutation = pa.array(encoding.sort_permutation(columns[indexing.sorted_column]))
        columns = {name: arr.take(permutation) for name, arr in columns.items()}

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    final = out / segment_name
    if final.exists() and not overwrite:
        raise SegmentError(f"segment directory {final} already exists")
    work = out / f".{segment_name}.building-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    try:
        column_stats = {plan.spec.name: _write_column(work, plan, columns[plan.spec.name]) for plan in plans}
        time_stats = column_stats.get(time_column) if time_column else None
        start_time, end_time, unit = _time_range(schema, time_column, columns, time_stats)
        metadata = SegmentMetadata(
            segment_name=segment_name,
            table_name=table_name or schema.name,
            total_docs=num_docs,
            crc=compute_crc(work),
            creation_time_ms=int(time.time() * 1000) if creation_time_ms is None else creation_time_ms,
            columns=column_stats,
            start_offset=start_offset,
            end_offset=end_offset,
            time_column=time_column,
            start_time=start_time,
            end_time=end_time,
            time_unit=unit,
            sorted_column=indexing.sorted_column,
            # the partitions are the rows' own, never a caller's: the controller places and the broker joins by them
            custom={**{k: v for k, v in (extra_metadata or {}).items() if k != PARTITIONS_KEY},
                    **_partition_metadata(columns, schema, indexing)},
        )
        write_metadata(work, metadata)
        if final.exists():
            shutil.rmtree(final)
        os.replace(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ImmutableSegment.load(final)


def _partition_metadata(columns: dict[str, pa.Array], schema: Schema, indexing: IndexingConfig) -> dict[str, Any]:
    """The partitions of the rows under the table's ``segmentPartitionConfig`` (none without one, or when the
    stored config no longer validates: the segment is then simply not known to be partitioned)."""
    try:
        spec = partition_spec(indexing.extra, schema)
    except UserError as exc:
        log.warning("segment partition metadata skipped: %s", exc)
        return {}
    if spec is None or spec.column not in columns:
        return {}
    return {PARTITIONS_KEY: segment_partitions(columns[spec.column], spec).to_json()}


def _time_range(schema: Schema, time_column: str | None, columns: dict[str, pa.Array],
                stats: ColumnMetadata | None) -> tuple[Any, Any, str | None]:
    """The segment's start and end time and their unit. A column of formatted date strings (SIMPLE_DATE_FORMAT)
    records the instants of its earliest and latest values in epoch milliseconds, as Pinot does: its string
    min/max is not its time range where the pattern does not sort as time, and the hybrid time boundary is
    computed in millis (``cuvee.config.string_times``)."""
    if time_column is None:
        return None, None, None
    times = column_string_times(schema, time_column)
    if times is not None:
        low, high = millis_range(columns[time_column], times)
        return low, high, "MILLISECONDS"
    return (stats.min if stats else None), (stats.max if stats else None), time_unit(schema.column(time_column))


def time_unit(spec: FieldSpec) -> str | None:
    """The unit of an epoch time column (from Pinot's format string); None for date strings or no format."""
    if spec.data_type is DataType.TIMESTAMP:
        return "MILLISECONDS"
    if not spec.format:
        return None
    try:
        parsed = parse_datetime_format(spec.format)
    except ValueError:
        return None
    return parsed.unit if parsed.kind is TimeFormatKind.EPOCH else None


def _conformed_columns(data: pa.Table | Iterable[pa.RecordBatch], schema: Schema) -> dict[str, pa.Array]:
    """One contiguous array per schema column, cast to the schema's type (dictionary values cast in place)."""
    table = data if isinstance(data, pa.Table) else _table_from_batches(data, schema)
    missing = [name for name in schema.column_names if name not in table.column_names]
    if missing:
        raise UserError(f"input has no column {', '.join(map(repr, missing))} of schema {schema.name!r}")
    return {spec.name: _conform(encoding.combine(table.column(spec.name)), spec) for spec in schema.fields}


def _table_from_batches(batches: Iterable[pa.RecordBatch], schema: Schema) -> pa.Table:
    batches = list(batches)
    if not batches:
        return schema.arrow_schema().empty_table()
    return pa.Table.from_batches(batches)


def _conform(arr: pa.Array, spec: FieldSpec) -> pa.Array:
    value_type = spec.data_type.arrow_type()
    try:
        if spec.single_value:
            return _cast_values(arr, value_type)
        if pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_type))
        if not pa.types.is_list(arr.type):
            raise UserError(f"column {spec.name!r} is multi-valued but the input has {arr.type}, not a list")
        child = _cast_values(arr.values, value_type)
        if child.type == arr.type.value_type:
            return arr
        return pa.ListArray.from_arrays(arr.offsets, child, mask=arr.is_null() if arr.null_count else None)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UserError(f"column {spec.name!r}: cannot convert {arr.type} to {spec.arrow_type()}: {exc}") from exc


def _cast_values(arr: pa.Array, value_type: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        if arr.type.value_type == value_type:
            return arr
        return pa.DictionaryArray.from_arrays(arr.indices, arr.dictionary.cast(value_type))
    return arr if arr.type == value_type else arr.cast(value_type)


def _write_column(segment_dir: Path, plan: ColumnPlan, arr: pa.Array) -> ColumnMetadata:
    """Write one column's forward index, dictionary and indexes; return its stats."""
    name, spec = plan.spec.name, plan.spec
    single = spec.single_value
    if single:
        values, docs, offsets = arr, np.arange(len(arr), dtype=np.uint32), None
    else:
        shape = _list_shape(arr)
        offsets, docs = encoding.list_offsets_and_parents(shape)
        values = arr.flatten()

    size = 0
    if plan.has_dictionary:
        encoded = encoding.dictionary_encode(values)
        value_stats = stats.dictionary_stats(encoded, single)
        element_valid = encoded.valid
        size += write_array(column_file(segment_dir, name, ColumnFile.DICTIONARY), name, encoded.dictionary)
        forward = encoded.forward()
        if offsets is not None:
            forward = encoding.with_validity(
                pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), forward), encoding.validity(arr)
            )
    else:
        encoded = None
        forward = encoding.canonical_values(arr)
        element_valid = encoding.validity(values)
        value_stats = stats.raw_stats(values, element_valid, single)
    size += write_array(column_file(segment_dir, name, ColumnFile.FORWARD), name, forward)

    docs_present = docs if element_valid is None else docs[element_valid]
    if plan.inverted:
        assert encoded is not None  # plan_columns gives every inverted-index column a dictionary
        ids_present = encoded.ids if element_valid is None else encoded.ids[element_valid]
        bitmaps = indexes.inverted_index(ids_present, docs_present, len(encoded.dictionary))
        size += write_array(column_file(segment_dir, name, ColumnFile.INVERTED), name, bitmaps)
    if plan.range:
        present = values if element_valid is None else values.filter(pa.array(element_valid))
        index = indexes.range_index(encoding.canonical_values(present), docs_present)
        size += write_arrow(column_file(segment_dir, name, ColumnFile.RANGE), index)
    bloom_hashes = 0
    if plan.bloom:
        distinct = encoded.dictionary if encoded is not None else _distinct(values)
        words, bloom_hashes = indexes.bloom_filter(distinct)
        size += write_array(column_file(segment_dir, name, ColumnFile.BLOOM), name, pa.array(words, pa.uint8()))

    lengths = np.diff(offsets) if offsets is not None else None
    return ColumnMetadata(
        name=name,
        data_type=spec.data_type.value,
        single_value=single,
        cardinality=value_stats.cardinality,
        min=value_stats.min,
        max=value_stats.max,
        is_sorted=value_stats.is_sorted,
        null_count=arr.null_count,
        has_dictionary=plan.has_dictionary,
        has_inverted_index=plan.inverted,
        has_range_index=plan.range,
        has_bloom_filter=plan.bloom,
        bytes=size,
        total_values=len(docs_present),
        max_values_per_entry=1 if lengths is None else (int(lengths.max()) if len(lengths) else 0),
        bloom_hashes=bloom_hashes,
    )


def _distinct(values: pa.Array) -> pa.Array:
    """Distinct non-null values (order irrelevant: the bloom filter is a set)."""
    if pa.types.is_dictionary(values.type):
        values = values.dictionary.take(values.indices)
    return encoding.canonical_values(pc.unique(values.drop_null()))


def _list_shape(arr: pa.Array) -> pa.Array:
    """A canonical list array with ``arr``'s shape (offsets) and no payload worth keeping."""
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(arr) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.nulls(int(offsets[-1]), pa.int8()))
