"""What a Spark read of a table scans. Pure.

Per half the read covers (``cluster.time_boundary.hybrid_halves``: a hybrid table's rows are read exactly once):
the segments in the ideal state, minus those lineage hides (the same visibility rule the broker routes by).
Committed segments (DONE, UPLOADED) are read from their archive; consuming ones only when asked, through a server
that holds them. Segments whose time range cannot hold a row the pushed filters or the half's time filter keep
are skipped. Sources are grouped into Spark partitions of a few segments each, balanced by bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cuvee.cluster.records import SegmentRecord, SegmentState
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config.schema import FieldSpec, Schema
from cuvee.pipeline.controller_client import PipelineError
from cuvee.pipeline.predicates import Predicate, may_match
from cuvee.protocol.query import TimeFilter


def check_splittable(table: str, schema: Schema, column: str | None) -> None:
    """Refuse, by name, a hybrid table this reader cannot split exactly once: its halves are cut by comparing
    epoch numbers, so the time column must hold them (epoch or TIMESTAMP). Decided from the schema, not from the
    boundary's text (``20130714`` is a ``yyyyMMdd`` date as much as a number); a column of date strings is split
    by the broker only (``cuvee.config.string_times``)."""
    if millis_per_value(schema, column) is not None:
        return
    spec = schema.column(column) if column is not None and schema.has_column(column) else None
    shown = f"{spec.data_type.value} {spec.format or ''}".strip() if spec is not None else "not in the schema"
    raise PipelineError(f"hybrid table {table!r}: its time column {column!r} ({shown}) is not an epoch or TIMESTAMP "
                        "column; this reader splits hybrid tables on those only (read the OFFLINE or REALTIME half "
                        "by its full name, or query the broker)")


@dataclass(frozen=True)
class SegmentSource:
    """One segment a Spark task reads, and where from: the archive at ``download_uri`` (deep store), else a peer;
    a consuming segment through one of ``peers`` (a query of its rows). ``time_filter``: the hybrid half's."""

    table: str
    segment: str
    crc: int | None
    download_uri: str
    size_bytes: int
    peers: tuple[str, ...]
    consuming: bool = False
    time_filter: TimeFilter | None = None


@dataclass(frozen=True)
class HalfState:
    """One half of a table as the controller describes it now. ``urls``: live instances' HTTP base URLs."""

    table: str
    records: Mapping[str, SegmentRecord]
    ideal: Mapping[str, Mapping[str, str]]
    view: Mapping[str, Mapping[str, str]]
    hidden: frozenset[str]
    urls: Mapping[str, str]
    time_filter: TimeFilter | None = None


@dataclass
class PlanCounts:
    """What the plan left out, for the reader's log line."""

    pruned: int = 0
    consuming_skipped: int = 0
    without_record: int = 0


def plan_sources(half: HalfState, *, include_consuming: bool, predicates: Sequence[Predicate],
                 time_spec: FieldSpec | None, counts: PlanCounts | None = None) -> list[SegmentSource]:
    """The segments of ``half`` a read scans, by name."""
    counts = counts if counts is not None else PlanCounts()
    out: list[SegmentSource] = []
    for name in sorted(half.ideal):
        if name in half.hidden:
            continue
        record = half.records.get(name)
        if record is None:
            counts.without_record += 1
            continue
        if record.is_consuming and not include_consuming:
            counts.consuming_skipped += 1
            continue
        if not record.is_consuming and not _may_hold_rows(record, half.time_filter, predicates, time_spec):
            counts.pruned += 1
            continue
        states = {SegmentState.CONSUMING.value, SegmentState.ONLINE.value} if record.is_consuming \
            else {SegmentState.ONLINE.value}
        peers = tuple(half.urls[i] for i, state in sorted(half.view.get(name, {}).items())
                      if state in states and i in half.urls)
        out.append(SegmentSource(half.table, name, record.crc, record.download_uri, record.size_bytes, peers,
                                 consuming=record.is_consuming, time_filter=half.time_filter))
    return out


def _may_hold_rows(record: SegmentRecord, time_filter: TimeFilter | None, predicates: Sequence[Predicate],
                   time_spec: FieldSpec | None) -> bool:
    low, high = record.time_min, record.time_max
    if time_filter is not None and low is not None and high is not None:
        if time_filter.op == "<=" and low > time_filter.value:
            return False
        if time_filter.op == ">" and high <= time_filter.value:
            return False
    return may_match(predicates, time_spec, low, high)


SPREAD_PARTITIONS = 16  # without segmentsPerPartition: small reads get a task per segment (parallelism) ...
MAX_PER_PARTITION = 4  # ... large ones a few segments per task


def default_per_partition(segments: int) -> int:
    """Segments per partition when the user did not say: 1 up to 16 segments, then growing to 4."""
    return min(MAX_PER_PARTITION, max(1, math.ceil(segments / SPREAD_PARTITIONS)))


def group_partitions(sources: Sequence[SegmentSource], per_partition: int | None = None
                     ) -> list[tuple[SegmentSource, ...]]:
    """``ceil(n / per_partition)`` groups, biggest segment first into the lightest group (deterministic)."""
    if not sources:
        return []
    if per_partition is None:
        per_partition = default_per_partition(len(sources))
    if per_partition < 1:
        raise ValueError(f"segmentsPerPartition must be at least 1, got {per_partition}")
    groups: list[list[SegmentSource]] = [[] for _ in range(math.ceil(len(sources) / per_partition))]
    weights = [0] * len(groups)
    for source in sorted(sources, key=lambda s: (-s.size_bytes, s.table, s.segment)):
        lightest = min((i for i in range(len(groups)) if len(groups[i]) < per_partition), key=lambda i: weights[i])
        groups[lightest].append(source)
        weights[lightest] += max(source.size_bytes, 1)
    return [tuple(g) for g in groups]
