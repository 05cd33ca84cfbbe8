"""The controller's metrics: the completion protocol, commits, repair."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from cuvee.metrics import keep_label_values, new_registry

_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = new_registry()
        r = self.registry
        self.completion_responses = Counter("cuvee_controller_completion_responses", "Completion protocol answers, "
                                            "by request and status", ("request", "status"), registry=r)
        self.completion_refused = Counter("cuvee_controller_completion_refused", "Completion requests from callers "
                                          "that take no part in the segment", registry=r)
        self.commits = Counter("cuvee_controller_commits", "Segment commits run by this controller, by outcome",
                               ("table", "outcome"), registry=r)
        self.commit_seconds = Histogram("cuvee_controller_commit_seconds", "The three commit steps of a segment",
                                        ("table",), buckets=_SECONDS, registry=r)
        self.task_runs = Counter("cuvee_controller_task_runs", "Maintenance job runs reported (or found dead), by "
                                 "table, task type and outcome", ("table", "task_type", "status"), registry=r)
        self.task_run_seconds = Histogram("cuvee_controller_task_run_seconds", "Maintenance job runs' durations",
                                          ("table", "task_type"), buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800,
                                                                           3600, 7200), registry=r)
        self._tables: Collection[str] | None = None  # the tables that exist, as of the last keep_tables

    def keep_tables(self, tables: Collection[str]) -> None:
        """Drop every series of a table not in ``tables`` (the tables that exist: names with type)."""
        self._tables = tables
        keep_label_values(self, "table", lambda value: value in tables)

    def watch_received(self, received: Callable[[], Mapping[str, int]]) -> None:
        """Segment archive bytes the controller received, by source (``received()``: source -> bytes)."""
        self.registry.register(_ReceivedCollector(received))

    def watch_repair(self, stats: Callable[[], Mapping[str, Any]]) -> None:
        """Repair counters read at scrape time: ``stats()`` maps a table to its ``TableRepairStats`` (tables
        ``keep_tables`` was not given are left out)."""
        self.registry.register(_RepairCollector(
            lambda: {t: s for t, s in stats().items() if self._tables is None or t in self._tables}))


_REPAIR_KINDS = {"commits_finished": "finish_commit", "segments_recreated": "recreate_consuming",
                 "commits_restarted": "restart_committing", "successors_created": "create_successor",
                 "partitions_added": "new_partition", "segments_uploaded": "upload_peer_only"}


class _ReceivedCollector(Collector):
    def __init__(self, received: Callable[[], Mapping[str, int]]):
        self._received = received

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("cuvee_controller_received_segment_bytes", "Segment archive bytes the "
                                     "controller received (none in the default mode: committers upload to the deep "
                                     "store)", labels=["source"])
        for source, value in sorted(self._received().items()):
            family.add_metric([source], value)
        yield family


class _RepairCollector(Collector):
    def __init__(self, stats: Callable[[], Mapping[str, Any]]):
        self._stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[CounterMetricFamily]:
        actions = CounterMetricFamily("cuvee_controller_repair_actions", "Repairs carried out, by kind",
                                      labels=["table", "kind"])
        lost = CounterMetricFamily("cuvee_controller_offsets_lost", "Stream offsets a re-created consuming segment "
                                   "had to skip because retention removed them (data lost)", labels=["table"])
        for table, stats in sorted(self._stats().items()):
            values = asdict(stats)
            for key, kind in _REPAIR_KINDS.items():
                actions.add_metric([table, kind], values.get(key, 0))
            lost.add_metric([table], values.get("offsets_lost", 0))
        yield from (actions, lost)
