"""Broker-side pruning (Pinot's ``routing.segmentPrunerTypes: ["partition"]``): segments whose recorded partitions
rule out a query's ``=``/``IN`` on the table's partition column are left out of its routing, so no server is even
asked for them. Pure, over the routing and what the broker's view read from the segments' records.

Only the partition column is known here (the broker reads no column statistics): its type from the schema, no
min/max, so ``cuvee.pruning.may_match`` decides by partitions alone. A REALTIME table's segments are pruned too:
committed ones by the partitions their records carry, consuming ones by their stream partition when the view
knows it to hold that partition alone (``cuvee.pruning.stream_partitions``: it has facts only then). The servers
prune again, by everything their segments' metadata says. Pinot's ``time`` pruner is not run here: the servers
prune by the time column's min/max in each committed segment (and a hybrid half's time filter) instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cuvee.broker.routing import RoutingTable
from cuvee.pruning import Predicate, SegmentFacts, Work, may_match
from cuvee.segment.metadata import ColumnMetadata
from cuvee.segment.partitioning import SegmentPartitions

PARTITION_PRUNER = "partition"  # the segmentPrunerTypes value the broker honours (any case)


def partition_facts(column: str, data_type: str, partitions: SegmentPartitions) -> SegmentFacts:
    """What the broker knows of one segment: the partitions of its rows in ``column`` (of schema type
    ``data_type``). The row count is unknown (-1: never taken for an empty segment)."""
    meta = ColumnMetadata(column, data_type, True, 0, None, None, False, 0, False, False, False, False, 0, 0, 1)
    return SegmentFacts(-1, {column: meta}, partitions)


def prune_routing(routing: RoutingTable, predicate: Predicate | None,
                  facts: Mapping[str, SegmentFacts]) -> tuple[RoutingTable, int]:
    """``routing`` without the segments ``predicate`` rules out by ``facts`` (segments without facts stay), and how
    many were left out. A server left with no segment is not asked at all."""
    if predicate is None or not facts:
        return routing, 0
    servers: dict[str, tuple[str, ...]] = {}
    pruned = 0
    work = Work()  # the query's: its IN lists hashed once, its checks within one budget
    for instance, segments in routing.servers.items():
        kept = tuple(s for s in segments if s not in facts or may_match(predicate, facts[s], work))
        pruned += len(segments) - len(kept)
        if kept:
            servers[instance] = kept
    if not pruned:
        return routing, 0
    return dataclasses.replace(routing, servers=servers), pruned
