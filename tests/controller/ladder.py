"""A fake controller shell for ladder tests: a CompletionManager, a fake clock and a one-segment metadata store.

It plays the shell's part: supplies SegmentInfo from its fake metadata when the manager asks, and runs
CommitSegmentMetadata actions (step 1 as a compare-and-set) when the test says so. With ``pauseless=True`` it also
plays a pauseless table's commit start: a CommitStarted action fixes the end offset (COMMITTING) in its metadata.
"""

from __future__ import annotations

from cuvee.controller.completion_fsm import CompletionFsm
from cuvee.controller.completion_manager import CompletionManager, SegmentInfo
from cuvee.controller.completion_types import (
    Action,
    CommitFinished,
    CommitSegmentMetadata,
    CommitStarted,
    CompletionConfig,
    LeadershipGained,
    LeadershipLost,
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
    StopReason,
)
from cuvee.protocol.segment_name import LLCSegmentName

S1, S2, S3 = "S1", "S2", "S3"
O1, O2, O3 = 20, 40, 30  # Pinot's SegmentCompletionTest offsets: S2 is ahead, S3 in the middle
HOLD_MS = 3_000
START_MS = 1_700_000_000_000
SEGMENT = LLCSegmentName.create("someTable", 23, 12, START_MS)


class Ladder:
    """Drive one segment's completion through the manager, second by second."""

    def __init__(self, replicas: tuple[str, ...] = (S1, S2, S3), config: CompletionConfig | None = None,
                 *, pauseless: bool = False) -> None:
        self.now = START_MS + 5_000
        self.replicas = set(replicas)  # CONSUMING in the ideal state
        self.members = frozenset(replicas)  # listed in the ideal state in any state (an OFFLINE replica too)
        self.pauseless = pauseless
        self.committed_offset: int | None = None
        self.pinned_offset: int | None = None  # COMMITTING at this end offset (pauseless commit start)
        self.commits: list[CommitSegmentMetadata] = []  # commit actions whose step 1 landed
        self.offline: list[tuple[str, str]] = []
        self.manager = CompletionManager(config or CompletionConfig(hold_ms=HOLD_MS), leader=True)

    def tick(self, seconds: float) -> None:
        self.now += int(seconds * 1000)

    @property
    def fsm(self) -> CompletionFsm | None:
        return self.manager.fsm(SEGMENT)

    def send(self, request: Request) -> tuple[Response | None, list[Action]]:
        info = None
        if self.manager.needs_info(request.segment):
            info = SegmentInfo(frozenset(self.replicas), self.committed_offset,
                               None if self.committed_offset is not None else self.pinned_offset, self.members)
        response, actions = self.manager.handle(request, self.now, info)
        for action in actions:
            if isinstance(action, CommitStarted):
                if self.pauseless and self.committed_offset is None:
                    assert self.pinned_offset in (None, action.end_offset), "the pinned end offset moved"
                    self.pinned_offset = action.end_offset
            elif not isinstance(action, CommitSegmentMetadata):
                self.offline.append((action.instance, action.reason))
                self.replicas.discard(action.instance)
        return response, actions

    def status(self, request: Request) -> ResponseStatus:
        response, _ = self.send(request)
        assert response is not None
        return response.status

    # ---- one call per protocol message ----

    def consumed(self, instance: str, offset: int, reason: StopReason = StopReason.TIME_LIMIT) -> Response:
        response, actions = self.send(SegmentConsumed(SEGMENT, instance, offset, offset, reason))
        assert response is not None and actions == []
        return response

    def commit_start(self, instance: str, offset: int) -> Response:
        response, _ = self.send(SegmentCommitStart(SEGMENT, instance, offset))
        assert response is not None
        return response

    def commit_end(self, instance: str, offset: int) -> tuple[Response | None, list[Action]]:
        location = "file:///ds/seg"
        return self.send(SegmentCommitEnd(SEGMENT, instance, offset, location, crc=77, total_docs=offset, size_bytes=1))

    def extend(self, instance: str, offset: int, seconds: int) -> Response:
        response, _ = self.send(ExtendBuildTime(SEGMENT, instance, offset, seconds))
        assert response is not None
        return response

    def stopped(self, instance: str, offset: int, reason: str = "IAmLazy") -> tuple[Response | None, list[Action]]:
        return self.send(SegmentStoppedConsuming(SEGMENT, instance, offset, reason))

    def finish(self, action: Action, success: bool = True) -> Response:
        """Run the commit steps for ``action`` (step 1 is a CAS on the fake metadata), report the outcome."""
        assert isinstance(action, CommitSegmentMetadata)
        landed = success and self.committed_offset is None
        if landed and self.pinned_offset is not None:
            landed = action.end_offset == self.pinned_offset  # step 1 refuses another end offset
        if landed:
            self.committed_offset = action.end_offset
            self.commits.append(action)
        response, more = self.manager.handle(CommitFinished(action, landed), self.now)
        assert response is not None and more == []
        return response

    def commit(self, instance: str, offset: int) -> Response:
        """commitStart, commitEnd and a successful metadata commit, one second apart."""
        assert self.commit_start(instance, offset).status is ResponseStatus.COMMIT_CONTINUE
        self.tick(1)
        response, actions = self.commit_end(instance, offset)
        assert response is None and len(actions) == 1
        return self.finish(actions[0])

    def lose_leadership(self, leader_url: str | None = "http://other:9000") -> None:
        assert self.manager.handle(LeadershipLost(leader_url), self.now) == (None, [])

    def gain_leadership(self) -> None:
        assert self.manager.handle(LeadershipGained(), self.now) == (None, [])

    def fail_over(self) -> None:
        """A new controller takes over: a fresh manager with no FSMs; the metadata store is unchanged."""
        self.manager = CompletionManager(self.manager.config, leader=True)
