"""The I/O shell of the segment completion protocol: one CompletionManager behind one lock.

Per request: read the segment's metadata and ideal state when the manager needs them, feed the request, execute
the actions (MarkReplicaOffline -> CAS the ideal state; CommitSegmentMetadata -> the three commit steps, run
OUTSIDE the lock so other replicas' messages are answered meanwhile), and for an accepted commitEnd hold the
reply until the commit finished, then answer what the manager says (COMMIT_SUCCESS or FAILED).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cuvee.cluster.errors import ClusterStateError
from cuvee.cluster.records import IdealState, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller.commit import SegmentCommitter, realtime_name
from cuvee.controller.completion_manager import CompletionManager, SegmentInfo
from cuvee.controller.completion_types import (
    CommitFinished,
    CommitSegmentMetadata,
    CompletionConfig,
    LeadershipGained,
    LeadershipLost,
    MarkReplicaOffline,
)
from cuvee.protocol.completion import Request, Response, SegmentConsumed, StopReason, failed
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.spi.metastore import MetadataStoreError

log = logging.getLogger(__name__)


class CompletionService:
    def __init__(
        self,
        store: ClusterStore,
        committer: SegmentCommitter,
        config: CompletionConfig,
        clock_ms: Callable[[], int],
    ):
        self.store = store
        self.committer = committer
        self.clock_ms = clock_ms
        self.manager = CompletionManager(config, leader=False)
        self._lock = threading.Lock()
        self._reasons: dict[tuple[LLCSegmentName, str], StopReason] = {}
        self.errors = 0  # metadata-store failures while serving the protocol (inspectable, also logged)

    # ---- leadership ----

    def leadership_gained(self) -> None:
        with self._lock:
            self.manager.handle(LeadershipGained(), self.clock_ms())

    def leadership_lost(self, leader_url: str | None) -> None:
        with self._lock:
            self.manager.handle(LeadershipLost(leader_url), self.clock_ms())
            self._reasons.clear()

    # ---- requests ----

    def handle(self, request: Request) -> Response:
        try:
            return self._handle(request)
        except (ClusterStateError, MetadataStoreError) as exc:
            self.errors += 1
            log.warning("completion request %s for %s failed: %s", request.kind.value, request.segment, exc)
            return failed()

    def _handle(self, request: Request) -> Response:
        with self._lock:
            info = self._segment_info(request.segment) if self.manager.needs_info(request.segment) else None
            response, actions = self.manager.handle(request, self.clock_ms(), info)
            if isinstance(request, SegmentConsumed):
                self._reasons[(request.segment, request.instance)] = request.reason
            commits = [a for a in actions if isinstance(a, CommitSegmentMetadata)]
            for action in actions:
                if isinstance(action, MarkReplicaOffline):
                    self._mark_offline(action)
        for commit in commits:
            forced = self._reasons.get((commit.segment, commit.instance)) is StopReason.FORCE_COMMIT
            success = self.committer.commit(commit, forced=forced)
            with self._lock:
                answer, _ = self.manager.handle(CommitFinished(commit, success), self.clock_ms())
                if success:
                    for key in [k for k in self._reasons if k[0] == commit.segment]:
                        del self._reasons[key]
            if response is None:
                response = answer
        return response if response is not None else failed()

    def _segment_info(self, segment: LLCSegmentName) -> SegmentInfo | None:
        table = realtime_name(segment.table)
        found = self.store.find_segment(table, segment.name)
        if found is None:
            return None
        ideal = self.store.ideal_state(table)
        replicas = ideal.record.segments.get(segment.name, {}) if ideal is not None else {}
        consuming = frozenset(i for i, s in replicas.items() if s is SegmentState.CONSUMING)
        record = found.record
        committed = record.end_offset if record.status is SegmentStatus.DONE else None
        return SegmentInfo(consuming, committed)

    def _mark_offline(self, action: MarkReplicaOffline) -> None:
        table = realtime_name(action.segment.table)
        name, instance = action.segment.name, action.instance

        def update(ideal: IdealState) -> IdealState:
            replicas = dict(ideal.segments.get(name, {}))
            if replicas.get(instance) is not SegmentState.CONSUMING:
                return ideal
            replicas[instance] = SegmentState.OFFLINE
            return ideal.with_segment(name, replicas)

        log.warning("%s stopped consuming %s (%s): marking it OFFLINE", instance, name, action.reason)
        self.store.update(IdealState, self.store.paths.ideal_state(table), update)  # no ideal state: table gone
