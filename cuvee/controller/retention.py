"""The leader's retention task (Pinot's RetentionManager): every ``retention_interval_seconds``, for every table,
plan with the pure ``cluster.retention.plan_retention`` and carry it out through the one deletion path
(``segment_deletion``): expired segments and segments lineage replaced leave the ideal state, the servers and
the metadata at once, their deep-store objects after ``deletion_grace_seconds``; stale IN_PROGRESS lineage
entries are reverted; lineage entries with nothing left to hide are pruned; then the deep-store objects whose
grace has passed are deleted. Counted per table (``GET /tables/{t}/retentionStatus``) and logged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from cuvee.cluster.retention import RetentionPlan, RetentionSnapshot, plan_retention
from cuvee.cluster.store import ClusterStore
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import TableConfig
from cuvee.config.table import raw_table_name
from cuvee.controller.catalog import Catalog
from cuvee.controller.periodic import PeriodicTask, camel_keys
from cuvee.controller.segment_deletion import delete_segments, purge_due
from cuvee.lineage import rules
from cuvee.lineage.model import LineageState, SegmentLineage
from cuvee.segment.archive import UPLOADS, upload_is_stale
from cuvee.spi.deepstore import DeepStore, DeepStoreError

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)


@dataclass
class TableRetentionStats:
    expired_deleted: int = 0  # segments deleted for being past the table's retention (since this controller started)
    replaced_deleted: int = 0  # segments deleted because a lineage entry replaced or abandoned them
    entries_reverted: int = 0  # IN_PROGRESS lineage entries reverted as stale
    unknown_end: int = 0  # committed segments without a comparable end time at the last pass (kept)
    failures: int = 0  # passes over this table that failed (logged)
    last_pass_ms: int | None = None


class RetentionTask(PeriodicTask):
    def __init__(self, store: ClusterStore, deep_store: DeepStore | None, clock_ms: Callable[[], int],
                 interval: float, should_run: Callable[[], bool], *, deletion_grace_ms: int, lineage_grace_ms: int,
                 in_progress_timeout_ms: int, stale_upload_ms: int = 3_600_000, stop_timeout: float = 5.0):
        super().__init__("retention", interval, should_run, stop_timeout)
        self.store = store
        self.deep_store = deep_store
        self.clock_ms = clock_ms
        self.deletion_grace_ms = deletion_grace_ms
        self.lineage_grace_ms = lineage_grace_ms
        self.in_progress_timeout_ms = in_progress_timeout_ms
        self.stale_upload_ms = stale_upload_ms
        self.purged_uploads = 0  # committers' uploads no commit took, deleted once stale
        self.stats: dict[str, TableRetentionStats] = {}
        self.passes = 0
        self.failed_passes = 0
        self.purged_objects = 0
        self._lock = threading.Lock()  # a pass from the thread and one from a test never interleave

    def run_pass(self) -> None:
        with self._lock:
            try:
                catalog = Catalog(self.store)
                failed = 0
                for table in catalog.table_names():
                    try:  # one broken table must not stop retention (and deep-store purges) for the others
                        config = catalog.find_table(table)
                        if config is not None:
                            self._table(catalog, config)
                    except Exception:
                        failed += 1
                        self.stats.setdefault(table, TableRetentionStats()).failures += 1
                        log.exception("retention of %s failed; the next pass retries", table)
                self.purged_objects += purge_due(self.store, self.deep_store, self.clock_ms())
                self.purged_uploads += self._purge_stale_uploads(catalog.table_names())
                self.passes += 1
                self.failed_passes += 1 if failed else 0
            except Exception:  # a pass must never kill the thread: count, log, next pass retries
                self.failed_passes += 1
                log.exception("retention pass failed")

    def _purge_stale_uploads(self, tables: list[str]) -> int:
        """Delete committers' uploads (``deep_store_upload_key``) older than ``stale_upload_ms``: a commit moves
        its upload into place within its lease, so an older one belongs to a committer that lost its turn."""
        if self.deep_store is None:
            return 0
        purged, now = 0, self.clock_ms()
        for table in tables:
            if not table.endswith("_REALTIME"):
                continue
            try:
                for key in self.deep_store.list(f"{table}/{UPLOADS}/"):
                    if upload_is_stale(key, now, self.stale_upload_ms) and not self._recorded(table, key):
                        self.deep_store.delete(key)
                        purged += 1
            except DeepStoreError as exc:  # the next pass retries
                log.warning("retention: could not clean up stale uploads of %s: %s", table, exc)
        return purged

    def _recorded(self, table: str, key: str) -> bool:
        """Whether the segment the upload is of records it as its download URI (a commit on a controller that
        had no deep store to move it with): then it is the segment's archive, never stale."""
        assert self.deep_store is not None
        segment = key.rsplit("/", 1)[-1].split(".", 1)[0]
        found = self.store.find_segment(table, segment)
        return found is not None and found.record.download_uri == self.deep_store.uri(key)

    def _table(self, catalog: Catalog, config: TableConfig) -> None:
        table, now = config.name_with_type, self.clock_ms()
        schema = catalog.find_schema(raw_table_name(table))
        ideal = self.store.ideal_state(table)
        records = {}
        for name in self.store.segment_names(table):
            found = self.store.find_segment(table, name)
            if found is not None:
                records[name] = found.record
        lineage = self.store.lineage(table)
        snapshot = RetentionSnapshot(
            table=table, realtime=config.is_realtime,
            retention_ms=None if not config.is_realtime and config.push_type == "REFRESH"  # as Pinot
            else config.segments.retention_ms,
            step_ms=millis_per_value(schema, config.time_column) if schema is not None else None,
            records=records, ideal=ideal.record.segments if ideal is not None else {}, lineage=lineage)
        plan = plan_retention(snapshot, now, lineage_grace_ms=self.lineage_grace_ms,
                              in_progress_timeout_ms=self.in_progress_timeout_ms)
        stats = self.stats.setdefault(table, TableRetentionStats())
        stats.unknown_end, stats.last_pass_ms = plan.unknown_end, now
        if not plan.empty:
            self._carry_out(table, plan, stats, now)
        if lineage is not None and lineage.entries:
            # an entry may stop hiding its segments only once no server serves them either: a broker routes by
            # the external view, which lags behind the ideal state
            existing = set(self.store.segment_names(table))
            after, view = self.store.ideal_state(table), self.store.external_view(table)
            existing |= set(after.record.segments) if after is not None else set()
            existing |= set(view.segments) if view is not None else set()
            self.store.update_lineage(table, lambda current: rules.prune(current, existing))

    def _carry_out(self, table: str, plan: RetentionPlan, stats: TableRetentionStats, now: int) -> None:
        if plan.revert:
            reverted: list[str] = []

            def revert(lineage: SegmentLineage) -> SegmentLineage:
                reverted.clear()
                for entry_id in plan.revert:  # re-checked inside the compare-and-set: a pusher may have ended it
                    entry = lineage.entries.get(entry_id)
                    if entry is not None and entry.state is LineageState.IN_PROGRESS:
                        lineage = lineage.with_entry(entry_id, entry.with_state(LineageState.REVERTED, now))
                        reverted.append(entry_id)
                return lineage

            self.store.update_lineage(table, revert)
            stats.entries_reverted += len(reverted)
            if reverted:
                log.warning("retention: reverted %d stale IN_PROGRESS lineage entr(ies) of %s: %s", len(reverted),
                            table, ", ".join(reverted))
        replaceable = _still_replaceable(self.store.lineage(table), plan.replaced)
        expired = delete_segments(self.store, table, plan.expired, now, self.deletion_grace_ms, "retention")
        replaced = delete_segments(self.store, table, replaceable, now, self.deletion_grace_ms, "lineage clean-up")
        stats.expired_deleted += len(expired)
        stats.replaced_deleted += len(replaced)
        if expired or replaced:
            log.info("retention: %s: %d expired and %d replaced segment(s) deleted", table, len(expired),
                     len(replaced))

    def status(self, table: str) -> dict[str, Any]:  # noqa: D102
        stats = self.stats.get(table, TableRetentionStats())
        return {"table": table, "passes": self.passes, "failedPasses": self.failed_passes,
                "purgedObjects": self.purged_objects, "purgedUploads": self.purged_uploads,
                **camel_keys(asdict(stats))}


def _still_replaceable(lineage: SegmentLineage | None, names: tuple[str, ...]) -> list[str]:
    """The planned lineage deletions that are still right under the lineage as it is now (the plan was made from
    an older read: a pusher may have ended its entry, a re-run taken the names over): hidden by some entry and
    not the segmentsTo of an entry in progress or completed."""
    if lineage is None:
        return []
    owned = {s for e in lineage.entries.values() if e.state is not LineageState.REVERTED for s in e.segments_to}
    return sorted((set(names) & rules.hidden_segments(lineage)) - owned)


def router(ctl: Controller) -> APIRouter:
    """``GET /tables/{table}/retentionStatus``: this controller's retention counters, per half of the table."""
    api = APIRouter()

    @api.get("/tables/{table}/retentionStatus")
    def retention_status(table: str) -> dict[str, Any]:
        halves = Catalog(ctl.store).resolve(table)  # 404 when there is none
        return {"leader": ctl.is_leader, "intervalSeconds": ctl.config.retention_interval_seconds,
                "tables": [ctl.retention.status(full) for full in halves]}

    return api
