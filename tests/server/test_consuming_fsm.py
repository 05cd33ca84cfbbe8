"""The replica's completion-protocol FSM, driven synchronously through every controller answer (fake clock)."""

from __future__ import annotations

import pytest

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
from cuvee.server.consuming.fsm import (
    Build,
    BuildFailed,
    BuildPurpose,
    BuildSucceeded,
    BuiltSegment,
    CatchUp,
    CaughtUp,
    ConsumeFailed,
    ConsumerFsm,
    ConsumerState,
    EndReached,
    Finish,
    RequestFailed,
    ResolveLeader,
    Responded,
    RetryDue,
    Send,
    Stop,
    Tick,
    Upload,
    UploadFailed,
    UploadSucceeded,
    Wait,
)

SEG = LLCSegmentName.parse("events__3__7__20261121T1647Z")
ME = "server-1"
CONFIG = ConsumerConfig(hold_retry_seconds=2.0, not_leader_retry_seconds=0.5, extend_build_seconds=30,
                        lease_margin_seconds=5.0, default_lease_seconds=40.0)
S = ConsumerState
K = RequestKind
R = ResponseStatus
BUILT = BuiltSegment(end_offset=100, crc=1234, total_docs=90, size_bytes=5000, build_time_ms=12, time_min=1,
                     time_max=9)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


def consumed(offset: int = 100, rows: int = 90, reason: StopReason = StopReason.ROW_LIMIT) -> Send:
    return Send(SegmentConsumed(SEG, ME, offset, rows, reason))


def answer(kind: RequestKind, status: ResponseStatus, offset: int | None = None, **kw: object) -> Responded:
    return Responded(kind, Response(status, offset, **kw))  # type: ignore[arg-type]


def holding(clock: Clock, offset: int = 100) -> ConsumerFsm:
    fsm = ConsumerFsm(SEG, ME, CONFIG)
    assert fsm.handle(EndReached(offset, 90, StopReason.ROW_LIMIT), clock.now) == [consumed(offset)]
    assert fsm.state is S.HOLDING
    return fsm


def committing(clock: Clock) -> ConsumerFsm:
    fsm = holding(clock)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100, build_time_seconds=20), clock.now) == [
        Build(100, BuildPurpose.COMMIT)]
    assert fsm.state is S.BUILDING
    assert fsm.handle(BuildSucceeded(BUILT), clock.now) == [Send(SegmentCommitStart(SEG, ME, 100))]
    assert fsm.state is S.COMMITTING
    return fsm


def commit_end(location: str) -> Send:
    return Send(SegmentCommitEnd(SEG, ME, 100, location=location, crc=1234, total_docs=90, size_bytes=5000,
                                 build_time_ms=12, time_min=1, time_max=9))


# ---- HOLD / FAILED / unknown answers ----


@pytest.mark.parametrize("status", [R.HOLD, R.FAILED, R.PROCESSED, R.COMMIT_SUCCESS, R.COMMIT_CONTINUE])
def test_hold_like_answers_wait_then_ask_again(clock: Clock, status: ResponseStatus) -> None:
    fsm = holding(clock)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, status, 100), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING
    assert fsm.handle(RetryDue(), clock.now + 2) == [consumed()]


def test_unreachable_controller_is_retried_after_the_hold_period(clock: Clock) -> None:
    fsm = holding(clock)
    assert fsm.handle(RequestFailed(K.SEGMENT_CONSUMED, "connection refused"), clock.now) == [Wait(2.0)]
    assert fsm.handle(RetryDue(), clock.now) == [consumed()]


def test_the_stop_reason_and_rows_are_reported() -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG)
    actions = fsm.handle(EndReached(55, 40, StopReason.TIME_LIMIT), 0)
    assert actions == [Send(SegmentConsumed(SEG, ME, 55, 40, StopReason.TIME_LIMIT))]


# ---- CATCH_UP ----


def test_catch_up_consumes_to_the_offset_then_reports_it(clock: Clock) -> None:
    fsm = holding(clock, offset=80)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.CATCH_UP, 100), clock.now) == [CatchUp(100)]
    assert fsm.state is S.CATCHING_UP
    assert fsm.handle(CaughtUp(100, 95), clock.now) == [Send(SegmentConsumed(SEG, ME, 100, 95, StopReason.ROW_LIMIT))]
    assert fsm.state is S.HOLDING and (fsm.offset, fsm.rows) == (100, 95)


