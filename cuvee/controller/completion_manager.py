"""The lead controller's registry of completion FSMs: one per completing segment, created on first contact.

Pure, like the FSMs it holds. The shell's protocol endpoint does, per request:

    if manager.needs_info(request.segment):
        info = SegmentInfo(...)          # read the segment's metadata and ideal state; None if no metadata
    response, actions = manager.handle(request, now_ms, info)
    ...perform actions; for CommitSegmentMetadata, hold the HTTP reply until the commit steps ran, then
    response, more = manager.handle(CommitFinished(action, success), now_ms)   # the answer to commitEnd

``response`` is None only for an accepted commitEnd (the answer comes with CommitFinished) and for the
leadership events. Leadership changes arrive as LeadershipLost / LeadershipGained events.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvee.controller.completion_fsm import CompletionFsm
from cuvee.controller.completion_types import (
    Action,
    CommitFinished,
    CompletionConfig,
    Event,
    FsmState,
    LeadershipGained,
    LeadershipLost,
)
from cuvee.protocol.completion import Request, Response, failed, not_leader
from cuvee.protocol.segment_name import LLCSegmentName


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What the shell read about a segment when its FSM is created. ``replicas``: the instances holding it
    CONSUMING in the ideal state (replicas marked OFFLINE are left out, so nobody waits for them). ``members``: every
    instance the ideal state lists for the segment, in any state (default: ``replicas``); only they take part.
    ``committed_end_offset``: the end offset if the metadata already says DONE (late replicas then get
    KEEP/DISCARD), else None. ``pinned_end_offset``: the end offset if the metadata says COMMITTING (a pauseless
    commit started: the segment must end exactly there), else None."""

    replicas: frozenset[str]
    committed_end_offset: int | None = None
    pinned_end_offset: int | None = None
    members: frozenset[str] | None = None


class CompletionManager:
    """Maps segment -> FSM; answers NOT_LEADER unless leader; drops FSMs once committed or aborted; learns how
    long commits take per table, so later FSMs give committers a long enough first lease."""

    def __init__(self, config: CompletionConfig | None = None, *, leader: bool, leader_url: str | None = None):
        self.config = config or CompletionConfig()
        self._leader = leader
        self._leader_url = leader_url
        self._fsms: dict[LLCSegmentName, CompletionFsm] = {}
        self._commit_ms: dict[str, int] = {}
        self._generation = 0
        self.refused = 0  # requests from instances that are not replicas of the segment

    @property
    def is_leader(self) -> bool:
        return self._leader

    def fsm(self, segment: LLCSegmentName) -> CompletionFsm | None:
        return self._fsms.get(segment)

    def segments(self) -> list[LLCSegmentName]:
        """The segments with an FSM in progress, in name order."""
        return sorted(self._fsms)

    def learned_commit_ms(self, table: str) -> int | None:
        return self._commit_ms.get(table)

    def renew_for(self, segment: LLCSegmentName, instance: str) -> bool:
        """The ideal state now lists ``instance`` for ``segment`` but the segment's FSM, made before, does not (a
        replica placed since, e.g. by repair): the FSM is dropped so the next request makes a fresh one with the
        current replicas. Not while a commit's metadata writes are in flight. True if dropped."""
        fsm = self._fsms.get(segment)
        if fsm is None or instance in fsm.members or fsm.state is FsmState.COMMITTING:
            return False
        fsm.abort()
        del self._fsms[segment]
        return True

    def needs_info(self, segment: LLCSegmentName) -> bool:
        """True when ``handle`` would create an FSM for ``segment`` and so needs its SegmentInfo."""
        return self._leader and segment not in self._fsms

    def handle(self, event: Event, now: int, info: SegmentInfo | None = None) -> tuple[Response | None, list[Action]]:
        """Apply one event at ``now`` (epoch ms); ``info`` is needed only when ``needs_info`` says so."""
        match event:
            case LeadershipLost():
                self._leader, self._leader_url = False, event.leader_url
                for fsm in self._fsms.values():
                    fsm.abort()
                self._fsms.clear()
                return None, []
            case LeadershipGained():
                self._leader, self._leader_url = True, None
                return None, []
        if not self._leader:
            return not_leader(self._leader_url), []
        if isinstance(event, CommitFinished):
            return self._commit_finished(event, now)
        return self._request(event, now, info)

    def _request(self, request: Request, now: int, info: SegmentInfo | None) -> tuple[Response | None, list[Action]]:
        fsm = self._fsms.get(request.segment)
        if fsm is None and info is None:
            return failed(), []  # no metadata for the segment: nothing to complete
        members = fsm.members if fsm is not None else _members(info)
        if request.instance not in members:
            self.refused += 1
            return failed(), []  # not a replica of the segment: it takes no part, and nothing changes
        if fsm is None:
            assert info is not None
            fsm = self._create(request.segment, info, now)
        response, actions = fsm.handle(request, now)
        self._learn(fsm)
        self._drop_if_done(fsm)
        return response, actions

    def _commit_finished(self, event: CommitFinished, now: int) -> tuple[Response | None, list[Action]]:
        fsm = self._fsms.get(event.segment)
        if fsm is None or fsm.generation != event.action.generation:
            return failed(), []  # that FSM is gone (aborted): its committer starts over
        response, actions = fsm.handle(event, now)
        self._drop_if_done(fsm)
        return response, actions

    def _create(self, segment: LLCSegmentName, info: SegmentInfo, now: int) -> CompletionFsm:
        self._generation += 1
        fsm = CompletionFsm(
            segment,
            info.replicas,
            now,
            self.config,
            generation=self._generation,
            learned_commit_ms=self._commit_ms.get(segment.table),
            committed_offset=info.committed_end_offset,
            pinned_offset=info.pinned_end_offset,
            members=_members(info),
        )
        self._fsms[segment] = fsm
        return fsm

    def _learn(self, fsm: CompletionFsm) -> None:
        took = fsm.observed_commit_ms
        if took is not None and took > fsm.initial_commit_ms and took > self._commit_ms.get(fsm.segment.table, 0):
            self._commit_ms[fsm.segment.table] = took

    def _drop_if_done(self, fsm: CompletionFsm) -> None:
        if fsm.done and self._fsms.get(fsm.segment) is fsm:
            del self._fsms[fsm.segment]


def _members(info: SegmentInfo | None) -> frozenset[str]:
    if info is None:
        return frozenset()
    return info.replicas if info.members is None else info.members | info.replicas
