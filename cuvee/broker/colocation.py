"""Where a join of two tables partitioned alike runs on the servers (``cuvee.multistage.colocated_join``). Pure.

Each partition of the join goes to one live server holding ONLINE every segment of that partition of both tables
(placed there by the push: ``cuvee.cluster.offline_assignment``); a server gets all the partitions chosen for
it in one request. The join is placed only when nothing can be missed or counted twice:

- both tables are OFFLINE-only (no hybrid half, no upsert), partitioned on the join's columns by the same
  function into the same number of partitions, with join columns of one type (a hash of 1 and of 1.0 differ);
- every segment queries read (lineage-visible, and every expected one in the view) records its partitions under
  that function and holds rows of at most one (a segment of no rows is skipped), and is ONLINE on some server;
- every partition of the FROM table has a server holding its segments of both tables.

Otherwise None, and the broker joins the two tables' rows itself, reporting unavailable segments as usual.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from cuvee.broker.cluster_view import TableEntry
from cuvee.cluster.records import SegmentState
from cuvee.protocol.query import Colocation


@dataclass(frozen=True)
class JoinPlacement:
    """The servers a colocated join asks: instance -> (its segments of the left table, of the right table), and
    the partitions each answers for (what its copies must hold, checked by the server: ``Colocation``)."""

    left: TableEntry
    right: TableEntry
    servers: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
    partitions: Mapping[str, tuple[int, ...]]

    def colocation(self, instance: str) -> Colocation:
        """What ``instance``'s share of the join must hold."""
        spec_a, spec_b = self.left.partition_spec, self.right.partition_spec
        assert spec_a is not None and spec_b is not None
        return Colocation(spec_a.function, spec_a.num_partitions, self.partitions[instance],
                          {self.left.name: spec_a.column, self.right.name: spec_b.column})


def place_join(left: TableEntry, left_key: str, right: TableEntry, right_key: str, live: Set[str],
               same_type: bool) -> JoinPlacement | None:
    """The placement of ``left JOIN right ON left.left_key = right.right_key`` (see the module's rules); None
    when the servers cannot answer it."""
    spec_a, spec_b = left.partition_spec, right.partition_spec
    if spec_a is None or spec_b is None or not same_type or spec_a.column != left_key \
            or spec_b.column != right_key or (spec_a.function, spec_a.num_partitions) != \
            (spec_b.function, spec_b.num_partitions):
        return None
    parts_a, parts_b = _partitions(left), _partitions(right)
    if parts_a is None or parts_b is None:
        return None
    chosen: dict[str, tuple[list[str], list[str]]] = {}
    answered: dict[str, list[int]] = {}
    for partition, segments in sorted(parts_a.items()):
        others = parts_b.get(partition, [])
        holders = set(live)
        for entry, names in ((left, segments), (right, others)):
            for name in names:
                holders &= {i for i, state in entry.view.segments.get(name, {}).items() if state is SegmentState.ONLINE}
        if not holders:
            return None
        ranked = sorted(holders)
        instance = ranked[partition % len(ranked)]  # partitions spread over the replicas that hold them
        mine = chosen.setdefault(instance, ([], []))
        mine[0].extend(segments)
        mine[1].extend(others)
        answered.setdefault(instance, []).append(partition)
    return JoinPlacement(left, right, {i: (tuple(sorted(a)), tuple(sorted(b))) for i, (a, b) in chosen.items()},
                         {i: tuple(parts) for i, parts in answered.items()})


def _partitions(entry: TableEntry) -> dict[int, list[str]] | None:
    """Partition -> the segments queries read that hold its rows; None when one of them is not known to hold
    rows of at most one partition under the table's function, or is ONLINE nowhere."""
    spec = entry.partition_spec
    if spec is None or entry.upsert or not entry.name.endswith("_OFFLINE") or entry.absent:
        return None
    found: dict[int, list[str]] = {}
    for name, replicas in entry.visible.items():
        parts = entry.partitions.get(name)
        if parts is None or not parts.same_function(spec) or len(parts.partitions) > 1:
            return None
        if not any(state is SegmentState.ONLINE for state in replicas.values()):
            return None
        if parts.single is not None:
            found.setdefault(parts.single, []).append(name)
    return found
