"""The I/O shell of the segment completion protocol: one CompletionManager behind one lock.

Per request: read the segment's metadata and ideal state when the manager needs them, feed the request, execute
the actions (MarkReplicaOffline -> CAS the ideal state; CommitStarted -> a pauseless table's commit start, before
answering commitStart; CommitSegmentMetadata -> the three commit steps; both run OUTSIDE the lock so other
replicas' messages are answered meanwhile), and for an accepted commitEnd hold the
reply until the commit finished, then answer what the manager says (COMMIT_SUCCESS or FAILED). The manager always
hears CommitFinished, whatever the commit raised, so no FSM is left COMMITTING.

A commit that failed after its step 1 landed (a metadata-store error, a fault) leaves the segment DONE but not
ONLINE. The next request about it creates a fresh FSM that answers KEEP/DISCARD from the DONE metadata; the
service then runs steps 2 and 3 itself (``SegmentCommitter.finish``, idempotent, one at a time per segment), so
the replicas' retries complete the commit.

Who calls is checked before anything is read or changed: the caller must be live (registered in the metadata
store) and listed by the ideal state for the segment (in any state), and a commitEnd's location must be empty
(deep-store bypass) or the deep-store location of that segment's archive, present there (``location_ok``).
A caller that takes no part is answered FAILED, changes nothing, and is counted (``refused``) and logged
(rate-limited); a commitEnd with another location commits without one (``relocated``: peers serve the segment
and repair uploads it where it belongs). A replica the ideal state lists but the segment's FSM (made before it was
placed) does not know makes the FSM start afresh.

The replicas' stop reasons (a forced commit teaches the size learner nothing) are kept per segment only while the
segment has an FSM: they are dropped with it (committed, aborted, leadership lost).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from cuvee.cluster.errors import ClusterStateError
from cuvee.cluster.records import IdealState, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller.commit import SegmentCommitter, realtime_name
from cuvee.controller.completion_manager import CompletionManager, SegmentInfo
from cuvee.controller.completion_types import (
    CommitFinished,
    CommitSegmentMetadata,
    CommitStarted,
    CompletionConfig,
    LeadershipGained,
    LeadershipLost,
    MarkReplicaOffline,
)
from cuvee.errors import CuveeError
from cuvee.metrics.controller import ControllerMetrics
from cuvee.story import StoryWriter
from cuvee.protocol.completion import Request, Response, SegmentCommitEnd, SegmentConsumed, StopReason, failed
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
        location_ok: Callable[[LLCSegmentName, str], bool] | None = None,
        metrics: ControllerMetrics | None = None,
        story: StoryWriter | None = None,
    ):
        """``location_ok(segment, location)``: whether a commitEnd's non-empty location is where that segment's
        archive belongs and is present (None: any location; a controller without a deep store cannot tell)."""
        self.store = store
        self._location_ok = location_ok
        self.metrics = metrics
        self.story = story
        self._told: dict[tuple[LLCSegmentName, str], tuple[Any, ...]] = {}  # last event per (segment, replica)
        self.refused = 0  # requests from callers that take no part in the segment (see the module docstring)
        self.relocated = 0  # commitEnds whose location was not the segment's archive (committed without one)
        self.committer = committer
        self.clock_ms = clock_ms
        self.manager = CompletionManager(config, leader=False)
        self._lock = threading.Lock()
        self._reasons: dict[LLCSegmentName, dict[str, StopReason]] = {}  # segment -> instance -> reason
        self._finishing: set[LLCSegmentName] = set()  # segments whose steps 2-3 this service is completing
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
            response = self._handle(request)
        except (ClusterStateError, MetadataStoreError) as exc:
            self.errors += 1
            log.warning("completion request %s for %s failed: %s", request.kind.value, request.segment, exc)
            response = failed()
        if self.metrics is not None:
            self.metrics.completion_responses.labels(request.kind.value, response.status.value).inc()
        return response

    def _handle(self, request: Request) -> Response:
        segment = request.segment
        why = self._refusal(request)  # on a follower too: it may become the leader before the lock below
        if why is not None:
            self.refused += 1
            if self.metrics is not None:
                self.metrics.completion_refused.inc()
            if self.refused <= 10 or self.refused % 1000 == 0:  # bounded logging under a flood
                log.warning("completion request %s for %s from %r refused (%d so far): %s", request.kind.value,
                            segment, request.instance[:128], self.refused, why)
            return failed()
        request = self._checked_location(request)
        response = self._answer(request)
        self._tell(request, response)
        return response

    def _tell(self, request: Request, response: Response) -> None:
        """The request and its answer into the segment's story, unless it repeats the last one (replicas ask
        again every hold period)."""
        if self.story is None:
            return
        key = (request.kind, request.offset, response.status, response.offset)
        told = (request.segment, request.instance)
        with self._lock:
            if self._told.get(told) == key:
                return
            self._told[told] = key
            while len(self._told) > 10_000:  # bounded: the oldest segments first
                del self._told[next(iter(self._told))]
        self.story.record(realtime_name(request.segment.table), request.segment.name, request.kind.value,
                          replica=request.instance, offset=request.offset, rows=getattr(request, "rows", None),
                          reason=_text(getattr(request, "reason", None)), answer=response.status.value,
                          answerOffset=response.offset)

    def _answer(self, request: Request) -> Response:
        segment = request.segment
        unfinished = False
        with self._lock:
            info = None
            if self.manager.renew_for(segment, request.instance):
                log.info("%s: %s is a replica the segment's election did not know; electing afresh", segment,
                         request.instance)
            if self.manager.needs_info(segment):
                info, unfinished = self._segment_info(segment)
            response, actions = self.manager.handle(request, self.clock_ms(), info)
            if isinstance(request, SegmentConsumed) and self.manager.fsm(segment) is not None:
                self._reasons.setdefault(segment, {})[request.instance] = request.reason
            starts = [a for a in actions if isinstance(a, CommitStarted)]
            commits = [a for a in actions if isinstance(a, CommitSegmentMetadata)]
            forced = [self._reasons.get(c.segment, {}).get(c.instance) is StopReason.FORCE_COMMIT for c in commits]
            self._prune(segment)
            for action in actions:
                if isinstance(action, MarkReplicaOffline):
                    self._mark_offline(action)
            unfinished = unfinished and segment not in self._finishing
            if unfinished:
                self._finishing.add(segment)
        if unfinished:
            self._finish(segment)
        for start in starts:
            self.committer.start_next(start)  # never raises: what fails here, commitEnd does
        for commit, force in zip(commits, forced):
            success = False
            try:
                success = self.committer.commit(commit, forced=force)
            finally:  # whatever happened, the FSM must hear it, or it would answer HOLD forever
                with self._lock:
                    answer, _ = self.manager.handle(CommitFinished(commit, success), self.clock_ms())
                    self._prune(commit.segment)
            if response is None:
                response = answer
        return response if response is not None else failed()

    def _refusal(self, request: Request) -> str | None:
        """Why ``request``'s caller takes no part in its segment, or None (see the module docstring)."""
        if request.instance not in self.store.live_instance_ids():
            return "the instance is not live"
        ideal = self.store.ideal_state(realtime_name(request.segment.table))
        if ideal is None or request.instance not in ideal.record.segments.get(request.segment.name, {}):
            return "the ideal state does not list the instance for the segment"
        return None

    def _checked_location(self, request: Request) -> Request:
        """A commitEnd naming a location that is not the segment's archive in the deep store commits with none:
        peers serve the segment and repair uploads it to where it belongs (a deep store the committer reaches by
        another path than the controller's must not stall commits; a made-up location must not be recorded)."""
        if not isinstance(request, SegmentCommitEnd) or not request.location or self._location_ok is None \
                or self._location_ok(request.segment, request.location):
            return request
        self.relocated += 1
        log.warning("%s: commitEnd from %s names %r, not the segment's archive in the deep store; committing it "
                    "without a download URI (peers serve it; repair uploads it)", request.segment,
                    request.instance[:128], request.location[:256])
        return dataclasses.replace(request, location="")

    def _prune(self, segment: LLCSegmentName) -> None:
        """Forget the stop reasons of a segment that has no FSM (any more). Call with the lock held."""
        if self.manager.fsm(segment) is None:
            self._reasons.pop(segment, None)

    def _finish(self, segment: LLCSegmentName) -> None:
        """Steps 2 and 3 of a segment whose step 1 landed but whose commit did not complete."""
        try:
            outcome = self.committer.finish(realtime_name(segment.table), segment.name)
            log.info("completed the interrupted commit of %s; next %s", segment, outcome.next_segment or "(paused)")
        except CuveeError as exc:  # a metadata-store error too: left for the next request (or repair)
            self.errors += 1
            log.warning("could not complete the interrupted commit of %s: %s", segment, exc)
        finally:
            with self._lock:
                self._finishing.discard(segment)

    def _segment_info(self, segment: LLCSegmentName) -> tuple[SegmentInfo | None, bool]:
        """What the manager needs to create the segment's FSM, and whether its commit stopped after step 1 (the
        metadata says DONE while the ideal state still has no replica ONLINE)."""
        table = realtime_name(segment.table)
        found = self.store.find_segment(table, segment.name)
        if found is None:
            return None, False
        ideal = self.store.ideal_state(table)
        replicas = ideal.record.segments.get(segment.name, {}) if ideal is not None else {}
        consuming = frozenset(i for i, s in replicas.items() if s is SegmentState.CONSUMING)
        record = found.record
        committed = record.end_offset if record.status is SegmentStatus.DONE else None
        pinned = record.end_offset if record.status is SegmentStatus.COMMITTING else None
        unfinished = committed is not None and bool(replicas) and SegmentState.ONLINE not in replicas.values()
        return SegmentInfo(consuming, committed, pinned, frozenset(replicas)), unfinished

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


def _text(value: Any) -> Any:
    """An enum's value (a stop reason), else the value itself."""
    return getattr(value, "value", value)
