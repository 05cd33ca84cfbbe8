"""Nothing in a consuming segment waits without a bound: go_online's download gives up after its attempts, a stop()
racing go_online's catch-up is not lost, and the completion client's backoff cap is configuration."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.records import SegmentRecord
from cuvee.protocol.completion import SegmentConsumed, StopReason
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.config import ServerConfig
from cuvee.server.consuming import ConsumerConfig, SegmentCompletionClient, SegmentReleasedError
from cuvee.server.consuming import client as client_module
from cuvee.server.consuming.segment import CommittedCopyUnavailable, ConsumingSegment
from tests.server.test_consuming_support import FAST, make_replica, record, wait_until

UNUSED_CONTROLLER = "http://127.0.0.1:9"  # these segments never reach the completion protocol


@pytest.fixture
def segments() -> Iterator[list[ConsumingSegment]]:
    made: list[ConsumingSegment] = []
    yield made
    for segment in made:
        segment.stop()


def committed(start: int, end: int) -> SegmentRecord:
    return record(start=start).committed(end_offset=end, total_docs=end - start, size_bytes=1, crc=7,
                                         download_uri="file:///x", now_ms=1)


def test_go_online_gives_up_after_download_max_attempts(tmp_path: Path, segments: list[ConsumingSegment]) -> None:
    """The committed copy cannot be fetched: go_online raises (→ ERROR, retried later by the follower) instead of
    holding the transition worker until stop()."""
    config = ConsumerConfig(**{**FAST.__dict__, "download_max_attempts": 3, "download_retry_initial_seconds": 0.001,
                               "download_retry_max_seconds": 0.001})
    calls: list[SegmentRecord] = []

    def fetch(rec: SegmentRecord) -> ImmutableSegment:
        calls.append(rec)
        raise ConnectionError("fault: deep store down")

    client = SegmentCompletionClient(config, leader_url=UNUSED_CONTROLLER)
    # started at offset 5, the committed segment ends at 3: nothing to catch up, nothing built → download
    replica = make_replica(tmp_path, tmp_path / "log", record(start=5), instance="s1", client=client, fetch=fetch,
                           config=config)
    segments.append(replica.segment)
    outcome: list[BaseException | ImmutableSegment] = []
    worker = threading.Thread(target=lambda: outcome.append(_call(replica.segment, committed(5, 3))), daemon=True)
    worker.start()
    wait_until(lambda: outcome, timeout=10, message=lambda: f"go_online still running after {len(calls)} attempts")
    assert isinstance(outcome[0], CommittedCopyUnavailable) and "3 attempt(s)" in str(outcome[0])
    assert len(calls) == 3


def _call(segment: ConsumingSegment, rec: SegmentRecord) -> BaseException | ImmutableSegment:
    try:
        return segment.go_online(rec)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc


class StopRacesTheClear(threading.Event):
    """go_online's interrupt event; its first clear() happens just after a concurrent stop() set _closing and the
    interrupt (stop() then waits for go_online's lock): the window between go_online's check and its clear."""

    def __init__(self, segment: ConsumingSegment):
        super().__init__()
        self._segment = segment
        self.raced = False

    def clear(self) -> None:
        if not self.raced:
            self.raced = True
            self._segment._closing.set()  # what stop() does first ...
            self.set()  # ... and second, before it blocks on the lock go_online holds
        super().clear()


def test_a_stop_between_the_closing_check_and_the_clear_is_not_lost(
    tmp_path: Path, segments: list[ConsumingSegment], monkeypatch: pytest.MonkeyPatch
) -> None:
    client = SegmentCompletionClient(FAST, leader_url=UNUSED_CONTROLLER)
    replica = make_replica(tmp_path, tmp_path / "log", record(start=0), instance="s1", client=client)
    segment = replica.segment
    segments.append(segment)
    racing = StopRacesTheClear(segment)
    segment._interrupt = racing
    segment._consumer.interrupted = racing
    caught_up: list[int] = []
    monkeypatch.setattr(segment._consumer, "catch_up", lambda target, timeout: caught_up.append(target) or False)
    with pytest.raises(SegmentReleasedError):
        segment.go_online(committed(0, 10))  # behind (0 < 10): would catch up for catch_up_timeout_seconds
    assert racing.raced
    assert caught_up == []  # stop() was seen: no catch-up that only its (lost) interrupt could end
    assert replica.fetched == []  # and no download either
    assert racing.is_set()


class FakeTime:
    """Stands in for the client module's ``time``: sleeping advances the monotonic clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_request_backoff_cap_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTime()
    monkeypatch.setattr(client_module, "time", fake)
    config = ConsumerConfig(controller_timeout_seconds=5.0, request_retry_initial_seconds=0.1,
                            request_retry_max_seconds=0.4)
    client = SegmentCompletionClient(config, resolve_leader=lambda: None)
    try:
        with pytest.raises(client_module.CompletionUnavailable):
            client.send(consumed_request())
    finally:
        client.close()
    assert fake.sleeps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.4])
    assert max(fake.sleeps) == pytest.approx(0.4) and sum(fake.sleeps) == pytest.approx(5.0)


def consumed_request() -> SegmentConsumed:
    return SegmentConsumed(LLCSegmentName.parse(record().segment_name), "s1", 0, 0, StopReason.ROW_LIMIT)


def test_new_intervals_are_validated_configuration() -> None:
    for bad in ({"request_retry_max_seconds": 0}, {"download_max_attempts": 0}, {"download_max_attempts": 1.5}):
        with pytest.raises(ValueError):
            ConsumerConfig(**bad)  # type: ignore[arg-type]
    for bad_server in ({"error_retry_initial_seconds": 0}, {"error_retry_max_seconds": -1},
                       {"follower_join_timeout_seconds": 0}):
        with pytest.raises(ValueError):
            ServerConfig(**bad_server)  # type: ignore[arg-type]
    defaults = ServerConfig()
    assert (defaults.error_retry_initial_seconds, defaults.error_retry_max_seconds,
            defaults.follower_join_timeout_seconds) == (5.0, 300.0, 10.0)


def test_under_a_memory_share_a_fetch_asks_only_for_the_rows_that_fit() -> None:
    from cuvee.server.consuming.consume import _FIRST_BUDGETED_FETCH, _rows_that_fit

    assert _rows_that_fit(32_768, 0, 0) == _FIRST_BUDGETED_FETCH  # nothing read yet: a first small read
    assert _rows_that_fit(32_768, 16_384, 1000) == 1001  # 16 bytes a row, 16 KiB left: 1,000 more and one past
    assert _rows_that_fit(32_768, 32_700, 2000) == 5  # nearly full: a handful, never a whole fetch
