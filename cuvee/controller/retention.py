"""Placeholder until the retention task lands (helper in progress)."""

from __future__ import annotations

from collections.abc import Callable

from cuvee.cluster.store import ClusterStore
from cuvee.controller.periodic import PeriodicTask
from cuvee.spi.deepstore import DeepStore


class RetentionTask(PeriodicTask):
    def __init__(self, store: ClusterStore, deep_store: DeepStore | None, clock_ms: Callable[[], int],
                 interval: float, should_run: Callable[[], bool], *, deletion_grace_ms: int, lineage_grace_ms: int,
                 stop_timeout: float = 5.0):
        super().__init__("retention", interval, should_run, stop_timeout)
        self.store = store
        self.deep_store = deep_store
        self.clock_ms = clock_ms
        self.deletion_grace_ms = deletion_grace_ms
        self.lineage_grace_ms = lineage_grace_ms

    def run_pass(self) -> None:
        return None
