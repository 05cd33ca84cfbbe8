"""Every ladder of the segment completion protocol (after Pinot's SegmentCompletionTest), with a fake clock.

Times follow Pinot's: hold 3 s, so the pick window is 3.3 s and the notify window 6.6 s from the first message;
the first build lease ends 6.6 s + 120 s after it.
"""

from __future__ import annotations

import pytest

from cuvee.controller.completion_fsm import CompletionFsm
from cuvee.controller.completion_manager import SegmentInfo
from cuvee.controller.completion_types import (
    CommitFinished,
    CommitSegmentMetadata,
    CommitStarted,
    CompletionConfig,
    FsmState,
    MarkReplicaOffline,
)
from cuvee.protocol.completion import (
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    StopReason,
)
from tests.controller.ladder import HOLD_MS, O1, O2, O3, S1, S2, S3, SEGMENT, Ladder

LADDER_CONFIG = CompletionConfig(hold_ms=HOLD_MS)  # the ladder's timing

R = ResponseStatus


def three_reported(ladder: Ladder) -> None:
    """S1 (20) and S2 (40) HOLD, S3 (30) completes the set: S2 is the committer, S3 must catch up to 40."""
    assert ladder.consumed(S1, O1).status is R.HOLD
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.tick(1)
    response = ladder.consumed(S3, O3)
    assert (response.status, response.offset) == (R.CATCH_UP, O2)
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTER_DECIDED


def test_happy_path_three_replicas() -> None:
    ladder = Ladder()
    three_reported(ladder)
    ladder.tick(1)
    assert (ladder.consumed(S1, O1).status, ladder.consumed(S1, O1).offset) == (R.CATCH_UP, O2)
    ladder.tick(1)
    commit = ladder.consumed(S2, O2)
    assert (commit.status, commit.offset) == (R.COMMIT, O2)
    ladder.tick(1)
    assert ladder.consumed(S3, O2).status is R.HOLD  # caught up, but nothing is committed yet
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    ladder.tick(5)
    response, actions = ladder.commit_end(S2, O2)
    assert response is None
    [action] = actions
    assert isinstance(action, CommitSegmentMetadata)
    assert (action.segment, action.instance, action.end_offset, action.location) == (SEGMENT, S2, O2, "file:///ds/seg")
    assert (action.next_segment.partition, action.next_segment.sequence) == (SEGMENT.partition, SEGMENT.sequence + 1)
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTING
    assert ladder.finish(action).status is R.COMMIT_SUCCESS
    assert ladder.fsm is None  # dropped once committed
    ladder.tick(1)
    keep = ladder.consumed(S1, O2)
    assert (keep.status, keep.offset) == (R.KEEP, O2)
    assert ladder.fsm is None  # the FSM rebuilt from DONE metadata is dropped again
    assert ladder.consumed(S3, O2).status is R.KEEP
    assert [c.instance for c in ladder.commits] == [S2]


def test_happy_path_two_replicas() -> None:
    ladder = Ladder(replicas=(S1, S2))
    assert ladder.consumed(S1, O1).status is R.HOLD
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.COMMIT  # all replicas reported: the caller has the largest offset
    assert ladder.consumed(S1, O1).status is R.CATCH_UP
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S1, O2).status is R.KEEP


def test_single_replica_commits_at_once() -> None:
    ladder = Ladder(replicas=(S1,))
    response = ladder.consumed(S1, O1)
    assert (response.status, response.offset) == (R.COMMIT, O1)
    assert ladder.commit(S1, O1).status is R.COMMIT_SUCCESS
    assert ladder.committed_offset == O1


def test_all_replicas_same_offset_last_caller_commits_others_hold() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.consumed(S2, O1).status is R.HOLD
    assert ladder.consumed(S3, O1).status is R.COMMIT  # ties go to the caller
    assert ladder.consumed(S1, O1).status is R.HOLD  # equal offset: wait for the commit, then KEEP
    assert ladder.commit(S3, O1).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S1, O1).status is R.KEEP
    assert ladder.consumed(S2, O1).status is R.KEEP


