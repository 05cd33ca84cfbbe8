"""Inside a Spark task: group rows by time bucket and partition, build one segment per group (and per
``rows_per_segment`` rows), write each archive to the deep store, and describe it for the metadata push.

Pure of Spark: takes Arrow batches, returns plain dicts, so the ingest job, the ``cuvee`` data source writer and
tests share it. The segment builder is the servers' own (``cuvee.segment.builder.build_segment``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.cluster.time_boundary import DAY_MS, HOUR_MS, millis_per_value
from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.pipeline.convert import from_wire
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from cuvee.segment.naming import offline_segment_name, time_range
from cuvee.segment.partitioning import partition_spec, partitions

BUCKET = "__bucket"
PART = "__part"
NO_BUCKET = -1  # rows without a usable time value
SEQUENCE_STRIDE = 10_000  # segment sequence = partition * stride + chunk
TASK_STRIDE = 100 * SEQUENCE_STRIDE


@dataclass(frozen=True)
class BuildSpec:
    """What a task needs to build a table's segments (picklable: plain JSON documents and strings)."""

    table_json: dict[str, Any]
    schema_json: dict[str, Any]
    deep_store_uri: str
    fingerprint: str
    rows_per_segment: int = 5_000_000
    sequence_base: int = 0  # a DataFrame write's task n builds sequences from n * TASK_STRIDE (no shuffle there)
    run_id: str = ""  # archives go to <table>/<segment>.<run_id>.tar.zst: a run never overwrites a served object
    name_prefix: str = ""  # maintenance jobs' outputs: ``merged_<level>_<inputs digest>_<usual name>``

    def archive_key(self, table_with_type: str, segment: str) -> str:
        return f"{table_with_type}/{segment}{'.' + self.run_id if self.run_id else ''}{ARCHIVE_SUFFIX}"

    @property
    def table(self) -> TableConfig:
        return TableConfig.from_json(self.table_json)

    @property
    def schema(self) -> Schema:
        return Schema.from_json(self.schema_json)


def bucket_ms(table: TableConfig) -> int:
    return HOUR_MS if table.push_frequency == "HOURLY" else DAY_MS


def bucket_and_partition(batch: pa.RecordBatch, table: TableConfig, schema: Schema) -> tuple[pa.Array, pa.Array]:
    """Each row's time bucket (epoch ms // bucket size; NO_BUCKET without a time value) and partition (Pinot's
    partition function of the table's partition column, ``cuvee.segment.partitioning``; 0 without one)."""
    n = batch.num_rows
    buckets = np.full(n, NO_BUCKET, dtype=np.int64)
    step = millis_per_value(schema, table.time_column)
    if table.time_column and step is not None and table.time_column in batch.schema.names:
        column = batch.column(table.time_column)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        values = column.to_numpy(zero_copy_only=False)
        valid = np.asarray(column.is_valid()) if column.null_count else np.ones(n, dtype=bool)
        millis = np.where(valid, np.nan_to_num(values.astype(np.float64)) * step, 0)
        buckets = np.where(valid, np.floor_divide(millis, bucket_ms(table)).astype(np.int64), NO_BUCKET)
    parts = np.zeros(n, dtype=np.int32)
    spec = partition_spec(table.indexing.extra, schema)
    if spec is not None and spec.column in batch.schema.names:
        parts = partitions(batch.column(spec.column), spec)
    return pa.array(buckets), pa.array(parts)


def grouped(rows: pa.Table) -> pa.Table:
    """``rows`` ordered by (bucket, partition), stably; untouched when already so (one bucket and no partition
    column, the usual DataFrame write: a sort would copy every column for nothing)."""
    if rows.num_rows < 2:
        return rows
    buckets = rows.column(BUCKET).to_numpy()
    parts = rows.column(PART).to_numpy()
    step = np.diff(buckets)
    if np.all((step > 0) | ((step == 0) & (np.diff(parts) >= 0))):
        return rows
    return rows.take(pc.sort_indices(rows, [(BUCKET, "ascending"), (PART, "ascending")]))


def build_groups(batches: Iterable[pa.RecordBatch], spec: BuildSpec) -> Iterator[dict[str, Any]]:
    """Batches sorted by (bucket, partition) → one metadata dict per segment built and stored."""
    group: tuple[int, int] | None = None
    pending: list[pa.RecordBatch] = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        keys = np.stack([batch.column(BUCKET).to_numpy(), batch.column(PART).to_numpy()], axis=1)
        start = 0
        while start < batch.num_rows:
            key = (int(keys[start, 0]), int(keys[start, 1]))
            same = np.all(keys[start:] == keys[start], axis=1)
            end = start + (int(np.argmin(same)) if not same.all() else len(same))
            if group is not None and key != group:
                yield from _build(group, pending, spec)
                pending = []
            group = key
            pending.append(batch.slice(start, end - start))
            start = end
    if group is not None and pending:
        yield from _build(group, pending, spec)


def _build(group: tuple[int, int], batches: list[pa.RecordBatch], spec: BuildSpec) -> Iterator[dict[str, Any]]:
    table, schema = spec.table, spec.schema
    data = pa.Table.from_batches(batches)
    columns = [from_wire(data.column(f.name).combine_chunks(), f) for f in schema.fields]
    data = pa.Table.from_arrays(columns, schema=schema.arrow_schema())
    deep = open_deepstore(spec.deep_store_uri)
    for chunk, start in enumerate(range(0, data.num_rows, spec.rows_per_segment)):
        rows = data.slice(start, spec.rows_per_segment)
        low, high = time_range(rows, table.time_column)
        sequence = spec.sequence_base + group[1] * SEQUENCE_STRIDE + chunk
        name = spec.name_prefix + offline_segment_name(table.table_name, sequence, low, high, postfix=spec.fingerprint)
        with tempfile.TemporaryDirectory(prefix="cuvee-build-") as tmp:
            segment = build_segment(rows, schema, table.indexing, tmp, name, table_name=table.table_name,
                                    time_column=table.time_column, creation_time_ms=0)
            archive = pack(segment.path, Path(tmp) / f"{name}{ARCHIVE_SUFFIX}")
            uri = deep.put(archive, spec.archive_key(table.name_with_type, name))
            yield {"segmentName": name, "downloadUri": uri, "crc": segment.crc, "totalDocs": segment.total_docs,
                   "sizeBytes": archive.stat().st_size, "timeMin": low, "timeMax": high}
