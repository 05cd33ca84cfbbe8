"""The external view: what live servers say they hold, merged per segment, for brokers to route by.

Only live instances count: a server that died keeps its last current state in the store until it rewrites it on
restart, and routing to it would fail. DROPPED replicas are gone and left out; OFFLINE and ERROR stay visible
(brokers skip them, operators want to see them).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from cuvee.cluster.records import CurrentState, ExternalView, SegmentState


def merge_external_view(table: str, current_states: Iterable[CurrentState], live: Collection[str]) -> ExternalView:
    """The external view of ``table`` (name with type) from the given current states, keeping live instances.

    The result is deterministic (segments and instances sorted), so an unchanged view compares equal and the
    controller can skip the write."""
    merged: dict[str, dict[str, SegmentState]] = {}
    for state in sorted(current_states, key=lambda s: s.instance_id):
        if state.table != table or state.instance_id not in live:
            continue
        for segment, replica_state in state.segments.items():
            if replica_state is SegmentState.DROPPED:
                continue
            merged.setdefault(segment, {})[state.instance_id] = replica_state
    return ExternalView(table, {segment: merged[segment] for segment in sorted(merged)})
