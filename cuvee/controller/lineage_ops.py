"""The controller's side of segment lineage: apply the pure rules of ``cuvee.lineage.rules`` by compare-and-set
against the table's current segments, then delete what a stale or reverted entry leaves behind.

Segments a reverted entry pushed were never served, so they are deleted at once (no grace period); segments a
completed entry replaced are deleted by the retention task once ``lineage_grace_seconds`` have passed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from cuvee.cluster.paths import check_name
from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableType
from cuvee.controller.errors import BadRequest, Conflict
from cuvee.controller.segment_deletion import delete_segments
from cuvee.controller.segment_push import MAX_SEGMENT_NAME, check_offline_segment_name
from cuvee.controller.table_setup import latest_segments
from cuvee.errors import UserError
from cuvee.lineage import rules
from cuvee.lineage.model import SegmentLineage
from cuvee.segment.naming import check_segment_name


def _existing(store: ClusterStore, table: str) -> set[str]:
    found = store.ideal_state(table)
    return set(found.record.segments) if found is not None else set()


def _names(body: dict[str, Any], key: str) -> list[str]:
    """A bounded list of bounded, path-safe names. ``segmentsTo`` must be names a push accepts (so an entry never
    waits for what no push can create); ``segmentsFrom`` may name stream (LLC) segments too."""
    value = body.get(key, [])
    if not isinstance(value, list) or len(value) > 100_000:
        raise BadRequest(f"{key} must be a list of at most 100000 segment names")
    if key == "segmentsTo":
        return [check_offline_segment_name(v, where=key) for v in value]
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_SEGMENT_NAME for v in value):
        raise BadRequest(f"{key} must be a list of segment names of 1..{MAX_SEGMENT_NAME} characters")
    try:
        for v in value:
            check_name("segment", v)
            check_segment_name(v)
    except UserError as exc:
        raise BadRequest(f"{key}: {exc}") from None
    return value


def check_realtime_sources(store: ClusterStore, table: str, sources: list[str]) -> None:
    """A REALTIME table's replace (a maintenance job merging committed segments) may replace committed segments
    only: never a consuming one, and never a partition's latest LLC segment (its end offset is where the
    partition's next segment starts: the completion protocol and repair read it)."""
    found = store.ideal_state(table)
    latest = {llc.name for llc in latest_segments(found.record).values()} if found is not None else set()
    for name in sources:
        record = store.find_segment(table, name)
        if record is None or record.record.is_consuming:
            raise BadRequest(f"segment {name} of {table} is not committed: only committed segments can be replaced")
        if name in latest:
            raise BadRequest(f"segment {name} is its partition's latest stream segment: it stays until a newer one "
                             "is committed")


def _fail(exc: rules.LineageError) -> Exception:
    return Conflict(str(exc)) if exc.conflict else BadRequest(str(exc))


def start_replace(store: ClusterStore, table: str, body: Any, now_ms: int, *, force_cleanup: bool,
                  deletion_grace_ms: int) -> str:
    if not isinstance(body, dict):
        raise BadRequest('the body is {"segmentsFrom": [...], "segmentsTo": [...]}')
    sources, targets = _names(body, "segmentsFrom"), _names(body, "segmentsTo")
    if table.endswith(TableType.REALTIME.suffix):
        check_realtime_sources(store, table, sources)
    custom = body.get("customMap", body.get("custom", {}))
    if not isinstance(custom, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(v) <= 1024
                                               for k, v in custom.items()) or len(custom) > 32:
        raise BadRequest("customMap must map at most 32 names to strings")
    entry_id = str(uuid.uuid4())
    outcome: list[rules.StartResult] = []

    def apply(lineage: SegmentLineage) -> SegmentLineage:
        outcome.clear()
        result = rules.start_replace(lineage, entry_id, sources, targets, _existing(store, table), now_ms,
                                     custom=custom, force_cleanup=force_cleanup)
        outcome.append(result)
        return result.lineage

    try:
        store.update_lineage(table, apply)
    except rules.LineageError as exc:
        raise _fail(exc) from None
    if outcome and outcome[0].to_delete:
        delete_segments(store, table, outcome[0].to_delete, now_ms, deletion_grace_ms, "stale lineage entry")
    return entry_id


def wait_until_served(store: ClusterStore, table: str, entry_id: str, timeout_seconds: float,
                      poll_seconds: float = 0.2) -> None:
    """Block until every segmentsTo of the entry is ONLINE on some replica in the external view (so flipping the
    entry never leaves a query with neither the old segments nor the new); 409 at the timeout."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        lineage = store.lineage(table)
        entry = lineage.entries.get(entry_id) if lineage is not None else None
        if entry is None:
            raise BadRequest(f"lineage entry {entry_id!r} does not exist")
        view = store.external_view(table)
        segments = view.segments if view is not None else {}
        waiting = [s for s in entry.segments_to if SegmentState.ONLINE not in segments.get(s, {}).values()]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise Conflict(f"lineage entry {entry_id}: {len(waiting)} of segmentsTo are not ONLINE on any server "
                           f"after {timeout_seconds:g} s (e.g. {', '.join(sorted(waiting)[:3])}); retry later")
        time.sleep(poll_seconds)  # the external view is written by the leader's own task: poll it, bounded


def end_replace(store: ClusterStore, table: str, entry_id: str, now_ms: int, *, serve_timeout_seconds: float) -> None:
    """Check the entry can end (a user error answers at once), wait until its segments are served, then flip it."""
    try:
        rules.end_replace(store.lineage(table) or SegmentLineage(table), entry_id, _existing(store, table), now_ms)
    except rules.LineageError as exc:
        raise _fail(exc) from None
    wait_until_served(store, table, entry_id, serve_timeout_seconds)
    try:
        store.update_lineage(table, lambda lineage: rules.end_replace(lineage, entry_id, _existing(store, table),
                                                                      now_ms))
    except rules.LineageError as exc:
        raise _fail(exc) from None


def revert_replace(store: ClusterStore, table: str, entry_id: str, now_ms: int, *, deletion_grace_ms: int) -> None:
    try:
        stored = store.update_lineage(
            table, lambda lineage: rules.revert_replace(lineage, entry_id, _existing(store, table), now_ms))
    except rules.LineageError as exc:
        raise _fail(exc) from None
    entry = stored.record.entries[entry_id]
    delete_segments(store, table, entry.segments_to, now_ms, deletion_grace_ms, "reverted lineage entry")
