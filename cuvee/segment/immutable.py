"""A committed segment loaded from its directory: memory-mapped columns, stats, indexes and CRC check.

``to_arrow()`` returns the schema's logical types with values decoded (plain arrays, lists for multi-value
columns, nulls as Arrow nulls): that is what query engines (DuckDB) and Spark readers expect. ``decode=False`` keeps
single-value dictionary columns as ``pa.DictionaryArray`` (int32 ids into the sorted dictionary), zero-copy over
the mapped files, for callers that want to work on ids.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from cuvee.config.schema import DataType
from cuvee.segment import encoding, indexes
from cuvee.segment.errors import CorruptSegmentError, SegmentError
from cuvee.segment.format import ColumnFile, column_file, compute_crc, read_arrow, read_metadata
from cuvee.segment.metadata import ColumnMetadata, SegmentMetadata


class ImmutableSegment:
    """Read access to one segment directory. Cheap to load: files are mapped, and pages load on first touch."""

    def __init__(self, path: Path, metadata: SegmentMetadata):
        self.path = path
        self.metadata = metadata
        self._forward = {name: self._read(name, ColumnFile.FORWARD) for name in metadata.columns}
        self._dictionaries = {
            name: self._read(name, ColumnFile.DICTIONARY) for name, col in metadata.columns.items() if col.has_dictionary
        }
        self._index_cache: dict[tuple[str, ColumnFile], pa.Table] = {}
        self._dictionary_keys: dict[str, np.ndarray | None] = {}

    @classmethod
    def load(cls, path: str | Path, *, verify: bool = False) -> ImmutableSegment:
        """Map a segment directory; with ``verify`` also recompute its CRC (reads every byte)."""
        segment = cls(Path(path), read_metadata(Path(path)))
        if verify:
            segment.verify_crc()
        return segment

    # ------------------------------------------------------------------ metadata

    @property
    def name(self) -> str:
        return self.metadata.segment_name

    @property
    def total_docs(self) -> int:
        return self.metadata.total_docs

    @property
    def crc(self) -> int:
        return self.metadata.crc

    @property
    def column_names(self) -> list[str]:
        return list(self.metadata.columns)

    def column_metadata(self, column: str) -> ColumnMetadata:
        try:
            return self.metadata.columns[column]
        except KeyError:
            raise SegmentError(f"segment {self.name!r} has no column {column!r}") from None

    def verify_crc(self) -> None:
        """Raise CorruptSegmentError unless the data files still hash to the CRC in metadata.json."""
        actual = compute_crc(self.path)
        if actual != self.metadata.crc:
            raise CorruptSegmentError(
                f"segment {self.name!r} at {self.path} is corrupt: CRC {actual} does not match {self.metadata.crc}"
            )

    @cached_property
    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    # ------------------------------------------------------------------ columns

    def dictionary(self, column: str) -> pa.Array | None:
        """The sorted distinct values of a dictionary column (None for raw columns)."""
        self.column_metadata(column)
        return self._dictionaries.get(column)

    def forward_index(self, column: str) -> pa.Array:
        """The stored forward index: dictionary ids for dictionary columns, values for raw ones."""
        self.column_metadata(column)
        return self._forward[column]

    def column(self, column: str, *, decode: bool = True) -> pa.Array:
        meta = self.column_metadata(column)
        forward, dictionary = self._forward[column], self._dictionaries.get(column)
        if dictionary is None:
            return forward
        if meta.single_value:
            if decode:
                return dictionary.take(forward)
            return pa.DictionaryArray.from_arrays(forward, dictionary)
        values = dictionary.take(forward.flatten())
        offsets = forward.offsets
        decoded = pa.ListArray.from_arrays(offsets, values, type=pa.list_(dictionary.type))
        return encoding.with_validity(decoded, encoding.validity(forward))

    def to_arrow(self, columns: list[str] | None = None, *, decode: bool = True) -> pa.Table:
        """The segment's rows as a table with the schema's logical types (see the module docstring)."""
        names = self.column_names if columns is None else columns
        arrays = [self.column(name, decode=decode) for name in names]
        fields = [pa.field(name, self._logical_type(name) if decode or not self._is_dict_sv(name) else a.type)
                  for name, a in zip(names, arrays)]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def null_bitmap(self, column: str) -> BitMap:
        """Doc ids whose value is null."""
        valid = encoding.validity(self.forward_index(column))
        return BitMap() if valid is None else indexes.bitmap_from_docs(np.flatnonzero(~valid))

    # ------------------------------------------------------------------ indexes

    def inverted_index(self, column: str, value: Any) -> BitMap:
        """Doc ids where the column holds ``value`` (for multi-value columns: contains it)."""
        meta = self.column_metadata(column)
        if not meta.has_inverted_index:
            raise SegmentError(f"column {column!r} of segment {self.name!r} has no inverted index")
        dict_id = self.dictionary_id(column, value)
        if dict_id is None:
            return BitMap()
        bitmaps = self._index(column, ColumnFile.INVERTED).column(0)
        return BitMap.deserialize(bitmaps[dict_id].as_py())

    def dictionary_id(self, column: str, value: Any) -> int | None:
        """The id of ``value`` in a dictionary column, or None when the segment does not hold it."""
        dictionary = self.dictionary(column)
        if dictionary is None:
            raise SegmentError(f"column {column!r} of segment {self.name!r} has no dictionary")
        probe = self._probe(column, value, dictionary.type)
        if column not in self._dictionary_keys:
            self._dictionary_keys[column] = encoding.order_key(dictionary)
        keys = self._dictionary_keys[column]
        if keys is None:
            position = pc.index(dictionary, probe[0]).as_py()
            return None if position < 0 else position
        wanted = encoding.order_key(probe)[0]  # type: ignore[index]
        position = int(np.searchsorted(keys, wanted))
        return position if position < len(keys) and keys[position] == wanted else None

    def range_index(
        self, column: str, low: Any = None, high: Any = None, *, low_inclusive: bool = True, high_inclusive: bool = True
    ) -> BitMap:
        """Doc ids with a value between ``low`` and ``high`` (None: unbounded)."""
        if not self.column_metadata(column).has_range_index:
            raise SegmentError(f"column {column!r} of segment {self.name!r} has no range index")
        index = self._index(column, ColumnFile.RANGE)
        value_type = index.schema.field("value").type
        low = None if low is None else self._probe(column, low, value_type)[0].as_py()
        high = None if high is None else self._probe(column, high, value_type)[0].as_py()
        return indexes.range_lookup(index, low, high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)

    def bloom_might_contain(self, column: str, value: Any) -> bool:
        """False: the segment certainly has no row with this value; True: it may have."""
        meta = self.column_metadata(column)
        if not meta.has_bloom_filter:
            raise SegmentError(f"column {column!r} of segment {self.name!r} has no bloom filter")
        words = self._index(column, ColumnFile.BLOOM).column(0).to_numpy()
        value_type = DataType(meta.data_type).arrow_type()
        probe = self._probe(column, value, value_type)
        return indexes.bloom_might_contain(words, meta.bloom_hashes, probe[0].as_py(), value_type)

    def bloom_might_contain_any(self, column: str, hashes: np.ndarray) -> bool:
        """Whether the segment may have a row with one of the values ``hashes`` are the ``indexes.value_hashes``
        of (False: certainly none)."""
        meta = self.column_metadata(column)
        if not meta.has_bloom_filter:
            raise SegmentError(f"column {column!r} of segment {self.name!r} has no bloom filter")
        words = self._index(column, ColumnFile.BLOOM).column(0).to_numpy()
        return indexes.bloom_might_contain_any(words, meta.bloom_hashes, hashes)

    # ------------------------------------------------------------------ internals

    def _read(self, column: str, kind: ColumnFile) -> pa.Array:
        table = read_arrow(column_file(self.path, column, kind))
        if table.num_columns != 1:
            raise CorruptSegmentError(f"{column_file(self.path, column, kind)} should hold exactly one column")
        return encoding.combine(table.column(0))

    def _index(self, column: str, kind: ColumnFile) -> pa.Table:
        key = (column, kind)
        if key not in self._index_cache:
            self._index_cache[key] = read_arrow(column_file(self.path, column, kind))
        return self._index_cache[key]

    def _probe(self, column: str, value: Any, arrow_type: pa.DataType) -> pa.Array:
        try:
            return pa.array([value], arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise SegmentError(f"{value!r} is not a valid value for column {column!r} ({arrow_type})") from exc

    def _is_dict_sv(self, column: str) -> bool:
        meta = self.metadata.columns[column]
        return meta.has_dictionary and meta.single_value

    def _logical_type(self, column: str) -> pa.DataType:
        meta = self.metadata.columns[column]
        base = DataType(meta.data_type).arrow_type()
        return base if meta.single_value else pa.list_(base)

    def __repr__(self) -> str:
        return f"ImmutableSegment({self.name!r}, docs={self.total_docs}, path={str(self.path)!r})"