def test_catch_up_to_where_we_already_are_is_a_hold(clock: Clock) -> None:
    fsm = holding(clock, offset=100)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.CATCH_UP, 100), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING


def test_catch_up_that_falls_short_reports_the_offset_reached(clock: Clock) -> None:
    fsm = holding(clock, offset=80)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.CATCH_UP, 100), clock.now)
    assert fsm.handle(CaughtUp(90, 85), clock.now) == [Wait(2.0)]  # not at once: no tight loop with the controller
    assert fsm.state is S.HOLDING
    assert fsm.handle(RetryDue(), clock.now) == [Send(SegmentConsumed(SEG, ME, 90, 85, StopReason.ROW_LIMIT))]


def test_stream_failure_while_catching_up_gives_up_and_tells_the_controller(clock: Clock) -> None:
    fsm = holding(clock, offset=80)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.CATCH_UP, 100), clock.now)
    actions = fsm.handle(ConsumeFailed(85, 82, "stream down"), clock.now)
    assert actions == [Send(SegmentStoppedConsuming(SEG, ME, 85, "stream down")), Finish(S.ERROR)]
    assert fsm.state is S.ERROR and fsm.error == "stream down"


def test_stream_failure_while_consuming_gives_up() -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG)
    actions = fsm.handle(ConsumeFailed(12, 10, "boom"), 0)
    assert actions == [Send(SegmentStoppedConsuming(SEG, ME, 12, "boom")), Finish(S.ERROR)]
    assert fsm.handle(answer(K.SEGMENT_STOPPED_CONSUMING, R.PROCESSED), 0) == []


# ---- COMMIT: build, commitStart, upload, commitEnd ----


def test_commit_happy_path(clock: Clock) -> None:
    fsm = committing(clock)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now) == [Upload()]
    assert fsm.state is S.UPLOADING
    uri = "file:///deep/events_REALTIME/seg.tar.gz"
    assert fsm.handle(UploadSucceeded(uri), clock.now) == [commit_end(uri)]
    assert fsm.state is S.COMMITTING
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.COMMIT_SUCCESS, 100), clock.now) == [Finish(S.COMMITTED)]
    assert fsm.state is S.COMMITTED and fsm.location == uri


def test_upload_failure_commits_with_an_empty_location(clock: Clock) -> None:
    fsm = committing(clock)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now)
    assert fsm.handle(UploadFailed("disk full"), clock.now) == [commit_end("")]
    assert fsm.upload_error == "disk full"
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.COMMIT_SUCCESS, 100), clock.now) == [Finish(S.COMMITTED)]


def test_commit_for_another_offset_is_a_hold(clock: Clock) -> None:
    fsm = holding(clock, offset=100)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 120), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING


@pytest.mark.parametrize("status", [R.HOLD, R.FAILED])
def test_commit_start_refused_goes_back_to_holding_and_keeps_the_build(clock: Clock, status: ResponseStatus) -> None:
    fsm = committing(clock)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, status, 100), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING
    assert fsm.handle(RetryDue(), clock.now) == [consumed()]
    # Made committer again for the same offset: the saved build is committed without building again.
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now) == [Send(SegmentCommitStart(SEG, ME, 100))]
    assert fsm.state is S.COMMITTING


def test_commit_start_unanswered_goes_back_to_holding(clock: Clock) -> None:
    fsm = committing(clock)
    assert fsm.handle(RequestFailed(K.SEGMENT_COMMIT_START, "timeout"), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING


def test_commit_start_answered_keep_finishes_with_the_build(clock: Clock) -> None:
    fsm = committing(clock)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.KEEP, 100), clock.now) == [Finish(S.RETAINED)]


def test_commit_end_hold_resends_commit_end(clock: Clock) -> None:
    fsm = committing(clock)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now)
    fsm.handle(UploadSucceeded("u"), clock.now)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.HOLD, 100), clock.now) == [Wait(2.0)]
    assert fsm.handle(RetryDue(), clock.now) == [commit_end("u")]
    assert fsm.handle(RequestFailed(K.SEGMENT_COMMIT_END, "timeout"), clock.now) == [Wait(2.0)]
    assert fsm.handle(RetryDue(), clock.now) == [commit_end("u")]
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.COMMIT_SUCCESS, 100), clock.now) == [Finish(S.COMMITTED)]


def test_commit_end_failed_goes_back_to_holding(clock: Clock) -> None:
    fsm = committing(clock)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now)
    fsm.handle(UploadSucceeded("u"), clock.now)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.FAILED), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING
    assert fsm.handle(RetryDue(), clock.now) == [consumed()]


