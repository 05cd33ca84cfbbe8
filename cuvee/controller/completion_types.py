"""Configuration, events and actions of the controller's segment completion FSM (see completion_fsm.py).

Actions are instructions for the controller's I/O shell; events are what the shell feeds back. Both are frozen
dataclasses so a test can compare them and a story can record them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from cuvee.protocol.completion import DEFAULT_HOLD_MS, Request, ResponseStatus
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.partitioning import SegmentPartitions


class FsmState(Enum):
    """Where one completing segment is, on the lead controller (Pinot's BlockingSegmentCompletionFSM states)."""

    PARTIAL_CONSUMING = "PARTIAL_CONSUMING"  # the first message was a replica giving up; no offset reported yet
    HOLDING = "HOLDING"  # collecting replicas' offsets
    COMMITTER_DECIDED = "COMMITTER_DECIDED"  # committer picked, not yet told
    COMMITTER_NOTIFIED = "COMMITTER_NOTIFIED"  # committer told COMMIT; it builds under a lease
    COMMITTER_UPLOADING = "COMMITTER_UPLOADING"  # commitStart accepted; waiting for commitEnd
    COMMITTING = "COMMITTING"  # commitEnd accepted; the shell is writing metadata and ideal state
    COMMITTED = "COMMITTED"  # done: late replicas get KEEP or DISCARD
    ABORTED = "ABORTED"  # given up; the manager drops it and the next message starts a fresh FSM


DONE_STATES = frozenset({FsmState.COMMITTED, FsmState.ABORTED})


@dataclass(frozen=True, slots=True)
class CompletionConfig:
    """Timing of the protocol, in ms. The FSM has no timer: these bound waits that servers' messages clock.

    ``hold_ms``: the period the FSM's waits derive from (servers re-send segmentConsumed while told HOLD at their
    own ``consumer.hold_retry_seconds``, which should be shorter). The FSM waits ``pick_winner_ms``
    (hold + 10%) from its first message for all replicas to report, then gives the picked committer another hold
    period (``notify_winner_ms``) to come back for its COMMIT. ``commit_timeout_ms``: the build lease a committer
    gets beyond that. ``max_commit_ms``: no lease, extensions included, reaches past this from the FSM's start.
    """

    hold_ms: int = DEFAULT_HOLD_MS
    commit_timeout_ms: int = 120_000
    max_commit_ms: int = 1_800_000

    def __post_init__(self) -> None:
        for name in ("hold_ms", "commit_timeout_ms", "max_commit_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"CompletionConfig.{name} must be a positive integer (ms), got {value!r}")
        if self.max_commit_ms < self.notify_winner_ms:
            raise ValueError(
                f"CompletionConfig.max_commit_ms ({self.max_commit_ms}) must be at least the time to pick and "
                f"notify a committer ({self.notify_winner_ms} ms)"
            )

    @property
    def pick_winner_ms(self) -> int:
        return self.hold_ms + self.hold_ms // 10

    @property
    def notify_winner_ms(self) -> int:
        return self.pick_winner_ms + self.hold_ms + self.hold_ms // 10

    @property
    def lossy_pick_ms(self) -> int:
        """How long from its first message an FSM waits for a complete copy before it lets a replica that lost
        messages to retention commit (when no complete replica has reported and not all replicas have):
        half the build lease, so a frozen or slow complete replica gets time, and a dead one does not block."""
        lease = min(self.max_commit_ms, self.notify_winner_ms + self.commit_timeout_ms)  # an FSM's first lease
        return min(self.pick_winner_ms + self.commit_timeout_ms // 2, max(self.pick_winner_ms, lease - self.hold_ms))


# ---- actions: what the shell must do ----


@dataclass(frozen=True, slots=True)
class CommitSegmentMetadata:
    """Run the three-step commit (DESIGN.md §4): (1) CAS ``segment``'s metadata to DONE with ``end_offset``,
    ``location`` and the segment facts; (2) create ``next_segment``'s metadata starting at ``end_offset``;
    (3) CAS the ideal state: ``segment`` ONLINE, ``next_segment`` CONSUMING on the same instances.
    Then feed ``CommitFinished(this action, success)`` back; its response goes to the committer's commitEnd.
    ``generation`` ties the outcome to the FSM that asked, so a stale outcome cannot complete a newer FSM."""

    segment: LLCSegmentName
    next_segment: LLCSegmentName
    instance: str
    end_offset: int
    location: str
    crc: int
    total_docs: int
    size_bytes: int
    build_time_ms: int
    time_min: int | None
    time_max: int | None
    generation: int
    partitions: SegmentPartitions | None = None  # of the built segment's rows (segmentCommitEnd's)


@dataclass(frozen=True, slots=True)
class MarkReplicaOffline:
    """Set ``segment`` OFFLINE for ``instance`` in the ideal state: the replica stopped consuming for good, so
    it releases the segment (and later downloads the committed one, or repair restarts consumption)."""

    segment: LLCSegmentName
    instance: str
    reason: str


@dataclass(frozen=True, slots=True)
class CommitStarted:
    """The committer's segmentCommitStart was accepted at ``end_offset``. For a pauseless table the shell, before
    answering, fixes the end offset in the metadata (COMMITTING), creates the next segment from it and places it
    CONSUMING, so the partition is consumed while the segment is built and uploaded. Best effort: whatever of it
    fails, commitEnd's steps 2 and 3 do (they are idempotent). Other tables: nothing to do."""

    segment: LLCSegmentName
    instance: str
    end_offset: int


Action = CommitSegmentMetadata | MarkReplicaOffline | CommitStarted


# ---- events besides server requests ----


@dataclass(frozen=True, slots=True)
class CommitFinished:
    """The shell ran a CommitSegmentMetadata action. ``success`` is False if any step failed (the FSM aborts; the
    next FSM reads the metadata again, so a step 1 that did land is still seen as committed)."""

    action: CommitSegmentMetadata
    success: bool

    @property
    def segment(self) -> LLCSegmentName:
        return self.action.segment


@dataclass(frozen=True, slots=True)
class LeadershipLost:
    """This controller is no longer the leader: abort every FSM and answer NOT_LEADER (``leader_url`` if known)."""

    leader_url: str | None = None


@dataclass(frozen=True, slots=True)
class LeadershipGained:
    """This controller became the leader: start answering, with no FSMs (they are rebuilt from metadata)."""


Event = Request | CommitFinished | LeadershipLost | LeadershipGained


@dataclass(frozen=True, slots=True)
class StoryEntry:
    """One step of an FSM's history, for the status tool: what came in, the state change, what went out."""

    now: int
    event: str
    instance: str | None
    offset: int | None
    before: FsmState
    after: FsmState
    status: ResponseStatus | None
    actions: tuple[str, ...] = field(default=())
