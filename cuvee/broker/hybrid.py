"""What a query on a table reads: one table half, or a hybrid table's two halves split at the time boundary. Pure.

A raw name with both an OFFLINE and a REALTIME config is one table to clients. The OFFLINE half answers for rows
with ``time <= boundary`` and the REALTIME half for ``time > boundary`` (Pinot's split), so a row present in both
halves (the realtime data a batch job has since loaded again) is counted exactly once. Both sides of the split
come from one snapshot, so the boundary and the offline segments it was computed over never disagree.

Degenerate cases keep the "exactly once" promise without a filter: no offline segment with a known end time is
served yet → only the realtime half; the realtime half has no segment at all → only the offline half. A name with
its type (``t_OFFLINE``) always reads that half alone, unfiltered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cuvee.cluster.time_boundary import hybrid_halves
from cuvee.config import TableType
from cuvee.protocol.query import TimeFilter

if TYPE_CHECKING:
    from cuvee.broker.cluster_view import TableEntry



@dataclass(frozen=True)
class QueryTarget:
    """One half a query reads, and for a hybrid table the rows of its side of the boundary (None: all rows)."""

    entry: TableEntry
    time_filter: TimeFilter | None = None


def query_targets(realtime: TableEntry | None, offline: TableEntry | None) -> list[QueryTarget]:
    """The halves a query on a raw name reads (either may be missing; none when both are)."""
    if realtime is None or offline is None:
        return [QueryTarget(e) for e in (realtime, offline) if e is not None]
    halves = hybrid_halves(offline.time_boundary, offline.time_column,
                           bool(set(realtime.view.segments) - realtime.hidden), offline.date_pattern)
    entries = {TableType.OFFLINE: offline, TableType.REALTIME: realtime}
    return [QueryTarget(entries[half], time_filter) for half, time_filter in halves.items()]
