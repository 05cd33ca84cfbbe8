"""What a realtime segment's stream partition says about its rows' partitions, and the check that keeps it true.

A REALTIME table declared partitioned (``tableIndexConfig.segmentPartitionConfig.columnPartitionMap``, e.g. Murmur
on ``userId``) over a stream keyed by that column puts each row in the stream partition its value's partition
names: stream partition p holds partition p only. Pinot's rule (``PinotLLCRealtimeSegmentManager`` giving a new
consuming segment the partition metadata ``{stream partition}``) trusts the producer; the broker then prunes the
consuming segments and sums distinct counts on the user's word. Here:

- a **committed** segment carries the partitions of its rows, computed from them when it was built (the
  committer sends them with ``segmentCommitEnd``, the controller keeps them in the segment's record when they
  were computed by the table's function at that moment): the truth, whatever the producer did;
- a **consuming** segment's record names the function it is checked under (the table's when the controller
  created it: ``stream_partition_metadata``; none when the table was not partitioned then). It is taken to hold
  only its stream partition's value (``consuming_partitions``) when that recorded function is still the table's,
  the declared partition count equals the stream's partition count, *and* no replica consuming it has seen a row
  of another partition. Each replica checks every row as it is consumed under the recorded function
  (``checked_spec``, ``StrayCheck``, each distinct value hashed once per segment); on the first row of another
  partition (a producer keyed otherwise, or a stream repartitioned under the table), before that row is
  readable, the replica records the segment in the table's ``MixedPartitions`` node, which brokers watch: from
  then on the segment is neither pruned by partition nor counted as disjoint. A replica that cannot record it
  stops consuming (the rows stay in the stream) rather than serve a row a broker would wrongly skip.

What remains: a broker sees the node through its watch, then a refresh of its view (18-190 ms measured on one
host with the SQLite store); the replica holds the first stray batch back ``stray_publish_grace_seconds`` (1 s by
default) to cover it, a bounded grace rather than an acknowledgement: a broker slower than that may still prune
the segment for the rest of its delay. The segment's committed metadata, and the node, are exact afterwards.
Pinot has no such check at all.

Pure: the node's record and the rules; the server and the broker do the I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.cluster.records import Record
from cuvee.config.schema import Schema
from cuvee.errors import UserError
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions, partition_spec, partitions

MAX_MIXED = 100_000  # segments one node lists (a node stays well under the metadata store's node size)
MAX_CHECKED = 1_000_000  # distinct values a StrayCheck remembers as checked; past it, values are hashed again


@dataclass(frozen=True)
class MixedPartitions(Record):
    """A table's consuming segments in which some replica saw a row outside the segment's stream partition
    (``segments``: name -> the first such row's partition). Only consuming segments matter (a committed one's
    record says its partitions), so recording a segment forgets the older segments of its stream partition."""

    KIND = "mixed partitions"
    segments: Mapping[str, int]

    def with_segment(self, segment: str, partition: int) -> MixedPartitions:
        try:
            named = LLCSegmentName.parse(segment)
        except InvalidSegmentNameError:
            return self
        if segment in self.segments:
            return self
        kept: dict[str, int] = {}
        for name, seen in self.segments.items():
            try:
                other = LLCSegmentName.parse(name)
            except InvalidSegmentNameError:
                continue
            if other.partition != named.partition or other.sequence >= named.sequence - 1:
                kept[name] = seen  # a pauseless partition has two consuming segments: the one before stays
        kept[segment] = partition
        while len(kept) > MAX_MIXED:
            kept.pop(next(iter(kept)))
        return MixedPartitions(kept)

    def to_json(self) -> dict[str, Any]:
        return {"segments": dict(self.segments)}

    @classmethod
    def from_json(cls, doc: Any) -> MixedPartitions:
        found = doc.get("segments") if isinstance(doc, dict) else None
        if not isinstance(found, dict):
            return cls({})
        return cls({k: v for k, v in found.items() if isinstance(k, str) and type(v) is int})


def consuming_partitions(segment: str, spec: PartitionSpec, stream_partitions: int, mixed: Collection[str],
                         recorded: SegmentPartitions | None) -> SegmentPartitions | None:
    """What a broker may take a consuming segment's partitions to be: its stream partition alone, when its record
    says its replicas check its rows under the table's partition function now (``recorded``: the record's
    partitions, written by the controller when it created the segment; None: created while the table was not
    partitioned, or before records carried it), the table's partition count is the stream's and no replica
    reported a row of another partition in it; else None (not known: never pruned, never taken as disjoint)."""
    if spec.num_partitions != stream_partitions or segment in mixed:
        return None
    partition = stream_partition(segment)
    if partition is None or not 0 <= partition < spec.num_partitions:
        return None
    if recorded is None or not recorded.same_function(spec) or recorded.partitions != (partition,):
        return None  # checked under another function (the config changed since), or not checked at all
    return SegmentPartitions(spec.column, spec.function, spec.num_partitions, (partition,))


def checked_spec(recorded: SegmentPartitions | None, schema: Schema, stream_partition: int) -> PartitionSpec | None:
    """The function a replica checks a consuming segment's rows under: the one its record names (the table's when
    the controller created it), whatever the table's config says by the time the replica starts; None when the
    record names none (nothing is checked, and no broker prunes the segment) or one the schema cannot serve."""
    if recorded is None or recorded.partitions != (stream_partition,):
        return None
    declared = {"segmentPartitionConfig": {"columnPartitionMap": {recorded.column: {
        "functionName": recorded.function, "numPartitions": recorded.num_partitions}}}}
    try:
        return partition_spec(declared, schema)
    except UserError:
        return None


def stream_partition_count(segments: Iterable[str]) -> int:
    """The stream's partition count as a table's segments show it (its largest stream partition + 1; 0: none)."""
    return max((p for p in map(stream_partition, segments) if p is not None), default=-1) + 1


def stream_partition(segment: str) -> int | None:
    """The stream partition an LLC segment name gives (``<table>__<partition>__<sequence>__<time>``), or None.
    Read without ``LLCSegmentName.parse`` (which checks every part, ~20 µs): a broker reads every segment's at
    each refresh of a partitioned REALTIME table."""
    parts = segment.split("__")
    if len(parts) != 4 or not parts[1].isascii() or not parts[1].isdigit():
        return None
    return int(parts[1])


class StrayCheck:
    """One consuming segment's check of its rows' partitions against its stream partition. ``strays(values)``
    counts the values (a batch's partition column) of another partition; each distinct value is hashed once per
    segment (those of the stream partition are remembered, up to ``MAX_CHECKED``). ``first``: the partition of
    the first stray row seen (None: none yet)."""

    def __init__(self, spec: PartitionSpec, stream_partition: int) -> None:
        self.spec = spec
        self.stream_partition = stream_partition
        self.first: int | None = None
        self.count = 0
        self._checked: set[Any] = set()

    def strays(self, values: pa.Array | pa.ChunkedArray) -> int:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if len(values) == 0:
            return 0
        unique = values.unique()
        listed = unique.to_pylist()
        fresh = [i for i, v in enumerate(listed) if v not in self._checked]
        if not fresh:
            return 0
        candidates = unique.take(pa.array(fresh, pa.int64()))
        found = partitions(candidates, self.spec)
        other = found != self.stream_partition
        if len(self._checked) < MAX_CHECKED:
            self._checked.update(listed[i] for i, o in zip(fresh, other.tolist()) if not o)
        if not other.any():
            return 0
        bad = candidates.filter(pa.array(other))
        if self.first is None:
            self.first = int(found[np.argmax(other)])
        counted = max(1, int(pc.sum(pc.is_in(values, value_set=bad)).as_py() or 0))
        self.count += counted
        return counted