def test_build_failure_as_committer_gives_up(clock: Clock) -> None:
    fsm = holding(clock)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now)
    actions = fsm.handle(BuildFailed("out of memory"), clock.now)
    assert actions == [Send(SegmentStoppedConsuming(SEG, ME, 100, "segment build failed: out of memory")),
                       Finish(S.ERROR)]
    assert fsm.state is S.ERROR


# ---- KEEP / DISCARD ----


def test_keep_builds_a_local_copy(clock: Clock) -> None:
    fsm = holding(clock)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.KEEP, 100), clock.now) == [Build(100, BuildPurpose.KEEP)]
    assert fsm.state is S.RETAINING
    assert fsm.handle(BuildSucceeded(BUILT), clock.now) == [Finish(S.RETAINED)]
    assert fsm.built == BUILT


def test_keep_with_a_saved_build_needs_no_build(clock: Clock) -> None:
    fsm = committing(clock)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.HOLD, 100), clock.now)
    fsm.handle(RetryDue(), clock.now)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.KEEP, 100), clock.now) == [Finish(S.RETAINED)]


def test_keep_build_failure_ends_in_error_for_a_download(clock: Clock) -> None:
    fsm = holding(clock)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.KEEP, 100), clock.now)
    assert fsm.handle(BuildFailed("disk"), clock.now) == [Finish(S.ERROR)]


def test_keep_for_another_offset_is_a_discard(clock: Clock) -> None:
    fsm = holding(clock, offset=100)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.KEEP, 120), clock.now) == [Finish(S.DISCARDED)]


def test_discard_finishes(clock: Clock) -> None:
    fsm = holding(clock)
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.DISCARD), clock.now) == [Finish(S.DISCARDED)]
    assert fsm.state is S.DISCARDED


# ---- NOT_LEADER ----


def test_not_leader_re_resolves_and_asks_again(clock: Clock) -> None:
    fsm = holding(clock)
    actions = fsm.handle(answer(K.SEGMENT_CONSUMED, R.NOT_LEADER, leader_url="http://c2:9000"), clock.now)
    assert actions == [ResolveLeader("http://c2:9000"), Wait(0.5)]
    assert fsm.handle(RetryDue(), clock.now) == [consumed()]


def test_not_leader_on_commit_start_and_commit_end(clock: Clock) -> None:
    fsm = committing(clock)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.NOT_LEADER), clock.now) == [ResolveLeader(None), Wait(0.5)]
    assert fsm.state is S.HOLDING
    fsm.handle(RetryDue(), clock.now)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now)
    fsm.handle(UploadSucceeded("u"), clock.now)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.NOT_LEADER), clock.now) == [ResolveLeader(None), Wait(0.5)]
    assert fsm.state is S.HOLDING
    assert fsm.handle(RetryDue(), clock.now) == [consumed()]


# ---- lease extension ----


def test_lease_is_extended_when_it_runs_low_while_building(clock: Clock) -> None:
    fsm = holding(clock)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100, build_time_seconds=20), clock.now)
    assert fsm.lease_deadline == clock.now + 20
    assert fsm.handle(Tick(), clock.now + 10) == []  # 10 s left, margin 5 s
    extend = Send(ExtendBuildTime(SEG, ME, 100, 30))
    assert fsm.handle(Tick(), clock.now + 16) == [extend]
    assert fsm.handle(Tick(), clock.now + 17) == []  # one request in flight at a time
    assert fsm.handle(answer(K.EXTEND_BUILD_TIME, R.PROCESSED), clock.now + 17) == []
    assert fsm.lease_deadline == clock.now + 47
    assert fsm.state is S.BUILDING
    assert fsm.handle(Tick(), clock.now + 30) == []
    assert fsm.handle(Tick(), clock.now + 43) == [extend]


def test_lease_extension_unanswered_is_retried_and_refusal_stops_asking(clock: Clock) -> None:
    fsm = holding(clock)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100, build_time_seconds=6), clock.now)
    extend = Send(ExtendBuildTime(SEG, ME, 100, 30))
    assert fsm.handle(Tick(), clock.now + 2) == [extend]
    assert fsm.handle(RequestFailed(K.EXTEND_BUILD_TIME, "timeout"), clock.now + 3) == []
    assert fsm.handle(Tick(), clock.now + 3) == [extend]
    assert fsm.handle(answer(K.EXTEND_BUILD_TIME, R.FAILED), clock.now + 4) == []
    assert fsm.lease_lost
    assert fsm.handle(Tick(), clock.now + 5) == []
    # The build still finishes and asks to commit: the controller decides.
    assert fsm.handle(BuildSucceeded(BUILT), clock.now + 6) == [Send(SegmentCommitStart(SEG, ME, 100))]


