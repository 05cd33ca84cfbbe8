"""The leader's external view writer: merge live instances' current states per table, write changed views.

Woken by metadata-store watches (live instances, each instance's current-state nodes, the table list) with a
polling fallback every ``interval`` seconds, since watches may coalesce or be missed across reconnections.
Runs only while ``should_run()`` (leader and connected); it stops writing at once when that turns false.
``stop()`` waits at most ``stop_timeout`` seconds for a pass in progress (a hung metadata store must not hang the
controller's shutdown; the thread is a daemon).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cuvee.cluster.external_view import merge_external_view
from cuvee.cluster.store import ClusterStore
from cuvee.controller.periodic import PeriodicTask
from cuvee.spi.metastore import MetadataStoreError, Subscription, WatchEvent

log = logging.getLogger(__name__)


class ExternalViewTask(PeriodicTask):
    def __init__(
        self, store: ClusterStore, interval: float, should_run: Callable[[], bool], *, stop_timeout: float = 5.0
    ):
        super().__init__("external-view", interval, should_run, stop_timeout)
        self.store = store
        self.refreshes = 0
        self.writes = 0
        self.failures = 0
        self._subs: dict[str, Subscription] = {}

    def stop(self) -> None:
        super().stop()
        self._cancel_watches()

    def _on_event(self, _event: WatchEvent) -> None:
        self.poke()

    def idle(self) -> None:
        self._cancel_watches()  # not leading: another controller writes the views

    def run_pass(self) -> None:
        try:
            self.refresh()
        except MetadataStoreError as exc:
            self.failures += 1
            log.warning("external view refresh failed: %s", exc)

    def refresh(self) -> None:
        """One pass: watch what is new, write every table's view that changed."""
        paths = self.store.paths
        live = self.store.live_instance_ids()
        tables = self.store.children(paths.tables)
        self._watch_children(paths.live_instances)
        self._watch_children(paths.tables)
        for instance in live:
            self._watch_children(paths.current_states(instance))
            for table in tables:
                self._watch(paths.current_state(instance, table))
        live_set = set(live)
        for table in tables:
            if not self.should_run():
                return
            view = merge_external_view(table, self.store.current_states(table, live), live_set)
            if self.store.external_view(table) != view:
                self.store.put_external_view(view)
                self.writes += 1
        self.refreshes += 1

    def _watch(self, path: str) -> None:
        if path not in self._subs:
            self._subs[path] = self.store.metastore.watch(path, self._on_event)

    def _watch_children(self, path: str) -> None:
        key = path + "/*"
        if key in self._subs:
            return
        try:
            self._subs[key] = self.store.metastore.watch_children(path, self._on_event)
        except MetadataStoreError:
            pass  # the parent does not exist yet: polling covers it until it does

    def _cancel_watches(self) -> None:
        subs, self._subs = self._subs, {}
        for sub in subs.values():
            try:
                sub.cancel()
            except MetadataStoreError:
                pass
