"""Distinct counts on a partitioned column summed over servers, when the routing proves it right. Pure.

A distinct count over several servers normally ships every server's distinct values to the broker (each value
counted once however many servers saw it). When no value of the counted column is on two of the servers a query
asks, each server's own ``count(DISTINCT x)`` can simply be summed (``QueryPlan.disjoint``). That holds when

- the query reads one table half (not a hybrid table's two: each half holds rows of every partition), whose
  ``tableIndexConfig.segmentPartitionConfig.columnPartitionMap`` partitions the counted column;
- every segment the routing sends records the partitions of its rows under that same function and count (the
  segment's partition metadata, computed from its rows when it was built); and
- no partition's segments are sent to two servers.

A value belongs to one partition, that partition's segments all go to one server, so each value is counted on one
server only. Anything else (a segment without partition metadata, one built under another function, a partition
split over replicas) keeps the plan that ships values. Pinot's SEGMENTPARTITIONEDDISTINCTCOUNT sums per segment on
the user's word alone; this asks for proof, and sums per server.
"""

from __future__ import annotations

from collections.abc import Sequence

from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.routing import RoutingTable
from cuvee.query import QueryPlan


def disjoint_plan(plan: QueryPlan, targets: Sequence[QueryTarget], routings: Sequence[RoutingTable]) -> QueryPlan:
    """The variant of ``plan`` whose distinct counts are summed (``QueryPlan.disjoint``) when the routing proves
    it right (the module's rules), else ``plan`` itself."""
    if not plan.disjoint or len(targets) != 1 or len(routings) != 1:
        return plan
    entry = targets[0].entry
    spec = entry.partition_spec
    if spec is None or spec.column not in plan.disjoint or targets[0].time_filter is not None:
        return plan
    owner: dict[int, str] = {}
    for instance, segments in routings[0].servers.items():
        for segment in segments:
            parts = entry.partitions.get(segment)
            if parts is None or not parts.same_function(spec):
                return plan
            for partition in parts.partitions:
                if owner.setdefault(partition, instance) != instance:
                    return plan
    return plan.disjoint[spec.column]
