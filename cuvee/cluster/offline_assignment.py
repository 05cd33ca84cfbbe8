"""Placing pushed (offline) segments on servers: pure.

A new segment goes to ``replication`` distinct live servers tagged ``<tenant>_OFFLINE``, the ones holding the
fewest of the table's segments (ties by instance id), so a table's segments spread evenly and two replicas never
share a server. A segment pushed again under the same name keeps its servers (they reload it); only servers that
are no longer eligible are replaced. A dimension table's segments go to every eligible server (``replicas``), so
each server answers LOOKUP from its own copy; a rebalance brings them to servers added later.

A segment whose rows all fall in one partition of the table's ``segmentPartitionConfig`` goes to the servers of
that partition instead (``assign_partition`` over the eligible servers, the rule consuming segments follow): every
segment of partition p of every table partitioned alike lands on the same servers, which is what lets the broker
join two such tables on their servers (colocation; Pinot's partitioned replica groups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cuvee.cluster.assignment import assign_partition
from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.records import IdealState, SegmentState

OFFLINE_TAG_SUFFIX = "_OFFLINE"


def offline_server_tag(tenant: str) -> str:
    """The tag of the servers that serve a tenant's offline tables (``DefaultTenant_OFFLINE``)."""
    return tenant + OFFLINE_TAG_SUFFIX


def replicas(replication: int, dim_table: bool, instances: Sequence[str]) -> int:
    """Replicas per segment of an offline table: its ``replication``; for a dimension table, every eligible server
    (at least one: no eligible server is then the same error as for any table)."""
    return max(len(set(instances)), 1) if dim_table else replication


def assign_offline_segment(ideal: IdealState, segment: str, replication: int,
                           instances: Sequence[str], partition: int | None = None) -> tuple[str, ...]:
    """The servers of ``segment`` (of ``partition``'s servers, when its rows are all in one). Raises
    AssignmentError when fewer eligible servers than replicas exist."""
    if replication < 1:
        raise AssignmentError(f"replication must be at least 1, got {replication}")
    eligible = sorted(set(instances))
    if len(eligible) < replication:
        raise AssignmentError(f"{replication} replica(s) wanted but only {len(eligible)} eligible server(s): "
                              f"{', '.join(eligible) or 'none'}")
    if partition is not None:
        return tuple(sorted(assign_partition(partition, replication, eligible)))
    kept = [inst for inst in sorted(ideal.segments.get(segment, {})) if inst in eligible][:replication]
    counts = {inst: 0 for inst in eligible}
    for name, replicas in ideal.segments.items():
        if name == segment:
            continue
        for inst, state in replicas.items():
            if inst in counts and state is not SegmentState.DROPPED:
                counts[inst] += 1
    spare = sorted((counts[i], i) for i in eligible if i not in kept)
    chosen = kept + [inst for _, inst in spare[: replication - len(kept)]]
    return tuple(sorted(chosen))


def place_offline_segments(ideal: IdealState, segments: Sequence[str], replication: int,
                           instances: Sequence[str], partitions: Mapping[str, int] | None = None) -> IdealState:
    """``ideal`` with every segment of ``segments`` ONLINE on its servers (placed one after another, so a batch
    push spreads as evenly as single pushes would); ``partitions``: the one partition of a segment's rows."""
    out = ideal
    for segment in segments:
        servers = assign_offline_segment(out, segment, replication, instances, (partitions or {}).get(segment))
        out = out.with_segments_in(segment, servers, SegmentState.ONLINE)
    return out
