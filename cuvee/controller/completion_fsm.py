"""The lead controller's FSM for one completing segment: it decides which replica commits, and when.

Pure logic after Pinot's BlockingSegmentCompletionFSM: no I/O, no timer ("it is clocked by the servers", which
re-send segmentConsumed every hold period), time comes in as ``now`` (epoch ms). ``handle(event, now)`` returns
``(response, actions)``; the response goes back to the server that called, the actions to the controller's shell.

Outline: replicas report offsets (HOLD) until all replicas have reported or the pick window has passed (or the
first report stopped at the row limit); the replica with the largest offset becomes committer (COMMIT), the others
CATCH_UP to its offset and HOLD. The committer builds under a lease (extendBuildTime extends it up to a maximum),
calls commitStart (COMMIT_CONTINUE), uploads, calls commitEnd; the FSM then returns a CommitSegmentMetadata
action and answers once the shell reports the outcome (COMMIT_SUCCESS or FAILED). Afterwards replicas at the
committed offset get KEEP, others DISCARD. Anything inconsistent, or a lease running out, aborts the FSM (the
caller gets HOLD or FAILED); the manager then drops it and the next message starts a fresh election.

Deliberate differences from Pinot (each closes a hole found while testing the safety invariant):
- commitStart from a replica that is not the committer gets HOLD (Pinot let it through to COMMIT_CONTINUE);
- a committer re-reporting a different offset gets HOLD and aborts (Pinot: DISCARD, though nothing was committed);
- retried commitStart/commitEnd from the committer are idempotent instead of aborting;
- nothing aborts while COMMITTING: the shell's metadata writes are in flight;
- extendBuildTime is accepted only from the committer, also while uploading, and never shortens the lease;
- a replica that stopped consuming is never picked as committer, and if the committer stops, the FSM aborts;
- only the segment's replicas take part (the manager answers anyone else FAILED, changing nothing), and a
  commitEnd whose row count is not the one the committer reported with its offset aborts the election;
- an FSM whose first lease already ran out aborts instead of picking a committer (it could only grant a dead lease);
- a replica stopping after the commit is not marked OFFLINE (it would lose a replica of the committed segment).

Pauseless tables: an accepted commitStart also returns a CommitStarted action (the shell fixes the end offset in
the metadata, COMMITTING, and starts the next segment from it). From then on the end offset cannot change: an
FSM created for a COMMITTING segment (``pinned_offset``: after a failover, or when the first FSM aborted) picks
as committer only a replica at exactly that offset, tells replicas behind it to CATCH_UP to it, and holds
replicas past it (they get DISCARD once it is committed).

Replicas that lost messages to stream retention (segmentConsumed's ``messagesLost``) hold incomplete copies: they
reach their row limit at larger offsets than the complete replicas, so "largest offset wins" would commit the
incomplete copy and lose for good the rows the others hold. A lossy report is never decisive, never aborts an
election by being ahead, and is picked only when no complete copy has been reported and every replica has
reported or ``lossy_pick_ms`` has passed (a dead complete replica must not block the partition forever).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from cuvee.controller.completion_types import (
    DONE_STATES,
    Action,
    CommitFinished,
    CommitSegmentMetadata,
    CommitStarted,
    CompletionConfig,
    FsmState,
    MarkReplicaOffline,
    StoryEntry,
)
from cuvee.protocol.completion import (
    ExtendBuildTime,
    Request,
    Response,
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    SegmentStoppedConsuming,
    failed,
    hold,
    processed,
)
from cuvee.protocol.segment_name import LLCSegmentName

Step = tuple[Response | None, list[Action]]
S = FsmState
_STORY_LENGTH = 256


class CompletionFsm:
    """One completing segment. Create it on the first message about the segment (``committed_offset`` set if its
    metadata already says DONE, ``pinned_offset`` if it says COMMITTING), then feed it every message about that
    segment through ``handle``."""

    def __init__(
        self,
        segment: LLCSegmentName,
        replicas: Iterable[str],
        now: int,
        config: CompletionConfig | None = None,
        *,
        generation: int = 0,
        learned_commit_ms: int | None = None,
        committed_offset: int | None = None,
        pinned_offset: int | None = None,
        members: Iterable[str] | None = None,
    ) -> None:
        self.segment = segment
        self.replicas = frozenset(replicas)
        self.members = self.replicas | frozenset(members or ())  # who may take part (the manager checks)
        self.config = config or CompletionConfig()
        self.generation = generation
        self.start_ms = now
        self.pick_deadline = now + self.config.pick_winner_ms
        self.notify_deadline = now + self.config.notify_winner_ms
        initial = max(self.config.notify_winner_ms + self.config.commit_timeout_ms, learned_commit_ms or 0)
        self.initial_commit_ms = min(initial, self.config.max_commit_ms)
        self.commit_deadline = now + self.initial_commit_ms
        self.reports: dict[str, int] = {}
        self.rows: dict[str, int] = {}  # rows each replica reported with its offset (commitEnd must match)
        self.lossy: set[str] = set()  # replicas whose last report said they lost messages to retention
        self.excluded: set[str] = set()
        self.winner: str | None = None
        self.winning_offset: int | None = committed_offset
        self.pinned_offset = pinned_offset if committed_offset is None else None
        self.state = S.HOLDING if committed_offset is None else S.COMMITTED
        self.observed_commit_ms: int | None = None  # time from start to commitStart, for the manager to learn
        self._story: deque[StoryEntry] = deque(maxlen=_STORY_LENGTH)

    @property
    def done(self) -> bool:
        return self.state in DONE_STATES

    def story(self) -> tuple[StoryEntry, ...]:
        return tuple(self._story)

    def abort(self) -> None:
        """Give up (e.g. leadership lost); pending answers become FAILED/NOT_LEADER at the manager."""
        self.state = S.ABORTED

    # ---- entry point ----

    def handle(self, event: Request | CommitFinished, now: int) -> Step:
        before = self.state
        if not self._story and isinstance(event, SegmentStoppedConsuming) and before is S.HOLDING:
            self.state = S.PARTIAL_CONSUMING
        match event:
            case SegmentConsumed():
                step = self._consumed(event, now)
            case SegmentCommitStart():
                step = self._commit_start(event.instance, event.offset, now)
            case SegmentCommitEnd():
                step = self._commit_end(event, now)
            case ExtendBuildTime():
                step = self._extend(event, now)
            case SegmentStoppedConsuming():
                step = self._stopped(event)
            case CommitFinished():
                step = self._commit_finished(event)
            case _:
                raise TypeError(f"not a completion event: {event!r}")
        response, actions = step
        instance = None if isinstance(event, CommitFinished) else event.instance
        offset = event.action.end_offset if isinstance(event, CommitFinished) else event.offset
        self._story.append(
            StoryEntry(
                now,
                type(event).__name__,
                instance,
                offset,
                before,
                self.state,
                response.status if response else None,
                tuple(type(a).__name__ for a in actions),
            )
        )
        return step

    # ---- responses ----

    def _commit(self, now: int) -> Step:
        assert self.winning_offset is not None
        remaining_ms = max(self.commit_deadline - now, 1000)
        return Response(ResponseStatus.COMMIT, self.winning_offset, build_time_seconds=-(-remaining_ms // 1000)), []

    def _relative(self, offset: int) -> Step:
        """Answer a non-committer while the commit is undecided: catch up if behind, else wait."""
        assert self.winning_offset is not None
        if offset < self.winning_offset:
            return Response(ResponseStatus.CATCH_UP, self.winning_offset), []
        return hold(offset), []

    def _keep_or_discard(self, offset: int, instance: str | None = None) -> Step:
        """After the commit: a replica at the committed offset keeps its copy, unless that copy is incomplete
        (it lost messages to retention: its build would not match the committed CRC); others download."""
        if offset == self.winning_offset and (instance is None or instance not in self.lossy):
            return Response(ResponseStatus.KEEP, offset), []
        return Response(ResponseStatus.DISCARD), []

    def _abort_hold(self, offset: int) -> Step:
        self.state = S.ABORTED
        return hold(offset), []

    def _abort_failed(self) -> Step:
        self.state = S.ABORTED
        return failed(), []

    def _too_late(self, now: int) -> bool:
        return now > self.commit_deadline

    # ---- segmentConsumed ----

    def _consumed(self, req: SegmentConsumed, now: int) -> Step:
        inst, offset = req.instance, req.offset
        self.excluded.discard(inst)  # a replica that stopped may have restarted and caught up: accept it again
        self.reports[inst] = offset
        self.rows[inst] = req.rows
        (self.lossy.add if req.lossy else self.lossy.discard)(inst)
        match self.state:
            case S.PARTIAL_CONSUMING | S.HOLDING:
                self.state = S.HOLDING
                return self._holding_consumed(req, now)
            case S.COMMITTER_DECIDED:
                return self._decided_consumed(inst, offset, now)
            case S.COMMITTER_NOTIFIED:
                if self._too_late(now):
                    return self._abort_hold(offset)
                if inst == self.winner:
                    # The committer did not get our COMMIT (or lost it): same offset, tell it again.
                    return self._commit(now) if offset == self.winning_offset else self._abort_hold(offset)
                return self._relative(offset)
            case S.COMMITTER_UPLOADING:
                if self._too_late(now):
                    return self._abort_hold(offset)
                if inst == self.winner:
                    return self._abort_hold(offset)  # it should be uploading, not consuming: start over
                return self._relative(offset)
            case S.COMMITTING:
                return self._relative(offset)
            case S.COMMITTED:
                return self._keep_or_discard(offset, inst)
            case S.ABORTED:
                return hold(offset), []

    def _holding_consumed(self, req: SegmentConsumed, now: int) -> Step:
        if self._too_late(now):
            return self._abort_hold(req.offset)  # a stale FSM could only grant a lease that already ran out
        if self.pinned_offset is not None:
            return self._pinned_consumed(req, now)
        if not self._pick_winner(req, now):
            return hold(req.offset), []
        if self.winner == req.instance:
            self.state = S.COMMITTER_NOTIFIED
            return self._commit(now)
        self.state = S.COMMITTER_DECIDED
        return self._relative(req.offset)

    def _pinned_consumed(self, req: SegmentConsumed, now: int) -> Step:
        """The end offset is fixed (the next segment starts there): the first replica at it commits."""
        pinned = self.pinned_offset
        assert pinned is not None
        if req.offset < pinned:
            return Response(ResponseStatus.CATCH_UP, pinned), []
        if req.offset > pinned:
            return hold(req.offset), []  # it can never commit; once someone did, it gets DISCARD
        complete_below = any(o <= pinned for i, o in self.reports.items()
                             if i not in self.lossy and i not in self.excluded)
        if req.lossy and not self._may_pick_lossy(now, complete_pending=complete_below):
            return hold(req.offset), []  # a complete replica is catching up to the end offset, or may report
        self.winner, self.winning_offset = req.instance, pinned
        self.state = S.COMMITTER_NOTIFIED
        return self._commit(now)

    def _pick_winner(self, req: SegmentConsumed, now: int) -> bool:
        """Pick the committer if we may: at once when the first report stopped at a limit every replica stops at;
        else once every live replica reported or the pick window passed. Prefer the caller among equals."""
        if req.reason.decisive and len(self.reports) == 1 and not req.lossy:
            self.winner, self.winning_offset = req.instance, req.offset
            return True
        expected = self.replicas - self.excluded
        if now <= self.pick_deadline and not expected <= self.reports.keys():
            return False
        candidates = {i: o for i, o in self.reports.items() if i not in self.excluded}
        complete = {i: o for i, o in candidates.items() if i not in self.lossy}
        if complete:
            candidates = complete
        elif not self._may_pick_lossy(now):
            return False
        best = max(candidates.values())
        self.winning_offset = best
        leaders = sorted(i for i, o in candidates.items() if o == best)
        self.winner = req.instance if req.instance in leaders else leaders[0]
        return True

    def _may_pick_lossy(self, now: int, *, complete_pending: bool = False) -> bool:
        """An incomplete copy may commit once the replicas had ``lossy_pick_ms``, or earlier when every expected
        replica has reported and no complete one is still on its way (``complete_pending``)."""
        if now > self.start_ms + self.config.lossy_pick_ms:
            return True
        return not complete_pending and self.replicas - self.excluded <= self.reports.keys()

    def _decided_consumed(self, inst: str, offset: int, now: int) -> Step:
        assert self.winning_offset is not None
        if now > self.notify_deadline:
            return self._abort_hold(offset)  # the committer never came back: elect again
        if offset > self.winning_offset and inst not in self.lossy:
            return self._abort_hold(offset)  # a complete replica is ahead of the chosen offset: elect again
        if inst == self.winner:
            if offset == self.winning_offset:
                self.state = S.COMMITTER_NOTIFIED
                return self._commit(now)
            return self._abort_hold(offset)
        return self._relative(offset)

    # ---- segmentCommitStart ----

    def _commit_start(self, inst: str, offset: int, now: int) -> Step:
        if inst in self.excluded:
            return failed(), []
        match self.state:
            case S.PARTIAL_CONSUMING | S.HOLDING | S.COMMITTER_DECIDED:
                # Possible after a controller failover; the server will send segmentConsumed again.
                return self._abort_hold(offset) if self._too_late(now) else (hold(offset), [])
            case S.COMMITTER_NOTIFIED:
                if self._too_late(now):
                    return self._abort_hold(offset)
                if inst != self.winner:
                    return hold(offset), []
                if offset != self.winning_offset:
                    return self._abort_hold(offset)
                self.state = S.COMMITTER_UPLOADING
                self.observed_commit_ms = now - self.start_ms
                return Response(ResponseStatus.COMMIT_CONTINUE, offset), [CommitStarted(self.segment, inst, offset)]
            case S.COMMITTER_UPLOADING:
                if self._too_late(now):
                    return self._abort_hold(offset)
                if inst == self.winner and offset == self.winning_offset:
                    return Response(ResponseStatus.COMMIT_CONTINUE, offset), []  # a retry: same answer
                return hold(offset), []
            case S.COMMITTING:
                return hold(offset), []
            case S.COMMITTED:
                return self._keep_or_discard(offset)
            case S.ABORTED:
                return hold(offset), []

    # ---- segmentCommitEnd ----

    def _commit_end(self, req: SegmentCommitEnd, now: int) -> Step:
        inst, offset = req.instance, req.offset
        is_winner = inst == self.winner and offset == self.winning_offset
        match self.state:
            case S.COMMITTING:
                return (hold(offset), []) if is_winner else (failed(), [])
            case S.COMMITTED:
                return (Response(ResponseStatus.COMMIT_SUCCESS, offset), []) if is_winner else (failed(), [])
            case S.ABORTED:
                return failed(), []
        if inst in self.excluded:
            return self._abort_failed() if inst == self.winner else (failed(), [])
        if self.state is not S.COMMITTER_UPLOADING or not is_winner:
            # Out of step: a committer that skipped a step starts over; anyone else just fails.
            return self._abort_failed() if inst == self.winner else (failed(), [])
        if req.total_docs != self.rows.get(inst):
            return self._abort_failed()  # not the rows it reported at this offset: elect again
        self.state = S.COMMITTING
        action = CommitSegmentMetadata(
            segment=self.segment,
            next_segment=self.segment.next(now),
            instance=inst,
            end_offset=offset,
            location=req.location,
            crc=req.crc,
            total_docs=req.total_docs,
            size_bytes=req.size_bytes,
            build_time_ms=req.build_time_ms,
            time_min=req.time_min,
            time_max=req.time_max,
            generation=self.generation,
            partitions=req.partitions,
        )
        return None, [action]

    def _commit_finished(self, event: CommitFinished) -> Step:
        if self.state is not S.COMMITTING or event.action.generation != self.generation:
            return failed(), []
        if not event.success:
            return self._abort_failed()
        self.state = S.COMMITTED
        return Response(ResponseStatus.COMMIT_SUCCESS, self.winning_offset), []

    # ---- extendBuildTime ----

    def _extend(self, req: ExtendBuildTime, now: int) -> Step:
        if self.state not in (S.COMMITTER_NOTIFIED, S.COMMITTER_UPLOADING):
            return failed(), []
        if self._too_late(now):
            return self._abort_hold(req.offset)
        if req.instance != self.winner or req.offset != self.winning_offset:
            return failed(), []
        wanted = now + req.extra_seconds * 1000
        if wanted > self.start_ms + self.config.max_commit_ms:
            return self._abort_failed()  # over the maximum: let another replica try
        self.commit_deadline = max(self.commit_deadline, wanted)
        return processed(), []

    # ---- segmentStoppedConsuming ----

    def _stopped(self, req: SegmentStoppedConsuming) -> Step:
        self.excluded.add(req.instance)
        offline: list[Action] = [MarkReplicaOffline(self.segment, req.instance, req.reason)]
        match self.state:
            case S.ABORTED | S.COMMITTED:
                return processed(), []
            case S.COMMITTER_DECIDED | S.COMMITTER_NOTIFIED | S.COMMITTER_UPLOADING if req.instance == self.winner:
                self.state = S.ABORTED  # the committer gave up: the next FSM elects another
                return processed(), offline
            case _:
                return processed(), offline
