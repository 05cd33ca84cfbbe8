"""Typed, versioned access to the cluster state over any metadata store.

The controller's commit steps are written as pure functions ``record -> record`` and applied with ``update``:
read the node with its version, apply the function, compare-and-set, and on a version conflict re-read and re-apply
(bounded). An update function that returns its input unchanged writes nothing, so a step that was already applied
is a no-op when re-run; one that raises RequirementFailedError stops the commit without a retry (the base record is
in a state the step must not touch). This mirrors iceberg's ``commit(requirements, updates)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from cuvee.cluster.errors import CommitConflictError, RecordExistsError, RecordNotFoundError
from cuvee.cluster.paths import ClusterPaths
from cuvee.cluster.records import (
    CurrentState,
    ExternalView,
    IdealState,
    InstanceInfo,
    PendingDeletion,
    Record,
    SegmentRecord,
    TimeBoundaryOverride,
)
from cuvee.spi.metastore import ANY_VERSION, MetadataStore, NodeExistsError, NoNodeError, VersionConflictError

if TYPE_CHECKING:
    from cuvee.lineage.model import SegmentLineage

R = TypeVar("R", bound=Record)

DEFAULT_MAX_ATTEMPTS = 50


@dataclass(frozen=True)
class Versioned(Generic[R]):
    """A record and the node version it was read at (the ``expected_version`` of the next write)."""

    record: R
    version: int


class ClusterStore:
    """One cluster's records on one metadata store session. Thread-safe as the session is."""

    def __init__(self, metastore: MetadataStore, cluster: str, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.metastore = metastore
        self.paths = ClusterPaths(cluster)
        self.max_attempts = max_attempts

    # ---- generic record access ----------------------------------------------------------------------------

    def find(self, cls: type[R], path: str) -> Versioned[R] | None:
        node = self.metastore.exists(path)
        if node is None:
            return None
        return Versioned(cls.decode(node.data), node.version)

    def read(self, cls: type[R], path: str) -> Versioned[R]:
        found = self.find(cls, path)
        if found is None:
            raise RecordNotFoundError(f"no {cls.KIND} at {path}")
        return found

    def create(self, path: str, record: R) -> Versioned[R]:
        try:
            node = self.metastore.create(path, record.encode())
        except NodeExistsError:
            raise RecordExistsError(f"{record.KIND} already exists at {path}") from None
        return Versioned(record, node.version)

    def create_if_absent(self, path: str, record: R) -> tuple[Versioned[R], bool]:
        """Create ``record`` unless the node exists; returns what is stored now and whether this call created it."""
        try:
            return self.create(path, record), True
        except RecordExistsError:
            return self.read(type(record), path), False

    def put(self, path: str, record: R) -> Versioned[R]:
        """Write regardless of version, creating if needed: only for nodes with a single writer (a server's current
        state, the leader's external view, an instance's own registration)."""
        data = record.encode()
        for _ in range(self.max_attempts):
            try:
                return Versioned(record, self.metastore.set(path, data, ANY_VERSION).version)
            except NoNodeError:
                try:
                    return Versioned(record, self.metastore.create(path, data).version)
                except NodeExistsError:
                    continue
        raise CommitConflictError(f"could not write {record.KIND} at {path}: created and deleted concurrently")

    def update(
        self, cls: type[R], path: str, fn: Callable[[R], R], *, initial: R | None = None
    ) -> Versioned[R]:
        """Apply ``fn`` to the stored record by compare-and-set, retrying on conflicts.

        ``fn`` must be pure: it may run several times, once per attempt. If the node is missing, ``fn`` is applied
        to ``initial`` and the result created; without ``initial`` a missing node raises RecordNotFoundError.
        Returns the record now stored and its version. Raises CommitConflictError after ``max_attempts`` lost races.
        """
        for _ in range(self.max_attempts):
            current = self.find(cls, path)
            if current is None:
                if initial is None:
                    raise RecordNotFoundError(f"no {cls.KIND} at {path} to update")
                try:
                    return self.create(path, fn(initial))
                except RecordExistsError:
                    continue
            updated = fn(current.record)
            if updated == current.record:
                return current
            try:
                node = self.metastore.set(path, updated.encode(), current.version)
            except (VersionConflictError, NoNodeError):
                continue
            return Versioned(updated, node.version)
        raise CommitConflictError(
            f"gave up updating {cls.KIND} at {path}: other writers changed it on each of {self.max_attempts} attempts"
        )

    def delete(self, path: str, expected_version: int = ANY_VERSION) -> bool:
        """Delete the node (and its children); False if it was already gone."""
        try:
            self.metastore.delete(path, expected_version, recursive=True)
        except NoNodeError:
            return False
        return True

    def children(self, path: str) -> list[str]:
        """Child names, sorted; empty when the parent does not exist yet."""
        try:
            return self.metastore.children(path)
        except NoNodeError:
            return []

    # ---- instances -----------------------------------------------------------------------------------------

    def register_instance(self, info: InstanceInfo) -> Versioned[InstanceInfo]:
        """An instance's own registration (at start, on a new session): where to reach it, and its configured tags
        unless an operator set them over REST since (``tags_managed``), which then stay."""

        def merge(existing: InstanceInfo) -> InstanceInfo:
            if existing.tags_managed:
                return dataclasses.replace(info, tags=existing.tags, tags_managed=True)
            return info

        return self.update(InstanceInfo, self.paths.instance(info.instance_id), merge, initial=info)

    def instance(self, instance_id: str) -> InstanceInfo:
        return self.read(InstanceInfo, self.paths.instance(instance_id)).record

    def instances(self) -> list[InstanceInfo]:
        found = (self.find(InstanceInfo, self.paths.instance(i)) for i in self.children(self.paths.instances))
        return [v.record for v in found if v is not None]

    def live_instance_ids(self) -> list[str]:
        return self.children(self.paths.live_instances)

    # ---- segment metadata ----------------------------------------------------------------------------------

    def segment(self, table: str, segment: str) -> Versioned[SegmentRecord]:
        return self.read(SegmentRecord, self.paths.segment(table, segment))

    def find_segment(self, table: str, segment: str) -> Versioned[SegmentRecord] | None:
        return self.find(SegmentRecord, self.paths.segment(table, segment))

    def segment_names(self, table: str) -> list[str]:
        return self.children(self.paths.segments(table))

    def create_segment(self, table: str, record: SegmentRecord) -> tuple[Versioned[SegmentRecord], bool]:
        """Create-if-absent: commit step 2 re-run finds the record it made the first time."""
        return self.create_if_absent(self.paths.segment(table, record.segment_name), record)

    def update_segment(
        self, table: str, segment: str, fn: Callable[[SegmentRecord], SegmentRecord]
    ) -> Versioned[SegmentRecord]:
        return self.update(SegmentRecord, self.paths.segment(table, segment), fn)

    # ---- ideal state, current states, external view --------------------------------------------------------

    def ideal_state(self, table: str) -> Versioned[IdealState] | None:
        return self.find(IdealState, self.paths.ideal_state(table))

    def update_ideal_state(self, table: str, fn: Callable[[IdealState], IdealState]) -> Versioned[IdealState]:
        """CAS-update the table's ideal state, starting from an empty one if it does not exist yet."""
        return self.update(IdealState, self.paths.ideal_state(table), fn, initial=IdealState(table))

    def current_state(self, instance_id: str, table: str) -> CurrentState | None:
        found = self.find(CurrentState, self.paths.current_state(instance_id, table))
        return found.record if found else None

    def put_current_state(self, state: CurrentState) -> Versioned[CurrentState]:
        return self.put(self.paths.current_state(state.instance_id, state.table), state)

    def current_states(self, table: str, instance_ids: list[str]) -> list[CurrentState]:
        """The table's current states written by the given instances (those that wrote none are skipped)."""
        states = (self.current_state(i, table) for i in instance_ids)
        return [s for s in states if s is not None]

    def external_view(self, table: str) -> ExternalView | None:
        found = self.find(ExternalView, self.paths.external_view(table))
        return found.record if found else None

    def put_external_view(self, view: ExternalView) -> Versioned[ExternalView]:
        return self.put(self.paths.external_view(view.table), view)

    # ---- batch data: lineage, time boundary override, pending deletions ----------------------------------

    def lineage(self, table: str) -> SegmentLineage | None:
        from cuvee.lineage.model import SegmentLineage

        found = self.find(SegmentLineage, self.paths.lineage(table))
        return found.record if found else None

    def update_lineage(self, table: str, fn: Callable[[SegmentLineage], SegmentLineage]) -> Versioned[SegmentLineage]:
        from cuvee.lineage.model import SegmentLineage

        return self.update(SegmentLineage, self.paths.lineage(table), fn, initial=SegmentLineage(table))

    def time_boundary_override(self, raw_table: str) -> int | None:
        found = self.find(TimeBoundaryOverride, self.paths.time_boundary(raw_table))
        return found.record.value if found else None

    def pending_deletions(self) -> list[tuple[str, PendingDeletion]]:
        """(node path, record) of every archive waiting for its grace period to end."""
        paths = [f"{self.paths.pending_deletions}/{name}" for name in self.children(self.paths.pending_deletions)]
        found = ((path, self.find(PendingDeletion, path)) for path in paths)
        return [(path, v.record) for path, v in found if v is not None]
