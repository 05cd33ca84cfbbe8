"""States, events and actions of the replica's completion-protocol FSM (see ``fsm.py``).

Events are what the I/O shell reports; actions are what it must do. All are frozen dataclasses so tests can
compare them and the story can record them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cuvee.protocol.completion import Request, RequestKind, Response, StopReason
from cuvee.segment.partitioning import SegmentPartitions


class ConsumerState(enum.Enum):
    CONSUMING = "CONSUMING"  # reading the stream toward an end criterion
    HOLDING = "HOLDING"  # end reached; asking the controller (segmentConsumed) what to do
    CATCHING_UP = "CATCHING_UP"  # consuming up to the offset the controller named
    BUILDING = "BUILDING"  # committer: building the immutable segment
    UPLOADING = "UPLOADING"  # committer: commitStart accepted, uploading to the deep store
    COMMITTING = "COMMITTING"  # committer: commitStart or commitEnd sent
    RETAINING = "RETAINING"  # KEEP: building the local copy
    RETAINED = "RETAINED"  # KEEP done: the local copy is the committed segment
    COMMITTED = "COMMITTED"  # this replica's copy was committed
    DISCARDED = "DISCARDED"  # this copy differs from the committed one: download it on go_online
    ERROR = "ERROR"  # gave up (stream or build failure): download on go_online
    STOPPED = "STOPPED"  # released by the shell

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({ConsumerState.RETAINED, ConsumerState.COMMITTED, ConsumerState.DISCARDED,
                       ConsumerState.ERROR, ConsumerState.STOPPED})


class BuildPurpose(enum.Enum):
    COMMIT = "COMMIT"
    KEEP = "KEEP"


@dataclass(frozen=True, slots=True)
class BuiltSegment:
    """What the shell built: enough to commit it (segmentCommitEnd) or to compare it with the committed one."""

    end_offset: int
    crc: int
    total_docs: int
    size_bytes: int
    build_time_ms: int = 0
    time_min: int | None = None
    time_max: int | None = None
    partitions: SegmentPartitions | None = None  # of its rows, under the table's segmentPartitionConfig


# ---- events: what the shell reports ----


@dataclass(frozen=True, slots=True)
class EndReached:
    """The consume loop stopped at an end criterion: next offset to consume, rows indexed, and why;
    ``messages_lost``: the segment's messages retention removed before they were read (an incomplete copy)."""

    offset: int
    rows: int
    reason: StopReason
    messages_lost: int = 0


@dataclass(frozen=True, slots=True)
class ConsumeFailed:
    """Consuming failed for good (e.g. the stream kept failing) at ``offset``: give up this replica."""

    offset: int
    rows: int
    reason: str


@dataclass(frozen=True, slots=True)
class Responded:
    """The controller answered the request of ``kind``."""

    kind: RequestKind
    response: Response


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """The request of ``kind`` got no usable answer (controller unreachable, timeout, bad reply)."""

    kind: RequestKind
    reason: str


@dataclass(frozen=True, slots=True)
class RetryDue:
    """A ``Wait`` ended."""


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """A ``CatchUp`` ended at ``offset`` (the target, unless the stream did not have it in time)."""

    offset: int
    rows: int
    messages_lost: int = 0


@dataclass(frozen=True, slots=True)
class BuildSucceeded:
    built: BuiltSegment


@dataclass(frozen=True, slots=True)
class BuildFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class UploadSucceeded:
    location: str


@dataclass(frozen=True, slots=True)
class UploadFailed:
    reason: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Periodic while building or uploading: the moment to extend the lease, if it is running out."""


@dataclass(frozen=True, slots=True)
class Stop:
    """The shell releases the segment (CONSUMING→OFFLINE/DROPPED, go_online, shutdown)."""


Event = (EndReached | ConsumeFailed | Responded | RequestFailed | RetryDue | CaughtUp | BuildSucceeded | BuildFailed
         | UploadSucceeded | UploadFailed | Tick | Stop)


# ---- actions: what the shell must do ----


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``request`` to the lead controller; report Responded or RequestFailed."""

    request: Request


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait ``seconds`` (interruptibly), then report RetryDue."""

    seconds: float


@dataclass(frozen=True, slots=True)
class ResolveLeader:
    """Forget the cached leader; use ``hint`` (NOT_LEADER's leader_url) if given, else re-read the election."""

    hint: str | None


@dataclass(frozen=True, slots=True)
class CatchUp:
    """Consume up to exactly ``offset``; report CaughtUp."""

    offset: int


@dataclass(frozen=True, slots=True)
class Build:
    """Build the immutable segment from everything consumed (ending at ``offset``); report BuildSucceeded/Failed."""

    offset: int
    purpose: BuildPurpose


@dataclass(frozen=True, slots=True)
class Upload:
    """Pack the built segment and put it in the deep store; report UploadSucceeded/UploadFailed."""


@dataclass(frozen=True, slots=True)
class Finish:
    """The protocol is over for this replica, in ``state``; the shell's thread ends and waits for go_online."""

    state: ConsumerState


Action = Send | Wait | ResolveLeader | CatchUp | Build | Upload | Finish


@dataclass(frozen=True, slots=True)
class StoryEntry:
    """One step, for ``story()``: what happened to this segment and why (dask's story idea)."""

    now: float
    event: str
    state: ConsumerState
    actions: tuple[str, ...]
