"""The consuming (mutable) segment: the rows of one partition since its last commit, queryable while it grows.

Contract (for the consumer, the query engine and the immutable segment builder):

- ``MutableSegment(schema, indexing, capacity_rows)`` preallocates every single-value column to
  ``capacity_rows`` (the segment's row threshold). Columns are dictionary-encoded unless they are metrics or
  listed in ``noDictionaryColumns``; a column with an inverted index is always dictionary-encoded.
- ``append(batch, offsets)`` takes a decoded batch whose columns are ``schema.arrow_schema()`` (the decoder's
  output) and the batch's stream offsets, and returns how many rows it took: all of them, or fewer when the
  segment reaches capacity. Vectorised per column; no Python loop per row. One writer thread only.
- Publication: the writer fills buffers, dictionaries and indexes first and then assigns ``num_docs``. Readers
  read ``num_docs`` once and touch nothing at or beyond it, so they need no lock and always see a prefix of
  whole rows. ``start_offset``/``end_offset`` and the time range are updated just before ``num_docs``.
- ``snapshot(num_docs=None, first_doc=0, columns=None) -> pyarrow.Table``: rows ``first_doc`` to ``num_docs``,
  the schema's columns (or ``columns``) in schema order. Dictionary-encoded
  columns are ``DictionaryArray``s (int32 indices, dictionary values in id order; the dictionary may hold
  values first used by rows past the snapshot), raw columns are plain arrays of ``field.arrow_type()``;
  multi-value columns are list arrays (of dictionary arrays when dictionary-encoded). Nulls are Arrow nulls;
  in storage a single-value null holds the column's null value (so it has a dictionary id) and a multi-value
  null is an empty list. Fixed-width buffers are shared with the segment, not copied (booleans and null masks
  are packed into bits on the way out).
- ``inverted_index(column, value)`` is a pyroaring ``BitMap`` of the non-null docs below ``num_docs`` (or the
  given count) that hold ``value``.
- ``end_offset`` is one past the offset of the last row taken; the consumer, which also sees the offsets of
  bad records, owns the offset at which the segment really ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from cuvee.config.schema import FieldRole, FieldSpec, Schema
from cuvee.config.table import IndexingConfig
from cuvee.errors import UserError
from cuvee.segment.mutable.columns import Column, DictStore, MultiValueColumn, SingleValueColumn, make_store
from cuvee.segment.mutable.inverted import InvertedIndex

BeforePublish = Callable[[pa.RecordBatch, int, Callable[[], None]], None]

# Elements preallocated per row for a multi-value column (the store doubles when it needs more).
MULTI_VALUE_ELEMENTS_PER_ROW = 2


def is_dictionary_encoded(spec: FieldSpec, indexing: IndexingConfig) -> bool:
    """Pinot's rule: dictionary unless a metric or in noDictionaryColumns; an inverted index needs one."""
    if spec.name in indexing.inverted_index_columns:
        return True
    return spec.role is not FieldRole.METRIC and spec.name not in indexing.no_dictionary_columns


def _check_indexing(schema: Schema, indexing: IndexingConfig) -> None:
    problems = []
    for kind, names in (
        ("invertedIndexColumns", indexing.inverted_index_columns),
        ("noDictionaryColumns", indexing.no_dictionary_columns),
    ):
        problems += [f"{kind} names {name!r}, which schema {schema.name!r} lacks" for name in names
                     if not schema.has_column(name)]
    problems += [f"column {name!r} is in both invertedIndexColumns and noDictionaryColumns; an inverted index "
                 "needs a dictionary" for name in indexing.inverted_index_columns
                 if name in indexing.no_dictionary_columns]
    if problems:
        raise UserError("; ".join(problems))


def _build_column(spec: FieldSpec, indexing: IndexingConfig, capacity: int) -> Column:
    dictionary = is_dictionary_encoded(spec, indexing)
    index = InvertedIndex() if spec.name in indexing.inverted_index_columns else None
    arrow_type = spec.data_type.arrow_type()
    if spec.single_value:
        return SingleValueColumn(spec, make_store(arrow_type, dictionary, capacity), capacity, index)
    store = make_store(arrow_type, dictionary, capacity * MULTI_VALUE_ELEMENTS_PER_ROW)
    return MultiValueColumn(spec, store, capacity, index)


