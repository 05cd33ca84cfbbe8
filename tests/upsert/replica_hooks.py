"""Test hooks that make one replica of an upsert partition lag behind the other at a chosen point, on an in-process
cluster: ``held`` wraps one server's transitions, ``preferred`` names the replica the broker's stable hash picks
(the one to make lag, so a test fails whenever routing moves the partition to it)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from cuvee.broker.routing import route
from cuvee.cluster.records import SegmentState
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.testing.cluster import InProcessCluster


def preferred(cluster: InProcessCluster, table: str, partition: int = 0) -> Any:
    """The server routing picks, choosing afresh, for ``table``'s ``partition`` when every server serves all of it."""
    segment = LLCSegmentName(table, partition, 1, 0).name
    ids = [server.instance_id for server in cluster.servers]
    routing = route({segment: {i: SegmentState.CONSUMING for i in ids}}, frozenset(ids), 0, hold_back=False,
                    strict=True, upsert=True)
    (instance,) = routing.servers
    return next(server for server in cluster.servers if server.instance_id == instance)


@contextmanager
def held(transitions: Any, table: str, sequence: int) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Hold ``transitions``' start of ``table``'s segments of ``sequence`` until the first event is set (it does
    not list them yet), then their upsert gate (listed CONSUMING, no row read) until the second is. Both are set,
    and the transitions restored, on the way out."""
    start, gate = threading.Event(), threading.Event()
    start_consuming: Callable[[str, str], None] = transitions._start_consuming
    upsert_gate: Callable[..., bool] = transitions._upsert_gate

    def ours(t: str, segment: str) -> bool:
        return t == table and LLCSegmentName.parse(segment).sequence == sequence

    def held_start(t: str, segment: str) -> None:
        if ours(t, segment):
            start.wait(60)
        start_consuming(t, segment)

    def held_gate(t: str, segment: str, upsert: Any, interrupted: threading.Event) -> bool:
        if ours(t, segment):
            gate.wait(60)
        return upsert_gate(t, segment, upsert, interrupted)

    transitions._start_consuming, transitions._upsert_gate = held_start, held_gate
    try:
        yield start, gate
    finally:
        start.set()
        gate.set()
        del transitions._start_consuming, transitions._upsert_gate  # the class's own again