def test_build_lease_is_told_with_commit() -> None:
    ladder = Ladder(replicas=(S1,))
    response = ladder.consumed(S1, O1)
    assert response.build_time_seconds == 127  # 6.6 s notify window + 120 s commit timeout, rounded up


def test_winner_on_row_limit_without_waiting() -> None:
    ladder = Ladder()
    ladder.tick(5)
    assert ladder.consumed(S1, O1, StopReason.ROW_LIMIT).status is R.COMMIT
    ladder.tick(1)
    assert ladder.consumed(S2, O1, StopReason.ROW_LIMIT).status is R.HOLD
    ladder.tick(1)
    assert ladder.consumed(S3, O3, StopReason.TIME_LIMIT).status is R.HOLD  # ahead, but the committer is chosen
    ladder.tick(1)
    assert ladder.commit(S1, O1).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S2, O1, StopReason.ROW_LIMIT).status is R.KEEP
    assert ladder.consumed(S3, O3).status is R.DISCARD  # it went past the committed offset


def test_time_limit_first_report_waits_for_others() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1, StopReason.TIME_LIMIT).status is R.HOLD
    ladder.tick(4)  # past the 3.3 s pick window: the best offset heard so far wins
    assert ladder.consumed(S1, O1).status is R.COMMIT


def test_stopped_consuming_during_completion() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.tick(1)
    response, actions = ladder.stopped(S3, O3)
    assert response is not None and response.status is R.PROCESSED
    assert actions == [MarkReplicaOffline(SEGMENT, S3, "IAmLazy")]
    ladder.tick(1)
    assert ladder.consumed(S1, O1).status is R.CATCH_UP  # S3 is no longer awaited: S2 won
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(1)
    assert ladder.consumed(S3, O2).status is R.HOLD  # S3 came back (restarted); accepted again
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S1, O2).status is R.KEEP


def test_stopped_consuming_before_any_report() -> None:
    ladder = Ladder()
    response, actions = ladder.stopped(S1, O1)
    assert response is not None and response.status is R.PROCESSED and len(actions) == 1
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.PARTIAL_CONSUMING
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.tick(1)
    catch_up = ladder.consumed(S3, O3)  # S2 and S3 are all we wait for now
    assert (catch_up.status, catch_up.offset) == (R.CATCH_UP, O2)
    assert ladder.consumed(S3, O2).status is R.HOLD
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S1, O2).status is R.KEEP


def test_happy_path_after_a_replica_stopped_and_restarted() -> None:
    ladder = Ladder()
    ladder.stopped(S2, O2)
    ladder.replicas.add(S2)  # it was restarted and given the segment again
    ladder.tick(1)
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS


def test_stopped_replica_is_never_chosen() -> None:
    ladder = Ladder()
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.stopped(S2, O2)
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.consumed(S3, O3).status is R.COMMIT  # S2's larger offset no longer counts
    assert ladder.commit_start(S2, O2).status is R.FAILED


def test_committer_stopping_aborts_and_another_is_elected() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    response, actions = ladder.stopped(S2, O2, "build failed")
    assert response is not None and response.status is R.PROCESSED and len(actions) == 1
    assert ladder.fsm is None
    assert ladder.consumed(S1, O2).status is R.HOLD  # a fresh FSM, without S2
    assert ladder.consumed(S3, O2).status is R.COMMIT
    assert ladder.commit(S3, O2).status is R.COMMIT_SUCCESS


def test_commit_metadata_failure_aborts_then_commits_later() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    response, [action] = ladder.commit_end(S2, O2)
    assert response is None
    assert ladder.finish(action, success=False).status is R.FAILED
    assert ladder.fsm is None and ladder.committed_offset is None
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.HOLD
    assert ladder.consumed(S1, O2).status is R.HOLD
    assert ladder.consumed(S3, O2).status is R.COMMIT
    assert ladder.commit(S3, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S2, O2).status is R.KEEP


