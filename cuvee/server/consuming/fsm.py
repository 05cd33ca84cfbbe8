"""A replica's side of the segment completion protocol, as a pure state machine (after dask's WorkerState).

``ConsumerFsm.handle(event, now) -> list[Action]``: events are what the consume loop, the builder, the uploader
and the controller (its responses) report; actions are what the I/O shell (``segment.py``) must do next. No I/O,
no threads, time comes in as ``now`` (seconds), so every ladder of the seed is a synchronous test.

Outline (Pinot's RealtimeSegmentDataManager states): CONSUMING until an end criterion, then HOLDING: send
segmentConsumed and obey the answer. HOLD/FAILED wait and ask again; CATCH_UP consumes to exactly the offset;
COMMIT builds (BUILDING), then segmentCommitStart, the upload (UPLOADING; a failed upload commits anyway with an
empty location: deep-store bypass) and segmentCommitEnd (COMMITTING) until COMMIT_SUCCESS (COMMITTED); KEEP builds
a local copy (RETAINING, then RETAINED); DISCARD stops (DISCARDED: the shell downloads on go_online); NOT_LEADER
re-resolves the leader and asks again. While building or uploading, ``Tick`` events let the committer extend its
lease with extendBuildTime. A segment this replica built stays known (``built``), so if it is made committer
again for the same offset it commits that copy instead of building again.

Pauseless tables (``commit_start_first``): COMMIT is answered with segmentCommitStart at once, and the build
follows COMMIT_CONTINUE. The controller places the partition's next segment when it accepts commitStart, so
sending it before building is what lets the partition be consumed during the build, not only during the upload.
"""

from __future__ import annotations

from collections import deque

from cuvee.protocol.completion import (
    ExtendBuildTime,
    RequestKind,
    Response,
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    SegmentStoppedConsuming,
    StopReason,
)
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.server.consuming.fsm_types import (
    Action,
    Build,
    BuildFailed,
    BuildPurpose,
    BuildSucceeded,
    BuiltSegment,
    CatchUp,
    CaughtUp,
    ConsumeFailed,
    ConsumerState,
    EndReached,
    Event,
    Finish,
    RequestFailed,
    ResolveLeader,
    Responded,
    RetryDue,
    Send,
    Stop,
    StoryEntry,
    Tick,
    Upload,
    UploadFailed,
    UploadSucceeded,
    Wait,
)

_STORY_LENGTH = 200

__all__ = ["ConsumerFsm", "Action", "Build", "BuildFailed", "BuildPurpose", "BuildSucceeded", "BuiltSegment", "CatchUp", "CaughtUp", "ConsumeFailed", "ConsumerState", "EndReached", "Event", "Finish", "RequestFailed", "ResolveLeader", "Responded", "RetryDue", "Send", "Stop", "StoryEntry", "Tick", "Upload", "UploadFailed", "UploadSucceeded", "Wait"]


