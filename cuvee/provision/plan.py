"""The provisioning matrices (the seed's RealtimeProvisioningHelper). ``matrices`` is pure arithmetic:

- rows a segment holds when it ends by time: ``rate × hours × 3600`` (``rate``: rows per second per partition);
- **optimal segment size**: those rows × the sample's committed bytes per row;
- **consuming memory per host**: the consuming segments a host carries (``ceil(partitions × replicas / hosts)``)
  × rows per segment × the sample's consuming bytes per row (columns, dictionaries and indexes while mutable);
- **segments queried per host**: the committed segments retention keeps (``ceil(retention / hours)`` a partition)
  plus the consuming one, × partitions × replicas / hosts (rounded up);
- **memory per host**: consuming memory + the committed segments a host serves × the segment size (served
  segments are memory-mapped: the page cache must hold them for queries to be fast);

and a cell is NA when its memory per host exceeds ``max_host_memory``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.config.schema import Schema
from cuvee.config.table import TableConfig


@dataclass(frozen=True)
class Measured:
    """What the sample segment says: its rows, its committed size, and what the same rows take while consuming."""

    rows: int
    committed_bytes: int
    consuming_bytes: int

    @property
    def committed_bytes_per_row(self) -> float:
        return self.committed_bytes / self.rows

    @property
    def consuming_bytes_per_row(self) -> float:
        return self.consuming_bytes / self.rows


@dataclass(frozen=True)
class ProvisionInputs:
    partitions: int
    replicas: int
    rows_per_second: float  # per partition
    hosts: tuple[int, ...]
    hours: tuple[float, ...]
    max_host_memory: int  # bytes
    retention_hours: float

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.replicas < 1 or self.rows_per_second <= 0 or self.retention_hours <= 0:
            raise ValueError("partitions and replicas must be at least 1, the ingestion rate and retention positive")
        if not self.hosts or not self.hours or min(self.hosts) < 1 or min(self.hours) <= 0:
            raise ValueError("give at least one host count (>= 1) and one segment duration (> 0 hours)")
        if self.max_host_memory <= 0:
            raise ValueError("the usable host memory must be positive")


def matrices(inputs: ProvisionInputs, measured: Measured) -> dict[str, Any]:
    """Four matrices, each ``{hours: {hosts: value or None}}`` (None: NA, over the memory budget; also for hosts
    fewer than replicas, which cannot hold a partition's replicas apart)."""
    out: dict[str, dict[float, dict[int, Any]]] = {"memoryPerHost": {}, "optimalSegmentSize": {},
                                                   "consumingMemoryPerHost": {}, "segmentsQueriedPerHost": {}}
    for hours in inputs.hours:
        rows = inputs.rows_per_second * hours * 3600
        segment = rows * measured.committed_bytes_per_row
        retained = math.ceil(inputs.retention_hours / hours)
        for name in out:
            out[name][hours] = {}
        for hosts in inputs.hosts:
            if hosts < inputs.replicas:
                for name in out:
                    out[name][hours][hosts] = None
                continue
            consuming_per_host = math.ceil(inputs.partitions * inputs.replicas / hosts)
            consuming = consuming_per_host * rows * measured.consuming_bytes_per_row
            served = math.ceil(inputs.partitions * inputs.replicas * retained / hosts)
            memory = consuming + served * segment
            fits = memory <= inputs.max_host_memory
            out["memoryPerHost"][hours][hosts] = round(memory) if fits else None
            out["optimalSegmentSize"][hours][hosts] = round(segment) if fits else None
            out["consumingMemoryPerHost"][hours][hosts] = round(consuming) if fits else None
            out["segmentsQueriedPerHost"][hours][hosts] = served + consuming_per_host if fits else None
    return out


def measure(segment_dir: Path, schema: Schema, table: TableConfig) -> Measured:
    """Rows and committed size of a built segment, and what its rows take in a consuming segment of ``table``."""
    from cuvee.segment.immutable import ImmutableSegment
    from cuvee.segment.mutable.segment import MutableSegment

    segment = ImmutableSegment.load(segment_dir)
    rows = segment.total_docs
    if rows < 1:
        raise ValueError(f"the sample segment {segment_dir} holds no rows")
    target = schema.arrow_schema()
    data = segment.to_arrow([f.name for f in target])
    rows_table = pa.Table.from_arrays([data.column(f.name).cast(f.type) for f in target], schema=target)
    mutable = MutableSegment(schema, table.indexing, rows, name="provision-sample", time_column=table.time_column)
    taken = 0
    for batch in rows_table.combine_chunks().to_batches():
        taken += mutable.append(batch, np.arange(taken, taken + batch.num_rows, dtype=np.int64))
    return Measured(rows=rows, committed_bytes=segment.size_bytes, consuming_bytes=sum(mutable.bytes_used().values()))