class MutableSegment:
    """See the module docstring for the contract."""

    def __init__(
        self,
        schema: Schema,
        indexing: IndexingConfig,
        capacity_rows: int,
        *,
        name: str = "",
        time_column: str | None = None,
    ) -> None:
        if capacity_rows <= 0:
            raise ValueError(f"capacity_rows must be positive, got {capacity_rows}")
        _check_indexing(schema, indexing)
        if time_column is None:
            time_column = next((f.name for f in schema.fields if f.role is FieldRole.DATE_TIME), None)
        elif not schema.has_column(time_column):
            raise UserError(f"time column {time_column!r} is not in schema {schema.name!r}")
        self.name = name
        self.schema = schema
        self.indexing = indexing
        self.capacity = capacity_rows
        self.time_column = time_column
        self._arrow_schema = schema.arrow_schema()
        self._columns: dict[str, Column] = {
            spec.name: _build_column(spec, indexing, capacity_rows) for spec in schema.fields
        }
        self.start_offset: int | None = None
        self.end_offset: int | None = None
        self.min_time: Any = None
        self.max_time: Any = None
        self._broken: BaseException | None = None
        self.num_docs = 0

    @property
    def is_full(self) -> bool:
        return self.num_docs >= self.capacity

    def is_dictionary_encoded(self, column: str) -> bool:
        return isinstance(self._column(column).store, DictStore)

    def append(self, batch: pa.RecordBatch, offsets: Sequence[int] | np.ndarray, *,
               before_publish: BeforePublish | None = None) -> int:
        """Append the leading rows of ``batch`` that fit; returns how many were taken. ``before_publish(rows,
        first_doc, publish)``, if given, runs once the rows are written and must call ``publish()`` to make them
        readable (an upsert table decides which docs are valid in the same step); if it raises, the segment is
        broken (rows past ``num_docs`` were written) and the error propagates."""
        if self._broken is not None:
            raise RuntimeError(f"segment {self.name!r} failed during an earlier append: {self._broken}")
        stream_offsets = np.asarray(offsets, dtype=np.int64)
        if len(stream_offsets) != batch.num_rows:
            raise ValueError(f"{batch.num_rows} rows but {len(stream_offsets)} offsets")
        first_doc = self.num_docs
        taken = min(batch.num_rows, self.capacity - first_doc)
        if taken <= 0:
            return 0
        batch = self._conform(batch)
        if taken < batch.num_rows:
            batch = batch.slice(0, taken)
        try:
            for column, values in zip(self._columns.values(), batch.columns):
                column.append(values, first_doc)
            self._track_time(batch)
        except BaseException as error:
            self._broken = error  # partial writes past num_docs would corrupt the indexes of later appends
            raise
        if self.start_offset is None:
            self.start_offset = int(stream_offsets[0])
        self.end_offset = int(stream_offsets[taken - 1]) + 1

        def publish() -> None:
            self.num_docs = first_doc + taken  # readers may now see these rows

        if before_publish is None:
            publish()
            return taken
        try:
            before_publish(batch, first_doc, publish)
        except BaseException as error:
            self._broken = error
            raise
        return taken

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        expected = self._arrow_schema
        if batch.schema.names != expected.names:
            if not set(expected.names) <= set(batch.schema.names):
                missing = sorted(set(expected.names) - set(batch.schema.names))
                raise ValueError(f"batch lacks columns {missing} of schema {self.schema.name!r}")
            batch = batch.select(expected.names)
        if batch.schema.types != expected.types:
            try:
                batch = batch.cast(expected)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError) as error:
                raise ValueError(f"batch does not match schema {self.schema.name!r}: {error}") from error
        return batch

    def _track_time(self, batch: pa.RecordBatch) -> None:
        if self.time_column is None:
            return
        values = batch.column(self.time_column)
        if not self.schema.column(self.time_column).single_value:
            return
        if pa.types.is_timestamp(values.type):
            values = values.cast(pa.int64())
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:
            return
        self.min_time = low if self.min_time is None else min(self.min_time, low)
        self.max_time = high if self.max_time is None else max(self.max_time, high)

    def _column(self, name: str) -> Column:
        try:
            return self._columns[name]
        except KeyError:
            raise KeyError(f"segment {self.name!r} has no column {name!r}") from None

    def _visible(self, num_docs: int | None) -> int:
        published = self.num_docs
        if num_docs is None:
            return published
        if not 0 <= num_docs <= published:
            raise ValueError(f"num_docs {num_docs} is outside 0..{published} (the rows published so far)")
        return num_docs

    def snapshot(self, num_docs: int | None = None, *, first_doc: int = 0,
                 columns: Sequence[str] | None = None) -> pa.Table:
        """The first ``num_docs`` rows (default: all published) as an Arrow table; see the module docstring.
        ``first_doc``: only the rows from it on (a block of rows: only their null masks, booleans and
        multi-value offsets are converted, so a reader of the newest rows pays for those alone); ``columns``: only
        these, in this order (default: every column, in schema order)."""
        count = self._visible(num_docs)
        if not 0 <= first_doc <= count:
            raise ValueError(f"first_doc {first_doc} is outside 0..{count}")
        names = list(self._columns) if columns is None else list(columns)
        arrays = [self._column(name).to_arrow(count, first_doc) for name in names]
        return pa.Table.from_arrays(arrays, names=names)

    def dictionary(self, column: str) -> pa.Array:
        """A dictionary-encoded column's values in id order."""
        store = self._column(column).store
        if not isinstance(store, DictStore):
            raise ValueError(f"column {column!r} of segment {self.name!r} is not dictionary-encoded")
        return store.dictionary.values_array()

    def inverted_index(self, column: str, value: Any, num_docs: int | None = None) -> BitMap:
        """Docs (below ``num_docs``, default all published) whose ``column`` holds ``value``."""
        count = self._visible(num_docs)
        found = self._column(column)
        if found.index is None:
            raise ValueError(f"column {column!r} of segment {self.name!r} has no inverted index")
        assert isinstance(found.store, DictStore)
        if value is None:
            return BitMap()  # nulls are not indexed; the null mask says where they are
        try:
            dictionary_id = found.store.dictionary.id_of(value)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as error:
            raise ValueError(f"{value!r} is not a {found.spec.data_type.value} value of {column!r}") from error
        if dictionary_id is None:
            return BitMap()
        return found.index.docs(dictionary_id, count)

    def null_count(self, column: str, num_docs: int | None = None) -> int:
        return self._column(column).null_count(self._visible(num_docs))

    def bytes_used(self) -> dict[str, int]:
        """Bytes per column in use for the published rows: values or ids, dictionary, nulls, inverted index."""
        count = self.num_docs
        return {name: column.bytes_used(count) for name, column in self._columns.items()}