class ConsumerFsm:
    """One consuming segment's protocol state on one replica. See the module docstring."""

    def __init__(self, segment: LLCSegmentName, instance: str, config: ConsumerConfig, *,
                 commit_start_first: bool = False):
        self.segment = segment
        self.instance = instance
        self.config = config
        self.commit_start_first = commit_start_first
        self.commit_started = False  # COMMIT_CONTINUE received for the current offset (build, then upload)
        self.state = ConsumerState.CONSUMING
        self.offset: int | None = None  # where consumption stopped (the end offset if we commit now)
        self.rows = 0
        self.messages_lost = 0  # reported with segmentConsumed: the controller prefers complete copies
        self.reason = StopReason.ROW_LIMIT
        self.built: BuiltSegment | None = None
        self.catch_up_target: int | None = None
        self.location: str | None = None
        self.lease_deadline: float | None = None
        self.lease_lost = False  # extendBuildTime was refused: stop asking
        self.extend_in_flight = False
        self.upload_error: str | None = None
        self.error: str | None = None
        self._story: deque[StoryEntry] = deque(maxlen=_STORY_LENGTH)

    def story(self) -> list[StoryEntry]:
        return list(self._story)

    # ---- the one entry point ----

    def handle(self, event: Event, now: float) -> list[Action]:
        actions = self._dispatch(event, now)
        self._story.append(StoryEntry(now, repr(event), self.state, tuple(repr(a) for a in actions)))
        return actions

    def _dispatch(self, event: Event, now: float) -> list[Action]:
        if isinstance(event, Stop):
            self.state = ConsumerState.STOPPED
            return [Finish(self.state)]
        if self.state.terminal:
            return []  # late reports (a response after Stop) change nothing
        match event:
            case Responded(kind=RequestKind.EXTEND_BUILD_TIME, response=response):
                return self._extended(response, now)
            case RequestFailed(kind=RequestKind.EXTEND_BUILD_TIME):
                self.extend_in_flight = False  # the next Tick tries again
                return []
            case Tick():
                return self._tick(now)
            case ConsumeFailed() if self.state in (ConsumerState.CONSUMING, ConsumerState.CATCHING_UP):
                self.offset, self.rows = event.offset, event.rows
                return self._give_up(event.reason)
        match self.state:
            case ConsumerState.CONSUMING:
                return self._consuming(event)
            case ConsumerState.HOLDING:
                return self._holding(event, now)
            case ConsumerState.CATCHING_UP:
                return self._catching_up(event)
            case ConsumerState.BUILDING | ConsumerState.RETAINING:
                return self._building(event)
            case ConsumerState.UPLOADING:
                return self._uploading(event)
            case ConsumerState.COMMITTING:
                return self._committing(event, now)
        return []

    # ---- per state ----

    def _consuming(self, event: Event) -> list[Action]:
        if isinstance(event, EndReached):
            self.offset, self.rows, self.reason = event.offset, event.rows, event.reason
            self.messages_lost = event.messages_lost
            return self._ask()
        return []

    def _holding(self, event: Event, now: float) -> list[Action]:
        match event:
            case RetryDue():
                return [self._consumed_request()]
            case RequestFailed():
                return [self._hold_wait()]
            case Responded(kind=RequestKind.SEGMENT_CONSUMED, response=response):
                return self._answer_to_consumed(response, now)
            case Responded(kind=RequestKind.SEGMENT_STOPPED_CONSUMING):
                return []
        return []

    def _answer_to_consumed(self, response: Response, now: float) -> list[Action]:
        assert self.offset is not None
        status, target = response.status, response.offset
        match status:
            case ResponseStatus.CATCH_UP if target is not None and target > self.offset:
                self.state, self.catch_up_target = ConsumerState.CATCHING_UP, target
                return [CatchUp(target)]
            case ResponseStatus.COMMIT if target in (None, self.offset):
                lease = response.build_time_seconds or self.config.default_lease_seconds
                self.lease_deadline, self.lease_lost, self.extend_in_flight = now + lease, False, False
                if self.commit_start_first or (self.built is not None and self.built.end_offset == self.offset):
                    return self._commit_start()  # pauseless, or reusing the copy built for this very offset
                self.state = ConsumerState.BUILDING
                return [Build(self.offset, BuildPurpose.COMMIT)]
            case ResponseStatus.KEEP | ResponseStatus.DISCARD:
                return self._keep_or_discard(response)
            case ResponseStatus.NOT_LEADER:
                return self._not_leader(response)
        # HOLD, FAILED, a CATCH_UP to where we already are (or behind), a COMMIT for another offset, or an answer
        # that makes no sense here: ask again later; the controller re-decides.
        return [self._hold_wait()]

    def _catching_up(self, event: Event) -> list[Action]:
        if isinstance(event, CaughtUp):
            self.offset, self.rows = event.offset, event.rows
            self.messages_lost = max(self.messages_lost, event.messages_lost)
            if self.catch_up_target is not None and event.offset < self.catch_up_target:
                # Fell short (the stream lacks the data, or the segment is full): report later, not in a loop.
                self.state = ConsumerState.HOLDING
                return [self._hold_wait()]
            return self._ask()
        return []

    def _building(self, event: Event) -> list[Action]:
        match event:
            case BuildSucceeded(built=built):
                self.built = built
                if self.state is ConsumerState.RETAINING:
                    return self._finish(ConsumerState.RETAINED)
                if self.commit_started:  # pauseless: commitStart was accepted before the build
                    self.state = ConsumerState.UPLOADING
                    return [Upload()]
                return self._commit_start()
            case BuildFailed(reason=reason):
                if self.state is ConsumerState.RETAINING:
                    self.error = f"building the kept copy failed: {reason}"
                    return self._finish(ConsumerState.ERROR)  # committed already: go_online downloads
                return self._give_up(f"segment build failed: {reason}")
        return []

    def _uploading(self, event: Event) -> list[Action]:
        match event:
            case UploadSucceeded(location=location):
                self.location, self.upload_error = location, None
            case UploadFailed(reason=reason):
                self.location, self.upload_error = "", reason  # deep-store bypass: peers serve it
            case _:
                return []
        self.state = ConsumerState.COMMITTING
        return [self._commit_end_request()]

    def _committing(self, event: Event, now: float) -> list[Action]:
        ending = self.location is not None  # commitEnd sent (else commitStart)
        match event:
            case Responded(kind=RequestKind.SEGMENT_COMMIT_START, response=response) if not ending:
                return self._answer_to_commit_start(response)
            case Responded(kind=RequestKind.SEGMENT_COMMIT_END, response=response) if ending:
                return self._answer_to_commit_end(response)
            case RequestFailed() if ending:
                return [self._hold_wait()]  # commitEnd is idempotent on the controller: send it again
            case RetryDue() if ending:
                return [self._commit_end_request()]
            case RequestFailed():
                return self._back_to_holding()
        return []

    def _answer_to_commit_start(self, response: Response) -> list[Action]:
        match response.status:
            case ResponseStatus.COMMIT_CONTINUE:
                self.commit_started = True
                if self.built is None or self.built.end_offset != self.offset:
                    self.state = ConsumerState.BUILDING  # pauseless: the build comes after commitStart
                    assert self.offset is not None
                    return [Build(self.offset, BuildPurpose.COMMIT)]
                self.state = ConsumerState.UPLOADING
                return [Upload()]
            case ResponseStatus.KEEP | ResponseStatus.DISCARD:
                return self._keep_or_discard(response)
            case ResponseStatus.NOT_LEADER:
                self.state = ConsumerState.HOLDING
                return self._not_leader(response)
        return self._back_to_holding()  # HOLD / FAILED: someone else commits, or the election restarts

    def _answer_to_commit_end(self, response: Response) -> list[Action]:
        match response.status:
            case ResponseStatus.COMMIT_SUCCESS:
                return self._finish(ConsumerState.COMMITTED)
            case ResponseStatus.HOLD:
                return [self._hold_wait()]  # the controller is still writing the commit: ask again
            case ResponseStatus.NOT_LEADER:
                self.location = None
                self.state = ConsumerState.HOLDING
                return self._not_leader(response)
        return self._back_to_holding()

    # ---- lease ----

    def _tick(self, now: float) -> list[Action]:
        committer_busy = self.state in (ConsumerState.BUILDING, ConsumerState.UPLOADING) or (
            self.state is ConsumerState.COMMITTING and self.location is None)
        if not committer_busy or self.lease_lost or self.extend_in_flight or self.lease_deadline is None:
            return []
        if now < self.lease_deadline - self.config.lease_margin_seconds:
            return []
        assert self.offset is not None
        self.extend_in_flight = True
        return [Send(ExtendBuildTime(self.segment, self.instance, self.offset, self.config.extend_build_seconds))]

    def _extended(self, response: Response, now: float) -> list[Action]:
        self.extend_in_flight = False
        if response.status is ResponseStatus.PROCESSED:
            self.lease_deadline = max(self.lease_deadline or now, now + self.config.extend_build_seconds)
        else:
            self.lease_lost = True  # over the maximum or no longer committer: finish; commitStart will tell
        return []

    # ---- helpers ----

    def _ask(self) -> list[Action]:
        self.state = ConsumerState.HOLDING
        return [self._consumed_request()]

    def _consumed_request(self) -> Send:
        assert self.offset is not None
        return Send(SegmentConsumed(self.segment, self.instance, self.offset, self.rows, self.reason,
                                    self.messages_lost))

    def _commit_start(self) -> list[Action]:
        assert self.offset is not None
        self.state, self.location, self.commit_started = ConsumerState.COMMITTING, None, False
        return [Send(SegmentCommitStart(self.segment, self.instance, self.offset))]

    def _commit_end_request(self) -> Send:
        built, location = self.built, self.location
        assert built is not None and location is not None and self.offset is not None
        return Send(SegmentCommitEnd(
            self.segment, self.instance, self.offset, location=location, crc=built.crc, total_docs=built.total_docs,
            size_bytes=built.size_bytes, build_time_ms=built.build_time_ms, time_min=built.time_min,
            time_max=built.time_max, partitions=built.partitions,
        ))

    def _hold_wait(self) -> Wait:
        return Wait(self.config.hold_retry_seconds)

    def _back_to_holding(self) -> list[Action]:
        self.state, self.location, self.commit_started = ConsumerState.HOLDING, None, False
        return [self._hold_wait()]

    def _not_leader(self, response: Response) -> list[Action]:
        return [ResolveLeader(response.leader_url), Wait(self.config.not_leader_retry_seconds)]

    def _keep_or_discard(self, response: Response) -> list[Action]:
        if response.status is ResponseStatus.KEEP and response.offset in (None, self.offset):
            if self.built is not None and self.built.end_offset == self.offset:
                return self._finish(ConsumerState.RETAINED)
            assert self.offset is not None
            self.state = ConsumerState.RETAINING
            return [Build(self.offset, BuildPurpose.KEEP)]
        return self._finish(ConsumerState.DISCARDED)

    def _give_up(self, reason: str) -> list[Action]:
        self.error = reason
        self.state = ConsumerState.ERROR
        assert self.offset is not None
        return [Send(SegmentStoppedConsuming(self.segment, self.instance, self.offset, reason)), Finish(self.state)]

    def _finish(self, state: ConsumerState) -> list[Action]:
        self.state = state
        return [Finish(state)]