def test_committer_never_comes_back_lease_expires_and_new_committer_is_picked() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(3)
    assert ladder.consumed(S1, O1).status is R.CATCH_UP
    ladder.tick(130)  # past the build lease
    assert ladder.consumed(S1, O2).status is R.HOLD
    assert ladder.fsm is None  # aborted and dropped
    ladder.tick(1)
    assert ladder.consumed(S1, O2).status is R.HOLD  # a new FSM
    ladder.tick(1)
    assert ladder.consumed(S3, O2).status is R.HOLD
    ladder.tick(5)  # S2 stays silent: the pick window passes
    assert ladder.consumed(S3, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.HOLD  # the old committer's late commit is refused
    assert ladder.commit(S3, O2).status is R.COMMIT_SUCCESS
    assert [c.instance for c in ladder.commits] == [S3]


def test_dead_servers_then_fresh_start() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(3600)
    assert ladder.consumed(S2, O2).status is R.HOLD
    assert ladder.fsm is None
    assert ladder.consumed(S2, O2).status is R.HOLD
    assert ladder.fsm is not None
    ladder.tick(4)
    assert ladder.consumed(S2, O2).status is R.COMMIT


def test_committer_decided_but_never_notified_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    ladder.tick(5)  # 7 s after the first message: past the 6.6 s notify window
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.fsm is None


def test_larger_offset_after_decision_restarts_election() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S3, O2 + 10).status is R.HOLD  # ahead of the chosen offset, before COMMIT went out
    assert ladder.fsm is None
    ladder.tick(1)
    assert ladder.consumed(S1, O2 + 10).status is R.HOLD
    assert ladder.consumed(S2, O2 + 10).status is R.HOLD
    assert ladder.consumed(S3, O2 + 10).status is R.COMMIT


def test_larger_offset_after_commit_notice_holds_then_discards() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    ladder.tick(1)
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.tick(3)
    assert ladder.consumed(S2, O2).status is R.COMMIT  # pick window over, S3 never reported
    ladder.tick(1)
    assert ladder.consumed(S3, O2 + 10).status is R.HOLD  # may be needed if the committer fails
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S3, O2 + 10).status is R.DISCARD
    assert ladder.consumed(S1, O1).status is R.DISCARD


def test_late_replica_before_and_after_commit() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.consumed(S2, O2).status is R.HOLD
    ladder.tick(4)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    late = ladder.consumed(S3, O3)  # late, before the commit: catch up
    assert (late.status, late.offset) == (R.CATCH_UP, O2)
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    assert ladder.consumed(S3, O3).status is R.CATCH_UP  # still, while uploading
    response, [action] = ladder.commit_end(S2, O2)
    assert ladder.consumed(S3, O2).status is R.HOLD  # while committing
    assert ladder.finish(action).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S3, O2).status is R.KEEP
    assert ladder.consumed(S3, O3).status is R.DISCARD
    assert ladder.commit_start(S1, O2).status is R.KEEP
    assert ladder.commit_start(S1, O1).status is R.DISCARD


def test_retransmissions_are_idempotent() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.consumed(S2, O2).status is R.COMMIT  # lost answer, asked again
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    response, actions = ladder.commit_end(S2, O2)
    assert response is None and len(actions) == 1
    again, more = ladder.commit_end(S2, O2)
    assert again is not None and again.status is R.HOLD and more == []  # only one commit in flight
    assert ladder.consumed(S2, O2).status is R.HOLD  # no abort while the metadata is being written
    assert ladder.finish(actions[0]).status is R.COMMIT_SUCCESS
    late, _ = ladder.commit_end(S2, O2)  # a retry after the FSM is gone: it starts over and then KEEPs
    assert late is not None and late.status is R.FAILED
    assert ladder.consumed(S2, O2).status is R.KEEP
    assert len(ladder.commits) == 1


