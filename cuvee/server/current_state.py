"""This server's current states (one record per table), kept in memory and written through on every change.

The server is the only writer of its current-state nodes, so writes use ``ClusterStore.put`` (no CAS needed).
Failed transitions are remembered with the target that failed, which the transition planner needs.

Memory holds what the server really holds (the transition's I/O has happened either way). A write to the store that
fails leaves the table *dirty*: the failure is logged and counted, and ``flush`` (run by the follower on every pass)
writes the table's whole record again until one write succeeds, so the record in the store never stays stale.
"""

from __future__ import annotations

import logging
import threading

from cuvee.cluster.records import CurrentState, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.spi.metastore import StoreUnavailableError

log = logging.getLogger(__name__)


class CurrentStates:
    def __init__(self, store: ClusterStore, instance_id: str):
        self._store = store
        self._instance_id = instance_id
        self._lock = threading.Lock()
        self._states: dict[str, dict[str, SegmentState]] = {}
        self._failed: dict[str, dict[str, SegmentState]] = {}
        self._dirty: set[str] = set()  # tables whose last write failed
        self.write_failures = 0  # store writes that failed (inspectable)

    @property
    def instance_id(self) -> str:
        return self._instance_id

    def reset(self) -> None:
        """Forget every current state this instance wrote before (a restart holds nothing yet)."""
        self._store.delete(self._store.paths.current_states(self._instance_id))
        with self._lock:
            self._states.clear()
            self._failed.clear()
            self._dirty.clear()

    def set(self, table: str, segment: str, state: SegmentState | None, *, failed_target: SegmentState | None = None) -> None:
        """Record ``state`` (None or DROPPED: no longer held) and write the table's record (see ``flush`` if the
        write fails; this never raises for a store error)."""
        with self._lock:
            segments = self._states.setdefault(table, {})
            if state is None or state is SegmentState.DROPPED:
                segments.pop(segment, None)
            else:
                segments[segment] = state
            failed = self._failed.setdefault(table, {})
            if state is SegmentState.ERROR and failed_target is not None:
                failed[segment] = failed_target
            else:
                failed.pop(segment, None)
            # written under the lock so two transitions of one table cannot reorder their writes
            self._write(table)

    def rewrite(self) -> None:
        """Write every table's record again from memory (a new session: the store must show what is held now).
        Raises the store's error if a write fails (the tables stay dirty for ``flush``)."""
        with self._lock:
            self._dirty.update(self._states)
            for table in sorted(self._dirty):
                self._write(table)
            if self._dirty:
                raise StoreUnavailableError(f"{self._instance_id}: current states of {sorted(self._dirty)} not written")

    def flush(self) -> bool:
        """Write again every table whose last write failed; True when nothing is left dirty."""
        with self._lock:
            for table in sorted(self._dirty):
                self._write(table)
            return not self._dirty

    def dirty(self) -> list[str]:
        with self._lock:
            return sorted(self._dirty)

    def _write(self, table: str) -> None:
        record = CurrentState(self._instance_id, table, dict(self._states.get(table, {})))
        try:
            self._store.put_current_state(record)
        except Exception as exc:  # noqa: BLE001 - the store may be briefly unreachable: flush() writes it again
            self.write_failures += 1
            self._dirty.add(table)
            log.warning("%s: writing the current state of %s failed (will write it again): %s",
                        self._instance_id, table, exc)
            return
        self._dirty.discard(table)

    def of(self, table: str) -> dict[str, SegmentState]:
        with self._lock:
            return dict(self._states.get(table, {}))

    def failed(self, table: str) -> dict[str, SegmentState]:
        with self._lock:
            return dict(self._failed.get(table, {}))

    def get(self, table: str, segment: str) -> SegmentState | None:
        with self._lock:
            return self._states.get(table, {}).get(segment)

    def tables(self) -> list[str]:
        with self._lock:
            return sorted(t for t, s in self._states.items() if s)
