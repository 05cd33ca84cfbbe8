"""Pinot's segment partition functions (``tableIndexConfig.segmentPartitionConfig.columnPartitionMap``). Pure.

A batch job splits rows into segments per partition of the configured column, so that every segment holds one
partition and a broker can later prune segments by it; the partition a value lands in must be the one Pinot's own
function gives, or segments built by Pinot's jobs and ours would disagree. Supported, with Pinot's semantics:

- ``Modulo``: ``value % numPartitions`` (Java's truncating remainder, made non-negative) on integer columns;
- ``Murmur``: ``(murmur2(utf8(str(value))) & 0x7fffffff) % numPartitions``, Kafka's murmur2 (Pinot's default
  Murmur variant), on string and integer columns;
- ``HashCode``: ``abs(String.hashCode(str(value))) % numPartitions`` (Kafka's ``abs``: ``Integer.MIN_VALUE`` →
  0) on string and integer columns.

Pinot hashes a value's text for both hash functions, whatever the column's type. Hashes are computed once per
distinct value (a column has far fewer distinct values than rows, usually), then mapped back to rows vectorised.
A null is partitioned as the column's default null value, the value the segment stores for it (Pinot's rule).

A built segment records the partitions its rows fall in (``SegmentPartitions``, in its metadata's ``custom``
under ``PARTITIONS_KEY``, computed from the rows themselves): the controller copies it into the segment's record at
push time, places a one-partition segment on the servers of its partition (two tables partitioned alike are then
colocated), and the broker joins such tables on their servers (``cuvee.multistage.colocated_join``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.schema import DataType, Schema
from cuvee.errors import UserError
from cuvee.spi.stream import murmur2

FUNCTIONS = ("Modulo", "Murmur", "HashCode")
_INTEGERS = (DataType.INT, DataType.LONG)
MAX_PARTITIONS = 1 << 16  # the largest partition count kept from a config or a server (bounds any list of them)


PARTITIONS_KEY = "partitions"  # the key of ``SegmentPartitions`` in a segment's custom metadata


@dataclass(frozen=True)
class PartitionSpec:
    column: str
    function: str
    num_partitions: int
    null_value: Any = None  # what a null is partitioned as (the schema's default null value)


@dataclass(frozen=True)
class SegmentPartitions:
    """The partitions of a segment's rows under one partition function (Pinot's segment partition metadata)."""

    column: str
    function: str
    num_partitions: int
    partitions: tuple[int, ...]

    def same_function(self, spec: PartitionSpec) -> bool:
        """Whether these partitions were computed by ``spec``'s function (a table's config may change later)."""
        return (self.column, self.function, self.num_partitions) == (spec.column, spec.function, spec.num_partitions)

    @property
    def single(self) -> int | None:
        """The one partition all rows fall in, or None (several, or no rows)."""
        return self.partitions[0] if len(self.partitions) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return {"column": self.column, "functionName": self.function, "numPartitions": self.num_partitions,
                "partitions": list(self.partitions)}

    @classmethod
    def from_json(cls, doc: Any) -> SegmentPartitions | None:
        """The partitions ``doc`` describes, or None when it is not a well-formed description (never raises: a
        segment without usable partition metadata is simply not colocated)."""
        if not isinstance(doc, dict):
            return None
        column, function, count, parts = (doc.get("column"), doc.get("functionName"), doc.get("numPartitions"),
                                          doc.get("partitions"))
        if not isinstance(column, str) or function not in FUNCTIONS or type(count) is not int \
                or not 1 <= count <= MAX_PARTITIONS \
                or not isinstance(parts, list) or len(parts) > count \
                or not all(type(p) is int and 0 <= p < count for p in parts):
            return None
        return cls(column, function, count, tuple(sorted(set(parts))))


def declared_partitioning(index_config_extra: Mapping[str, Any]) -> tuple[str, str, int] | None:
    """The table's partition column, function (canonical name) and count as its config declares them (the first
    ``columnPartitionMap`` entry), or None (none, malformed, an unknown function, or more than
    ``MAX_PARTITIONS``). Read from the config alone, without the schema ``partition_spec`` checks it against."""
    config = index_config_extra.get("segmentPartitionConfig") or {}
    mapping = config.get("columnPartitionMap") if isinstance(config, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        return None
    column, spec = next(iter(mapping.items()))
    if not isinstance(spec, dict):
        return None
    function = {f.lower(): f for f in FUNCTIONS}.get(str(spec.get("functionName", "Murmur")).lower())
    count = spec.get("numPartitions")
    if function is None or type(count) is not int or not 1 <= count <= MAX_PARTITIONS:
        return None
    return column, function, count


def configured_partition(index_config_extra: Mapping[str, Any], partitions: SegmentPartitions | None) -> int | None:
    """The one partition of a segment's rows when they were partitioned by the table's configured function (the
    first ``columnPartitionMap`` entry: column, function and count alike), else None. Read from the config alone:
    placement only needs to know the two agree."""
    if partitions is None or partitions.single is None:
        return None
    if declared_partitioning(index_config_extra) != (partitions.column, partitions.function,
                                                     partitions.num_partitions):
        return None
    return partitions.single


def stream_partition_metadata(index_config_extra: Mapping[str, Any], partition: int) -> SegmentPartitions | None:
    """What a new consuming segment of stream partition ``partition`` is recorded to hold under the table's config
    now (Pinot's rule: that partition alone), or None (not partitioned, or a partition the function cannot give).
    The replicas check its rows against exactly this, and a broker prunes it only while the config still says the
    same (``cuvee.pruning.stream_partitions``)."""
    declared = declared_partitioning(index_config_extra)
    if declared is None or not 0 <= partition < declared[2]:
        return None
    return SegmentPartitions(*declared, (partition,))


def as_declared(index_config_extra: Mapping[str, Any], partitions: SegmentPartitions | None
                ) -> SegmentPartitions | None:
    """``partitions`` (a server's word on a segment's rows) when they were computed by the function the table
    declares now (column, function and count alike), else None: nothing else could ever be pruned by."""
    if partitions is None or declared_partitioning(index_config_extra) != (
            partitions.column, partitions.function, partitions.num_partitions):
        return None
    return partitions


def segment_partitions(values: pa.Array, spec: PartitionSpec) -> SegmentPartitions:
    """The partitions ``values`` (a segment's partition column) fall in."""
    found = np.unique(partitions(values, spec)) if len(values) else np.zeros(0, np.int32)
    return SegmentPartitions(spec.column, spec.function, spec.num_partitions, tuple(int(p) for p in found))


def partition_spec(index_config_extra: dict[str, Any], schema: Schema) -> PartitionSpec | None:
    """The table's partition column (the first of ``columnPartitionMap``), checked against the schema."""
    config = index_config_extra.get("segmentPartitionConfig") or {}
    mapping = config.get("columnPartitionMap") if isinstance(config, dict) else None
    if not mapping:
        return None
    if not isinstance(mapping, dict):
        raise UserError("segmentPartitionConfig.columnPartitionMap must map column names to partition configs")
    column, spec = next(iter(mapping.items()))
    where = f"segmentPartitionConfig.columnPartitionMap.{column}"
    if not isinstance(spec, dict) or not isinstance(spec.get("numPartitions"), int) or spec["numPartitions"] < 1:
        raise UserError(f"{where}: numPartitions must be a positive integer")
    function = spec.get("functionName", "Murmur")
    canonical = {f.lower(): f for f in FUNCTIONS}.get(str(function).lower())
    if canonical is None:
        raise UserError(f"{where}: functionName {function!r} is not supported; use one of {', '.join(FUNCTIONS)}")
    if not schema.has_column(column) or not schema.column(column).single_value:
        raise UserError(f"{where}: {column!r} is not a single-value column of the schema")
    data_type = schema.column(column).data_type
    allowed = _INTEGERS if canonical == "Modulo" else (*_INTEGERS, DataType.STRING)
    if data_type not in allowed:
        raise UserError(f"{where}: {canonical} partitioning needs a column of type "
                        f"{' or '.join(t.value for t in allowed)}, not {data_type.value}")
    return PartitionSpec(column, canonical, spec["numPartitions"], schema.column(column).null_value)


def partitions(values: pa.Array, spec: PartitionSpec) -> np.ndarray:
    """Each value's partition (int32)."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int32)
    if values.null_count and spec.null_value is not None:
        values = values.fill_null(pa.scalar(spec.null_value).cast(values.type))
    if spec.function == "Modulo":
        ints = values.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        rem = np.fmod(ints, spec.num_partitions)  # Java's %: truncating, the sign of the dividend
        return np.where(rem < 0, rem + spec.num_partitions, rem).astype(np.int32)
    encoded = pc.dictionary_encode(values)
    hashes = np.array([_hash(str(v), spec.function) for v in encoded.dictionary.to_pylist()], dtype=np.int64)
    per_value = _non_negative(hashes, spec) if len(hashes) else np.zeros(0, np.int32)
    indices = encoded.indices
    out = per_value[indices.fill_null(0).to_numpy(zero_copy_only=False)] if len(per_value) else np.zeros(n, np.int32)
    if indices.null_count:
        out = np.where(np.asarray(indices.is_valid()), out, 0)
    return out.astype(np.int32)


def _non_negative(hashes: np.ndarray, spec: PartitionSpec) -> np.ndarray:
    if spec.function == "Murmur":
        return ((hashes & 0x7FFFFFFF) % spec.num_partitions).astype(np.int32)
    kafka_abs = np.where(hashes == -(2**31), 0, np.abs(hashes))  # HashCode: Kafka's abs(hashCode) % n
    return (kafka_abs % spec.num_partitions).astype(np.int32)


def _hash(text: str, function: str) -> int:
    return murmur2(text.encode()) if function == "Murmur" else java_string_hash(text)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units) as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h