def test_commit_end_retry_while_fsm_still_committed_succeeds() -> None:
    fsm = CompletionFsm(SEGMENT, [S1], 0, CompletionConfig(hold_ms=3000), generation=1)
    assert fsm.handle(SegmentConsumed(SEGMENT, S1, 9, 9, StopReason.ROW_LIMIT), 0)[0].status is R.COMMIT
    assert fsm.handle(SegmentCommitStart(SEGMENT, S1, 9), 1)[0].status is R.COMMIT_CONTINUE
    end = SegmentCommitEnd(SEGMENT, S1, 9, "", crc=1, total_docs=9, size_bytes=9)
    _, [action] = fsm.handle(end, 2)
    assert fsm.handle(CommitFinished(action, True), 3)[0].status is R.COMMIT_SUCCESS
    assert fsm.handle(end, 4)[0].status is R.COMMIT_SUCCESS
    assert [entry.status for entry in fsm.story()][-1] is R.COMMIT_SUCCESS
    assert fsm.story()[0].before is FsmState.HOLDING and fsm.story()[0].after is FsmState.COMMITTER_NOTIFIED


def test_commit_start_from_a_non_committer_is_held() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S3, O2).status is R.HOLD
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTER_NOTIFIED
    response, actions = ladder.commit_end(S3, O2)
    assert response is not None and response.status is R.FAILED and actions == []
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTER_NOTIFIED
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS


def test_committer_with_other_offset_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.consumed(S2, O2 + 1).status is R.HOLD
    assert ladder.fsm is None


def test_commit_start_with_other_offset_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O1).status is R.HOLD
    assert ladder.fsm is None


def test_committer_reporting_while_uploading_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    assert ladder.consumed(S2, O2).status is R.HOLD
    assert ladder.fsm is None
    response, actions = ladder.commit_end(S2, O2)
    assert response is not None and response.status is R.FAILED and actions == []


def test_commit_end_without_commit_start_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    response, actions = ladder.commit_end(S2, O2)
    assert response is not None and response.status is R.FAILED and actions == []
    assert ladder.fsm is None


def test_extend_build_time_within_max_keeps_the_lease() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(100)
    assert ladder.extend(S2, O2, 120).status is R.PROCESSED
    ladder.tick(100)  # past the first lease, within the extended one
    assert ladder.consumed(S1, O2).status is R.HOLD
    assert ladder.fsm is not None
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS


def test_extend_build_time_over_max_fails_and_aborts() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(100)
    assert ladder.extend(S2, O2, 1800).status is R.FAILED  # beyond 30 min from the start
    assert ladder.fsm is None


def test_extend_build_time_after_lease_expired_holds() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.tick(200)
    assert ladder.extend(S2, O2, 60).status is R.HOLD
    assert ladder.fsm is None


def test_extend_build_time_only_for_the_committer() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.extend(S1, O1, 60).status is R.FAILED  # nobody is building yet
    assert ladder.consumed(S2, O2).status is R.HOLD
    assert ladder.consumed(S3, O3).status is R.CATCH_UP
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.extend(S3, O2, 60).status is R.FAILED
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTER_NOTIFIED


def test_slow_commit_is_learned_for_the_next_segment() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    for _ in range(3):
        ladder.tick(100)
        assert ladder.extend(S2, O2, 120).status is R.PROCESSED
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS
    learned = ladder.manager.learned_commit_ms(SEGMENT.table)
    assert learned is not None and learned > 300_000
    following = SegmentConsumed(SEGMENT.next(ladder.now), S1, 5, 5, StopReason.ROW_LIMIT)
    response, _ = ladder.manager.handle(following, ladder.now, SegmentInfo(frozenset({S1})))
    assert response is not None and response.status is R.COMMIT
    assert response.build_time_seconds is not None and response.build_time_seconds * 1000 >= learned


