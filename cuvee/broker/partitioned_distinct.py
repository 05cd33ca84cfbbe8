"""Distinct counts on a partitioned column summed over servers, when the routing proves it right. Pure.

A distinct count over several servers normally ships every server's distinct values to the broker (each value
counted once however many servers saw it). When no value of the counted column is in two of the server requests
a query makes, each request's own ``count(DISTINCT x)`` can simply be summed (``QueryPlan.disjoint``). That holds
when

- every table half the query reads (an OFFLINE or REALTIME table, or both halves of a hybrid one) has a
  ``tableIndexConfig.segmentPartitionConfig.columnPartitionMap`` partitioning the counted column, alike;
- every segment the routing sends records the partitions of its rows under that same function and count (an
  OFFLINE or committed REALTIME segment's partition metadata, computed from its rows when it was built; a
  consuming segment's stream partition when the broker's view knows it holds that partition alone:
  ``cuvee.pruning.stream_partitions``); and
- no partition's segments are sent in two requests: not to two servers (a partition split over replicas, e.g.
  during a replica move), nor to one server for both halves of a hybrid table (each half is its own request).

A value belongs to one partition, that partition's segments all go in one request, so each value is counted once.
Anything else (a segment without partition metadata, one built under another function, a consuming segment a
replica saw rows of other partitions in) keeps the plan that ships values. Pinot's SEGMENTPARTITIONEDDISTINCTCOUNT
sums per segment on the user's word alone; this asks for proof, and sums per server.
"""

from __future__ import annotations

from collections.abc import Sequence

from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.routing import RoutingTable
from cuvee.query import QueryPlan


def disjoint_plan(plan: QueryPlan, targets: Sequence[QueryTarget], routings: Sequence[RoutingTable]) -> QueryPlan:
    """The variant of ``plan`` whose distinct counts are summed (``QueryPlan.disjoint``) when the routing proves
    it right (the module's rules), else ``plan`` itself."""
    if not plan.disjoint or not targets or len(targets) != len(routings):
        return plan
    spec = targets[0].entry.partition_spec
    if spec is None or spec.column not in plan.disjoint:
        return plan
    owner: dict[int, tuple[int, str]] = {}  # partition -> the request (half, server) that reads it
    for half, (target, routing) in enumerate(zip(targets, routings)):
        entry = target.entry
        same = entry.partition_spec
        if same is None or (same.column, same.function, same.num_partitions) != \
                (spec.column, spec.function, spec.num_partitions):
            return plan
        for instance, segments in routing.servers.items():
            for segment in segments:
                parts = entry.partitions.get(segment)
                if parts is None or not parts.same_function(spec):
                    return plan
                for partition in parts.partitions:
                    if owner.setdefault(partition, (half, instance)) != (half, instance):
                        return plan
    return plan.disjoint[spec.column]
