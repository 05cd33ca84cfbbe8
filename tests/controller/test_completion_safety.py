"""Property test of the completion protocol's safety over random interleavings of replica messages, clock
advances, commit outcomes, leadership changes and controller failovers, messages from instances that are no
replica of the segment (made-up ids and near misses of real ones) and replayed messages:

- a stranger's message is answered FAILED (NOT_LEADER when not leader) and changes nothing;
- a commit carries the row count its committer reported with its offset;

- within one FSM, COMMIT goes to one (replica, offset) only; COMMIT_CONTINUE and commit actions only to that
  FSM's chosen committer, so two replicas are never entitled to commit at once;
- the metadata commit lands at most once (a CAS), and every COMMIT_SUCCESS names that replica and offset;
- KEEP only for a complete copy at the committed offset, DISCARD only for another offset or an incomplete copy,
  and both only after the commit landed;
- after any such history, well-behaved replicas still get the segment committed (liveness).

The same runs again for a pauseless table: an accepted commitStart fixes the end offset in the metadata (a CAS:
the first one wins, the next segment starts there), FSMs created afterwards are pinned to it, and step 1 refuses
any other end offset; the segment must still get committed, at the pinned offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from tests.controller.ladder import SEGMENT, START_MS

R = ResponseStatus
REPLICAS = ("S1", "S2", "S3")
CONFIG = CompletionConfig(hold_ms=3_000, commit_timeout_ms=20_000, max_commit_ms=120_000)


@dataclass
class Cluster:
    """The shell and the metadata store, checking every answer against the invariants."""

    manager: CompletionManager = field(default_factory=lambda: CompletionManager(CONFIG, leader=True))
    pauseless: bool = False
    pinned: int | None = None  # the end offset a pauseless commit start fixed (COMMITTING metadata)
    now: int = START_MS
    replicas: set[str] = field(default_factory=lambda: set(REPLICAS))
    committed: tuple[str, int] | None = None  # (committer, end offset) once step 1 landed
    pending: list[tuple[CompletionManager, CommitSegmentMetadata]] = field(default_factory=list)
    grants: dict[tuple[int, int], tuple[str, int]] = field(default_factory=dict)  # (manager, generation) -> COMMIT
    successes: set[tuple[str, int]] = field(default_factory=set)
    told_commit: tuple[str, int] | None = None  # the latest COMMIT / COMMIT_CONTINUE, to drive committers
    told_continue: tuple[str, int] | None = None
    retired: list[CompletionManager] = field(default_factory=list)  # kept alive so their id()s stay unique
    last: Request | None = None  # the latest request sent, for replays

    def send(self, request: Request) -> Response | None:
        self.last = request
        if request.instance not in REPLICAS:
            return self.send_as_stranger(request)
        info = None
        if self.manager.needs_info(SEGMENT):
            info = SegmentInfo(frozenset(self.replicas), self.committed[1] if self.committed else None,
                               None if self.committed else self.pinned, frozenset(REPLICAS))
        response, actions = self.manager.handle(request, self.now, info)
        for action in actions:
            if isinstance(action, CommitStarted):
                key = (id(self.manager), self.manager.fsm(SEGMENT).generation)  # type: ignore[union-attr]
                assert self.grants.get(key) == (action.instance, action.end_offset), "commit start by a non-committer"
                if self.pauseless and self.committed is None and self.pinned is None:
                    self.pinned = action.end_offset  # the CAS IN_PROGRESS -> COMMITTING; later ones are refused
            elif isinstance(action, CommitSegmentMetadata):
                key = (id(self.manager), action.generation)
                assert self.grants.get(key) == (action.instance, action.end_offset), "commit by a non-committer"
                assert action.total_docs == action.end_offset, "committed rows the committer did not report"
                self.pending.append((self.manager, action))
            else:
                assert isinstance(action, MarkReplicaOffline)
                self.replicas.discard(action.instance)
        if response is not None:
            self.check(request, response)
        return response

    def send_as_stranger(self, request: Request) -> Response | None:
        """An instance that is no replica of the segment: FAILED, and nothing changes."""
        before = _fsm_state(self.manager)
        info = SegmentInfo(frozenset(self.replicas), None, self.pinned, frozenset(REPLICAS)) \
            if self.manager.needs_info(SEGMENT) else None
        response, actions = self.manager.handle(request, self.now, info)
        assert actions == [] and _fsm_state(self.manager) == before, "a stranger changed the election"
        expected = R.FAILED if self.manager.is_leader else R.NOT_LEADER
        assert response is not None and response.status is expected
        return response

    def check(self, request: Request, response: Response) -> None:
        who = (request.instance, request.offset)
        fsm = self.manager.fsm(SEGMENT)
        match response.status:
            case R.COMMIT:
                assert fsm is not None and response.offset == request.offset
                key = (id(self.manager), fsm.generation)
                assert self.grants.setdefault(key, who) == who, "two committers in one election"
                self.told_commit = who
            case R.COMMIT_CONTINUE:
                assert fsm is not None and self.grants.get((id(self.manager), fsm.generation)) == who
                self.told_continue = who
            case R.COMMIT_SUCCESS:
                self.success(who)
            case R.KEEP:  # only a complete copy at the committed offset is kept
                assert self.committed is not None and self.committed[1] == request.offset
                assert not getattr(request, "lossy", False)
            case R.DISCARD:  # another offset, or an incomplete copy (it lost messages to retention)
                assert self.committed is not None
                assert self.committed[1] != request.offset or getattr(request, "lossy", False)

    def success(self, who: tuple[str, int]) -> None:
        assert self.committed == who, f"COMMIT_SUCCESS to {who}, but the metadata says {self.committed}"
        self.successes.add(who)
        assert len(self.successes) == 1

    def finish(self, index: int, ok: bool) -> Response | None:
        manager, action = self.pending.pop(index % len(self.pending))
        landed = ok and self.committed is None  # step 1 is a compare-and-set from IN_PROGRESS
        landed = landed and self.pinned in (None, action.end_offset)  # ... or from COMMITTING at the same offset
        if landed:
            self.committed = (action.instance, action.end_offset)
        response, actions = manager.handle(CommitFinished(action, landed), self.now)
        assert actions == [] and response is not None
        if response.status is R.COMMIT_SUCCESS:
            self.success((action.instance, action.end_offset))
        return response

    def fail_over(self) -> None:
        self.manager.handle(LeadershipLost("http://next"), self.now)
        self.retired.append(self.manager)
        self.manager = CompletionManager(CONFIG, leader=True)


def _fsm_state(manager: CompletionManager) -> tuple | None:  # type: ignore[type-arg]
    fsm = manager.fsm(SEGMENT)
    if fsm is None:
        return None
    return (fsm.generation, fsm.state, dict(fsm.reports), dict(fsm.rows), fsm.winner, fsm.winning_offset,
            set(fsm.excluded), set(fsm.lossy), fsm.commit_deadline)


replica = st.sampled_from(REPLICAS)
stranger = st.sampled_from(("X1", "S1 ", "s1"))  # a made-up id, and near misses of a real one
offset = st.sampled_from((10, 20, 30))
# Weighted: mostly protocol traffic, so elections get far enough for the later states to be exercised.
KINDS = ["consumed"] * 8 + ["committer"] * 6 + ["finish"] * 2 + ["tick"] * 2
KINDS += ["start", "end", "extend", "stopped", "restart", "lose", "gain", "failover", "stranger", "replay"]


@st.composite
def op(draw: st.DrawFn) -> tuple:  # type: ignore[type-arg]
    kind = draw(st.sampled_from(KINDS))
    match kind:
        case "consumed":  # sometimes from a replica that lost messages to retention (an incomplete copy)
            return (kind, draw(replica), draw(offset), draw(st.sampled_from(list(StopReason))),
                    draw(st.sampled_from((0, 0, 0, 5))))
        case "start" | "stopped":
            return (kind, draw(replica), draw(offset))
        case "end":
            at = draw(offset)
            return (kind, draw(replica), at, draw(st.sampled_from((at, at, 1))))
        case "extend":
            return (kind, draw(replica), draw(offset), draw(st.sampled_from((1, 30, 200))))
        case "restart":
            return (kind, draw(replica))
        case "stranger":  # any message, as if from a replica, by an instance that is none
            at = draw(offset)
            return (kind, draw(stranger), at, draw(st.sampled_from(("consumed", "start", "end", "extend", "stopped"))))
        case "tick":
            return (kind, draw(st.sampled_from((0, 500, 1_000, 3_500, 7_000, 25_000, 200_000))))
        case "finish":
            return (kind, draw(st.integers(0, 5)), draw(st.booleans()))
    return (kind,)


def apply(cluster: Cluster, step: tuple) -> None:  # type: ignore[type-arg]
    kind = step[0]
    if kind == "consumed":
        cluster.send(SegmentConsumed(SEGMENT, step[1], step[2], step[2], step[3], messages_lost=step[4]))
    elif kind == "start":
        cluster.send(SegmentCommitStart(SEGMENT, step[1], step[2]))
    elif kind == "end":  # rows as reported with the offset, or a lie
        cluster.send(SegmentCommitEnd(SEGMENT, step[1], step[2], "file:///x", crc=1, total_docs=step[3],
                                      size_bytes=1))
    elif kind == "extend":
        cluster.send(ExtendBuildTime(SEGMENT, step[1], step[2], step[3]))
    elif kind == "stopped":
        cluster.send(SegmentStoppedConsuming(SEGMENT, step[1], step[2], "boom"))
    elif kind == "committer" and cluster.told_continue is not None:
        name, at = cluster.told_continue
        cluster.told_continue = None
        cluster.send(SegmentCommitEnd(SEGMENT, name, at, "file:///x", crc=1, total_docs=at, size_bytes=1))
    elif kind == "committer" and cluster.told_commit is not None:
        name, at = cluster.told_commit
        cluster.told_commit = None
        cluster.send(SegmentCommitStart(SEGMENT, name, at))
    elif kind == "restart":
        cluster.replicas.add(step[1])
    elif kind == "stranger":
        _, who, at, what = step
        cluster.send({"consumed": SegmentConsumed(SEGMENT, who, at, at, StopReason.ROW_LIMIT),
                      "start": SegmentCommitStart(SEGMENT, who, at),
                      "end": SegmentCommitEnd(SEGMENT, who, at, "file:///x", crc=1, total_docs=at, size_bytes=1),
                      "extend": ExtendBuildTime(SEGMENT, who, at, 30),
                      "stopped": SegmentStoppedConsuming(SEGMENT, who, at, "lie")}[what])
    elif kind == "replay" and cluster.last is not None:
        cluster.send(cluster.last)
    elif kind == "tick":
        cluster.now += step[1]
    elif kind == "finish" and cluster.pending:
        cluster.finish(step[1], step[2])
    elif kind == "lose":
        cluster.manager.handle(LeadershipLost(), cluster.now)
    elif kind == "gain":
        cluster.manager.handle(LeadershipGained(), cluster.now)
    elif kind == "failover":
        cluster.fail_over()


def commit(cluster: Cluster, name: str, at: int) -> bool:
    """A committer's side: commitStart, commitEnd, and the shell's commit; False if told to start over."""
    start = cluster.send(SegmentCommitStart(SEGMENT, name, at))
    if start is None or start.status is not R.COMMIT_CONTINUE:
        return False
    if cluster.send(SegmentCommitEnd(SEGMENT, name, at, "file:///x", crc=1, total_docs=at, size_bytes=1)) is not None:
        return False
    response = cluster.finish(len(cluster.pending) - 1, True)
    return response is not None and response.status is R.COMMIT_SUCCESS


def drive_to_commit(cluster: Cluster) -> None:
    """Well-behaved replicas from here on: report, catch up, commit when told. The segment must get committed."""
    while cluster.pending:
        cluster.finish(0, True)
    cluster.manager.handle(LeadershipGained(), cluster.now)
    offsets = dict.fromkeys(cluster.replicas, 10)
    done: set[str] = set()
    for _ in range(40):
        for name in sorted(offsets.keys() - done):
            response = cluster.send(SegmentConsumed(SEGMENT, name, offsets[name], offsets[name], StopReason.TIME_LIMIT))
            assert response is not None
            if response.status is R.CATCH_UP:
                assert response.offset is not None and response.offset > offsets[name]
                offsets[name] = response.offset
            elif response.status is R.COMMIT and commit(cluster, name, offsets[name]):
                done.add(name)
            elif response.status in (R.KEEP, R.DISCARD):
                done.add(name)
        if done == offsets.keys():
            break
        cluster.now += 1_000
    assert done == offsets.keys(), f"not all replicas finished: {done} of {sorted(offsets)}"
    assert cluster.committed is not None or not offsets
    if cluster.pinned is not None and cluster.committed is not None:
        assert cluster.committed[1] == cluster.pinned, "committed away from where the next segment starts"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op(), min_size=10, max_size=100))
@pytest.mark.parametrize("pauseless", [False, True], ids=["classic", "pauseless"])
def test_at_most_one_committer_and_one_committed_offset(pauseless: bool, steps: list[tuple]) -> None:  # type: ignore[type-arg]
    cluster = Cluster(pauseless=pauseless)
    for step in steps:
        apply(cluster, step)
    drive_to_commit(cluster)