def test_commit_request_while_holding_after_failover_is_held() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.fail_over()
    assert ladder.commit_start(S2, O2).status is R.HOLD  # the new leader knows nothing of the election
    response, actions = ladder.commit_end(S2, O2)
    assert response is not None and response.status is R.FAILED and actions == []
    ladder.tick(1)
    assert ladder.consumed(S1, O2).status is R.HOLD
    assert ladder.consumed(S3, O2).status is R.HOLD
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit(S2, O2).status is R.COMMIT_SUCCESS


def test_leadership_lost_mid_protocol_answers_not_leader() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    ladder.lose_leadership("http://c2:9000")
    assert ladder.fsm is None
    response = ladder.commit_start(S2, O2)
    assert (response.status, response.leader_url) == (R.NOT_LEADER, "http://c2:9000")
    assert ladder.consumed(S1, O2).status is R.NOT_LEADER
    assert ladder.extend(S2, O2, 10).status is R.NOT_LEADER
    ladder.gain_leadership()
    assert ladder.consumed(S1, O2).status is R.HOLD


def test_leadership_lost_while_committing() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    _, [action] = ladder.commit_end(S2, O2)
    ladder.lose_leadership()
    assert ladder.finish(action).status is R.NOT_LEADER  # step 1 landed, but the answer is not ours to give
    assert ladder.committed_offset == O2
    ladder.fail_over()  # the new leader reads DONE metadata
    assert ladder.consumed(S2, O2).status is R.KEEP
    assert ladder.consumed(S3, O3).status is R.DISCARD


def test_stale_commit_outcome_does_not_complete_a_newer_fsm() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    _, [old] = ladder.commit_end(S2, O2)
    ladder.lose_leadership()
    ladder.gain_leadership()
    ladder.tick(1)
    assert ladder.consumed(S1, O2).status is R.HOLD
    assert ladder.consumed(S3, O2).status is R.HOLD
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    _, [new] = ladder.commit_end(S2, O2)
    assert ladder.finish(old, success=True).status is R.FAILED  # old generation: its CAS landed, but no answer
    assert ladder.fsm is not None and ladder.fsm.state is FsmState.COMMITTING
    assert ladder.finish(new).status is R.FAILED  # its CAS lost to the old one
    assert ladder.consumed(S2, O2).status is R.KEEP
    assert len(ladder.commits) == 1


def test_segment_without_metadata_fails() -> None:
    ladder = Ladder()
    request = SegmentConsumed(SEGMENT, S1, 1, 1, StopReason.ROW_LIMIT)
    assert ladder.manager.needs_info(SEGMENT)
    response, actions = ladder.manager.handle(request, ladder.now, None)  # the shell found no metadata
    assert response is not None and response.status is R.FAILED and actions == []
    assert ladder.fsm is None


def test_fsm_created_from_committed_metadata() -> None:
    ladder = Ladder()
    ladder.committed_offset = O2
    assert ladder.consumed(S1, O2).status is R.KEEP
    assert ladder.consumed(S3, O3).status is R.DISCARD
    assert ladder.commit_start(S1, O2).status is R.KEEP
    response, _ = ladder.commit_end(S1, O2)  # not the known committer: no success claimed
    assert response is not None and response.status is R.FAILED
    response, actions = ladder.stopped(S3, O3)
    assert response is not None and response.status is R.PROCESSED and actions == []


def test_lease_expiry_on_commit_request_in_holding() -> None:
    ladder = Ladder()
    assert ladder.consumed(S1, O1).status is R.HOLD
    ladder.tick(200)
    assert ladder.commit_start(S1, O1).status is R.HOLD
    assert ladder.fsm is None


