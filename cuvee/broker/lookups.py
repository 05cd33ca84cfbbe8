"""What the broker adds to a plan with LOOKUP calls (``cuvee.query.lookup``): the dimension tables' column types,
and per query the segments each server must hold of them.

A dimension table's segments are on every server of its tenant, so every server is told all of them: the segments
the broker's view shows ONLINE on some server (and lineage does not hide). A server lacking one says so (an
error naming the table and the segments), rather than answering NULL for the rows it does not have.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from cuvee.broker.cluster_view import TableEntry
from cuvee.cluster.records import SegmentState
from cuvee.protocol.query import DimLookup
from cuvee.query import QueryError, QueryErrorCode, QueryPlan


class _Tables(Protocol):
    def table(self, name_with_type: str) -> TableEntry | None: ...


def with_schemas(plan: QueryPlan, view: _Tables) -> QueryPlan:
    """``plan`` with each dimension table's Arrow schema (what binding its steps over no rows needs); 190 when a
    dimension table left the view since the plan resolved it."""
    if not plan.lookups:
        return plan
    typed = []
    for lookup in plan.lookups:
        entry = view.table(lookup.table)
        if entry is None:
            raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"LOOKUP: table {lookup.table!r} does not exist")
        typed.append(dataclasses.replace(lookup, schema=entry.arrow_schema))
    return dataclasses.replace(plan, lookups=tuple(typed))


def served_segments(entry: TableEntry | None) -> tuple[str, ...]:
    """The segments of a dimension table queries read: ONLINE on some server, not hidden by lineage."""
    if entry is None:
        return ()
    return tuple(sorted(name for name, replicas in entry.visible.items()
                        if any(state is SegmentState.ONLINE for state in replicas.values())))


def lookup_requests(plan: QueryPlan, view: _Tables) -> tuple[DimLookup, ...]:
    """What every server of the query is told about the dimension tables its SQL reads (the schema only when
    there is no segment: it then types the relation). A dimension table gone since planning is 190; one with a
    segment no server serves (none ONLINE, or not in the external view yet) is 305 — its keys would otherwise
    answer NULL without a word."""
    requests = []
    for lookup in plan.lookups:
        entry = view.table(lookup.table)
        if entry is None:
            raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"LOOKUP: table {lookup.table!r} does not exist")
        segments = served_segments(entry)
        unserved = sorted((set(entry.visible) - set(segments)) | set(getattr(entry, "absent", ()) or ()))
        if unserved:
            raise QueryError(QueryErrorCode.BROKER_SEGMENT_UNAVAILABLE,
                             f"LOOKUP: {len(unserved)} segment(s) of dimension table {lookup.table!r} have no ONLINE "
                             f"replica: {', '.join(unserved[:10])}")
        requests.append(DimLookup(lookup.relation, lookup.table, segments, None if segments else lookup.schema))
    return tuple(requests)
