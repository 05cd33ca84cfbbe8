"""Building, uploading and viewing a consuming segment's rows.

Replicas that consumed the same offsets must produce byte-identical segments: the builder's CRC covers the data
files only, the creation time written to metadata.json is the segment record's (the same on every replica), and
the rows are exactly [start_offset, end_offset) because consumption stops there.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pyarrow as pa

from cuvee.cluster.records import SegmentRecord
from cuvee.config import Schema, TableConfig
from cuvee.segment.archive import ARCHIVE_SUFFIX, deep_store_upload_key, pack
from cuvee.segment.builder import build_segment
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.mutable import MutableSegment
from cuvee.segment.partitioning import PARTITIONS_KEY, SegmentPartitions
from cuvee.server.consuming.fsm import BuiltSegment
from cuvee.spi.deepstore import DeepStore

log = logging.getLogger(__name__)


def build_from_mutable(
    mutable: MutableSegment,
    *,
    table: TableConfig,
    schema: Schema,
    record: SegmentRecord,
    start_offset: int,
    end_offset: int,
    out_dir: Path,
) -> tuple[ImmutableSegment, BuiltSegment]:
    """Build ``out_dir/<segment>/`` from every row consumed (replacing an earlier build) and describe it."""
    began = time.monotonic()
    segment = build_segment(
        mutable.snapshot(),
        schema,
        table.indexing,
        out_dir,
        record.segment_name,
        start_offset=start_offset,
        end_offset=end_offset,
        table_name=table.name_with_type,
        time_column=table.time_column,
        creation_time_ms=record.creation_time_ms,
        overwrite=True,
    )
    meta = segment.metadata
    built = BuiltSegment(
        end_offset=end_offset,
        crc=segment.crc,
        total_docs=segment.total_docs,
        size_bytes=segment.size_bytes,
        build_time_ms=int((time.monotonic() - began) * 1000),
        time_min=_as_int(meta.start_time),
        time_max=_as_int(meta.end_time),
        partitions=SegmentPartitions.from_json(meta.custom.get(PARTITIONS_KEY)),
    )
    return segment, built


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def upload(segment: ImmutableSegment, deep_store: DeepStore, table_with_type: str, scratch_dir: Path) -> str:
    """Pack the segment and put it in the deep store under an upload key of its own (the commit moves it into
    place: ``deep_store_upload_key``); returns its URI. Raises DeepStoreError or OSError."""
    scratch_dir.mkdir(parents=True, exist_ok=True)
    archive = scratch_dir / f"{segment.name}{ARCHIVE_SUFFIX}"
    try:
        pack(segment.path, archive)
        return deep_store.put(archive, deep_store_upload_key(table_with_type, segment.name, int(time.time() * 1000)))
    finally:
        archive.unlink(missing_ok=True)


def remove_build(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def logical_table(table: pa.Table, schema: Schema) -> pa.Table:
    """A mutable snapshot (dictionary-encoded columns) as the schema's logical types, the way queries see it."""
    target = schema.arrow_schema()
    arrays = [_decoded(table.column(field.name).combine_chunks(), field.type) for field in target]
    return pa.Table.from_arrays(arrays, schema=target)


def _decoded(arr: pa.Array, logical: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary.take(arr.indices)
    elif pa.types.is_list(arr.type) and pa.types.is_dictionary(arr.type.value_type):
        child = arr.values
        values = child.dictionary.take(child.indices)
        arr = pa.ListArray.from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    return arr if arr.type == logical else arr.cast(logical)