def test_commit_end_from_stopped_committer_fails() -> None:
    ladder = Ladder()
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    ladder.stopped(S2, O2)
    assert ladder.fsm is None  # the committer gave up
    response, actions = ladder.commit_end(S2, O2)
    assert response is not None and response.status is R.FAILED and actions == []


@pytest.mark.parametrize("bad", [{"hold_ms": 0}, {"commit_timeout_ms": -1}, {"max_commit_ms": 1000}, {"hold_ms": True}])
def test_config_rejects_bad_values(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="CompletionConfig"):
        CompletionConfig(**bad)


def test_fsm_refuses_unknown_events() -> None:
    fsm = CompletionFsm(SEGMENT, [S1], 0)
    with pytest.raises(TypeError, match="not a completion event"):
        fsm.handle("segmentConsumed", 0)  # type: ignore[arg-type]


# ---- pauseless: the end offset fixed at commit start ----


def test_commit_start_tells_the_shell_where_the_segment_ends() -> None:
    ladder = Ladder(pauseless=True)
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    response, actions = ladder.send(SegmentCommitStart(SEGMENT, S2, O2))
    assert response is not None and response.status is R.COMMIT_CONTINUE
    assert actions == [CommitStarted(SEGMENT, S2, O2)]
    assert ladder.pinned_offset == O2
    response, actions = ladder.send(SegmentCommitStart(SEGMENT, S2, O2))  # a retry: same answer, nothing new
    assert response is not None and response.status is R.COMMIT_CONTINUE and actions == []


def test_a_pinned_fsm_commits_only_at_the_fixed_offset() -> None:
    """The committer's lease ran out after commit start: the next FSM reads COMMITTING at 40. A replica past it
    (50) is never picked, one behind catches up, the first at 40 commits, and afterwards 50 is discarded."""
    ladder = Ladder(pauseless=True)
    three_reported(ladder)
    assert ladder.consumed(S2, O2).status is R.COMMIT
    assert ladder.commit_start(S2, O2).status is R.COMMIT_CONTINUE
    ladder.tick(200)  # past the lease: the FSM aborts on the next message and a pinned one takes over
    assert ladder.consumed(S3, 50).status is R.HOLD
    fsm = ladder.fsm
    assert fsm is None or fsm.state is FsmState.ABORTED
    assert ladder.consumed(S3, 50).status is R.HOLD
    assert ladder.fsm is not None and ladder.fsm.pinned_offset == O2
    behind = ladder.consumed(S1, O1)
    assert (behind.status, behind.offset) == (R.CATCH_UP, O2)
    ladder.tick(10)  # the pick window has passed: still nobody past 40 is picked
    assert ladder.consumed(S3, 50).status is R.HOLD
    assert ladder.consumed(S1, O2).status is R.COMMIT
    assert ladder.commit(S1, O2).status is R.COMMIT_SUCCESS
    assert ladder.consumed(S3, 50).status is R.DISCARD
    assert ladder.consumed(S2, O2).status is R.KEEP
    assert [c.end_offset for c in ladder.commits] == [O2]


# ---- replicas that lost messages to retention ----


def lossy(ladder: Ladder, instance: str, offset: int, reason: StopReason = StopReason.ROW_LIMIT):  # type: ignore[no-untyped-def]
    response, actions = ladder.send(SegmentConsumed(SEGMENT, instance, offset, offset - 50, reason, messages_lost=50))
    assert response is not None and actions == []
    return response


def test_a_complete_replica_commits_even_behind_a_lossy_one_that_reported_first() -> None:
    """The lossy replica reached its row limit at 150 (its copy skips 50 expired messages); the complete one stops
    at 100. Largest-offset-wins would commit the incomplete copy; the complete one commits instead."""
    ladder = Ladder(replicas=(S1, S2))
    assert lossy(ladder, S1, 150).status is R.HOLD  # not decisive, though it stopped at the row limit
    ladder.tick(10)  # past the pick window: still no winner among incomplete copies while S2 may report
    assert lossy(ladder, S1, 150).status is R.HOLD
    assert ladder.consumed(S2, 100, StopReason.ROW_LIMIT).status is R.COMMIT
    assert lossy(ladder, S1, 150).status is R.HOLD  # ahead of the winner, but incomplete: no new election
    assert ladder.commit(S2, 100).status is R.COMMIT_SUCCESS
    assert lossy(ladder, S1, 150).status is R.DISCARD
    assert [c.end_offset for c in ladder.commits] == [100]