def test_lease_is_extended_while_uploading_but_not_while_holding(clock: Clock) -> None:
    fsm = committing(clock)
    fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now)
    assert fsm.handle(Tick(), clock.now + 19) == [Send(ExtendBuildTime(SEG, ME, 100, 30))]
    idle = holding(clock)
    assert idle.handle(Tick(), clock.now + 1000) == []


def test_commit_without_build_time_uses_the_default_lease(clock: Clock) -> None:
    fsm = holding(clock)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now)
    assert fsm.lease_deadline == clock.now + 40


# ---- stop, terminal states, story ----


@pytest.mark.parametrize("setup", ["consuming", "holding", "building"])
def test_stop_finishes_from_any_state(clock: Clock, setup: str) -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG) if setup == "consuming" else holding(clock)
    if setup == "building":
        fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now)
    assert fsm.handle(Stop(), clock.now) == [Finish(S.STOPPED)]
    assert fsm.handle(BuildSucceeded(BUILT), clock.now) == []
    assert fsm.state is S.STOPPED


def test_events_out_of_place_are_ignored(clock: Clock) -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG)
    assert fsm.handle(RetryDue(), clock.now) == []
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 1), clock.now) == []
    assert fsm.state is S.CONSUMING
    fsm = holding(clock)
    assert fsm.handle(UploadSucceeded("x"), clock.now) == []
    assert fsm.state is S.HOLDING


def test_story_records_each_step(clock: Clock) -> None:
    fsm = committing(clock)
    story = fsm.story()
    assert [entry.state for entry in story] == [S.HOLDING, S.BUILDING, S.COMMITTING]
    assert "EndReached" in story[0].event and "SegmentConsumed" in story[0].actions[0]


# ---- pauseless: commitStart before the build ----


def test_pauseless_committer_sends_commit_start_before_building(clock: Clock) -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG, commit_start_first=True)
    assert fsm.handle(EndReached(100, 90, StopReason.ROW_LIMIT), clock.now) == [consumed(100)]
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100, build_time_seconds=20), clock.now) == [
        Send(SegmentCommitStart(SEG, ME, 100))]  # the controller starts the next segment on this
    assert fsm.state is S.COMMITTING
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now) == [
        Build(100, BuildPurpose.COMMIT)]
    assert fsm.state is S.BUILDING
    clock.now += 16  # within 5 s of the 20 s lease: the build keeps it alive
    [extend] = fsm.handle(Tick(), clock.now)
    assert extend == Send(ExtendBuildTime(SEG, ME, 100, 30))
    assert fsm.handle(BuildSucceeded(BUILT), clock.now) == [Upload()]  # no second commitStart
    assert fsm.state is S.UPLOADING
    [end] = fsm.handle(UploadSucceeded("file:///deep/seg"), clock.now)
    assert isinstance(end, Send) and isinstance(end.request, SegmentCommitEnd) and end.request.crc == BUILT.crc
    assert fsm.handle(answer(K.SEGMENT_COMMIT_END, R.COMMIT_SUCCESS, 100), clock.now) == [Finish(S.COMMITTED)]


def test_pauseless_commit_start_refused_goes_back_to_holding_and_a_new_commit_starts_over(clock: Clock) -> None:
    fsm = ConsumerFsm(SEG, ME, CONFIG, commit_start_first=True)
    fsm.handle(EndReached(100, 90, StopReason.ROW_LIMIT), clock.now)
    fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now)
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.HOLD, 100), clock.now) == [Wait(2.0)]
    assert fsm.state is S.HOLDING and not fsm.commit_started
    assert fsm.handle(RetryDue(), clock.now) == [consumed(100)]
    assert fsm.handle(answer(K.SEGMENT_CONSUMED, R.COMMIT, 100), clock.now) == [Send(SegmentCommitStart(SEG, ME, 100))]
    assert fsm.handle(answer(K.SEGMENT_COMMIT_START, R.COMMIT_CONTINUE, 100), clock.now) == [
        Build(100, BuildPurpose.COMMIT)]
    assert fsm.handle(BuildFailed("disk full"), clock.now) == [
        Send(SegmentStoppedConsuming(SEG, ME, 100, "segment build failed: disk full")), Finish(S.ERROR)]
