"""The replica each stream partition of an upsert table was last read from, as one broker remembers it.

``cuvee.broker.routing`` is pure: it takes this memory as ``sticky`` and returns its choices as
``RoutingTable.replicas``. The memory lives here, per table, beyond any one external view: the broker's view of
a table is rebuilt at every refresh, and a partition must stay on its replica across them, since replicas read
the stream at different speeds (see routing's module doc). One broker's memory only: another broker, or this one
after a restart, chooses afresh (by the same stable hash, so usually the same replica).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping


class PartitionReplicas:
    """Partition group (``routing``'s key: table and stream partition) → the instance last routed; thread-safe
    (queries route concurrently). It holds one entry per partition the table ever had."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chosen: dict[str, str] = {}

    def get(self) -> dict[str, str]:
        with self._lock:
            return dict(self._chosen)

    def remember(self, chosen: Mapping[str, str]) -> None:
        """The replicas one query was routed to; partitions it did not route keep theirs."""
        if not chosen:
            return
        with self._lock:
            self._chosen.update(chosen)