def test_an_incomplete_copy_commits_when_every_replica_lost_messages_or_after_the_lossy_wait() -> None:
    ladder = Ladder(replicas=(S1, S2))
    assert lossy(ladder, S1, 150).status is R.HOLD
    assert lossy(ladder, S2, 140).status is R.CATCH_UP  # everyone reported, all incomplete: the largest wins
    assert lossy(ladder, S1, 150).status is R.COMMIT

    alone = Ladder(replicas=(S1, S2))  # S2 never reports (dead): S1's copy commits once the wait is over
    assert lossy(alone, S1, 150).status is R.HOLD
    alone.tick(LADDER_CONFIG.lossy_pick_ms / 1000 - 5)
    assert lossy(alone, S1, 150).status is R.HOLD
    alone.tick(10)
    assert lossy(alone, S1, 150).status is R.COMMIT


def test_a_pinned_fsm_prefers_a_complete_replica_at_the_fixed_offset() -> None:
    ladder = Ladder(replicas=(S1, S2), pauseless=True)
    ladder.pinned_offset = 100  # a commit start fixed the end offset; that committer is gone
    assert lossy(ladder, S1, 100).status is R.HOLD  # at the offset, but its copy misses messages
    assert ladder.consumed(S2, 100).status is R.COMMIT


def test_a_pinned_fsm_waits_for_a_complete_replica_catching_up_rather_than_commit_an_incomplete_copy() -> None:
    ladder = Ladder(replicas=(S1, S2), pauseless=True)
    ladder.pinned_offset = 100
    behind = ladder.consumed(S2, 80)  # complete, behind: told to catch up
    assert (behind.status, behind.offset) == (R.CATCH_UP, 100)
    assert lossy(ladder, S1, 100).status is R.HOLD  # everyone reported, but a complete copy is on its way
    assert ladder.consumed(S2, 100).status is R.COMMIT


def test_an_incomplete_copy_at_the_committed_offset_is_discarded_not_kept() -> None:
    ladder = Ladder(replicas=(S1, S2))
    assert ladder.consumed(S1, 100, StopReason.ROW_LIMIT).status is R.COMMIT
    assert ladder.commit(S1, 100).status is R.COMMIT_SUCCESS
    assert lossy(ladder, S2, 100).status is R.DISCARD  # its build would not match the committed CRC
    assert ladder.consumed(S2, 100).status is R.KEEP


def test_a_replica_placed_after_the_election_began_gets_a_fresh_election() -> None:
    """The segment's FSM knows S1 and S2; repair then places it on S3 (the others gave up). The FSM's own member
    list would refuse S3 forever: the shell asks the manager to drop it, and S3's next message elects afresh."""
    ladder = Ladder(replicas=(S1, S2))
    assert ladder.consumed(S1, O1).status is R.HOLD
    assert ladder.fsm is not None and S3 not in ladder.fsm.members
    assert ladder.status(SegmentConsumed(SEGMENT, S3, O1, O1, StopReason.TIME_LIMIT)) is R.FAILED  # a stranger
    ladder.replicas, ladder.members = {S3}, frozenset({S1, S2, S3})
    assert ladder.manager.renew_for(SEGMENT, S3) and ladder.fsm is None
    assert not ladder.manager.renew_for(SEGMENT, S3)  # nothing left to drop
    assert ladder.consumed(S3, O1, StopReason.ROW_LIMIT).status is R.COMMIT
