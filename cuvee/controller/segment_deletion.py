"""Deleting committed segments: the one path every deleter uses (REST deletes, lineage clean-up, retention).

Order: the ideal state first (servers drop the segment, brokers stop routing it as soon as their view moves),
then the segment metadata, and the deep-store object last, only after a grace period: a reader that planned just
before the delete (a Spark job, a server still downloading) finishes, and a mistaken delete can be undone by hand.
The object is remembered in a ``PendingDeletion`` node; ``purge_due`` deletes what is due, skipping an object a
segment of the same name points at again (deleted, then pushed again within the grace period). A push that
replaces a segment by name with an archive elsewhere schedules the previous archive the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cuvee.cluster.records import IdealState, PendingDeletion
from cuvee.cluster.store import ClusterStore
from cuvee.controller.table_locks import TABLE_LOCKS, TableBusy
from cuvee.spi.deepstore import DeepStore, DeepStoreError, ObjectNotFoundError
from cuvee.spi.metastore import MetadataStoreError

log = logging.getLogger(__name__)


def delete_segments(store: ClusterStore, table: str, names: Iterable[str], now_ms: int, grace_ms: int,
                    reason: str) -> list[str]:
    """Remove ``names`` from ``table`` (with type); returns the names that existed. Safe to re-run."""
    wanted = set(names)
    if not wanted:
        return []
    with TABLE_LOCKS.hold(table):
        return _delete(store, table, wanted, now_ms, grace_ms, reason)


def _delete(store: ClusterStore, table: str, wanted: set[str], now_ms: int, grace_ms: int, reason: str) -> list[str]:

    def drop(ideal: IdealState) -> IdealState:
        for name in wanted & set(ideal.segments):
            ideal = ideal.without_segment(name)
        return ideal

    found = store.ideal_state(table)
    if found is not None and wanted & set(found.record.segments):
        store.update_ideal_state(table, drop)
    deleted = []
    for name in sorted(wanted):
        record = store.find_segment(table, name)
        if record is None:
            continue
        if record.record.download_uri:
            schedule_archive_deletion(store, table, name, record.record.download_uri, now_ms + grace_ms)
        store.delete(store.paths.segment(table, name), record.version)
        try:
            store.delete(store.paths.story(table, name))
        except Exception:  # noqa: BLE001 - the segment is gone; its story is only a leftover
            log.warning("the story of %s/%s could not be deleted", table, name, exc_info=True)
        deleted.append(name)
    if deleted:
        log.info("deleted %d segment(s) of %s (%s): %s", len(deleted), table, reason, ", ".join(deleted[:10]))
    return deleted


def schedule_archive_deletion(store: ClusterStore, table: str, segment: str, download_uri: str,
                              delete_after_ms: int) -> None:
    """Remember ``download_uri`` for ``purge_due``: a deleted segment's archive, or the one a push replaced."""
    store.put(store.paths.pending_deletion(table, segment, download_uri),
              PendingDeletion(table, segment, download_uri, delete_after_ms))


def cancel_archive_deletions(store: ClusterStore, table: str, archives: Iterable[tuple[str, str]]) -> None:
    """Archives (segment, download URI) pushed again are served again: forget their pending deletions. One listing
    of the pending deletions, then a delete per archive actually pending (a push of many segments costs no more)."""
    pending = {f"{store.paths.pending_deletions}/{name}" for name in store.children(store.paths.pending_deletions)}
    for segment, uri in archives:
        path = store.paths.pending_deletion(table, segment, uri)
        if path in pending:
            store.delete(path)


def purge_due(store: ClusterStore, deep_store: DeepStore | None, now_ms: int) -> int:
    """Delete the deep-store objects whose grace period has passed; returns how many were deleted."""
    purged = 0
    for path, pending in store.pending_deletions():
        if pending.delete_after_ms > now_ms:
            continue
        try:
            with TABLE_LOCKS.hold(pending.table):  # no push of this table re-registers the archive meanwhile
                purged += _purge(store, deep_store, path, pending)
        except TableBusy:
            log.info("not purging %s now: %s is being pushed to; next pass", pending.download_uri, pending.table)
    return purged


def _purge(store: ClusterStore, deep_store: DeepStore | None, path: str, pending: PendingDeletion) -> int:
    """Delete one due archive (unless its segment points at it again) and forget it; 1 if an object went."""
    if store.metastore.exists(path) is None:
        return 0  # called off since the listing (pushed again)
    current = store.find_segment(pending.table, pending.segment)
    reused = current is not None and current.record.download_uri == pending.download_uri
    purged = 0
    if deep_store is not None and not reused:
        try:
            key = deep_store.key_of(pending.download_uri)
        except DeepStoreError as exc:  # not in this deep store (configuration changed): nothing we may delete
            log.warning("not deleting %s: %s", pending.download_uri, exc)
            key = None
        try:
            if key is not None:
                deep_store.delete(key)
                purged = 1
        except ObjectNotFoundError:
            pass  # already gone: nothing to purge, forget it
        except DeepStoreError as exc:  # the deep store is down or the URI foreign: keep it, retry next pass
            log.warning("cannot delete %s from the deep store yet: %s", pending.download_uri, exc)
            return 0
    try:
        store.delete(path)
    except MetadataStoreError as exc:
        log.warning("cannot forget the pending deletion %s: %s", path, exc)
    return purged
