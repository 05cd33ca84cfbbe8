"""ConsumingSegments running the completion protocol against a scripted controller over real HTTP: commit with
upload, KEEP with an identical CRC, DISCARD then download, CATCH_UP, NOT_LEADER, deep-store bypass, lease
extension, and go_online's choices."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.cluster.records import SegmentRecord
from cuvee.deepstore.local import LocalDeepStore
from cuvee.protocol.completion import (
    ExtendBuildTime,
    RequestKind,
    Response,
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    hold,
    not_leader,
    processed,
)
from cuvee.segment.archive import unpack, upload_of
from cuvee.segment.builder import build_segment
from cuvee.segment.format import data_files
from cuvee.server.consuming import ConsumerConfig, ConsumerState, SegmentCompletionClient
from cuvee.server.consuming import build as building
from cuvee.spi.deepstore import DeepStoreError
from tests.server.test_consuming_support import (
    FAST,
    SEGMENT,
    TABLE,
    Replica,
    ScriptedController,
    make_replica,
    produce,
    record,
    rows_table,
    schema,
    serving,
    table,
    wait_until,
)

K = RequestKind
R = ResponseStatus


class MiniController:
    """Just enough of the lead controller: the first reporter commits at its offset, replicas behind catch up,
    the rest hold; after the commit, replicas at the committed offset KEEP, others DISCARD."""

    def __init__(self, build_time_seconds: int = 30):
        self.build_time_seconds = build_time_seconds
        self.committer: str | None = None
        self.offset: int | None = None
        self.commit_end: SegmentCommitEnd | None = None
        self.lock = threading.Lock()

    def __call__(self, request: Any) -> Response:
        with self.lock:
            match request:
                case SegmentConsumed():
                    if self.commit_end is not None:
                        return Response(R.KEEP if request.offset == self.offset else R.DISCARD, request.offset)
                    if self.committer is None:
                        self.committer, self.offset = request.instance, request.offset
                    if request.instance == self.committer:
                        return Response(R.COMMIT, self.offset, build_time_seconds=self.build_time_seconds)
                    assert self.offset is not None
                    return Response(R.CATCH_UP, self.offset) if request.offset < self.offset else hold(request.offset)
                case SegmentCommitStart():
                    ok = request.instance == self.committer
                    return Response(R.COMMIT_CONTINUE, request.offset) if ok else hold(request.offset)
                case SegmentCommitEnd():
                    self.commit_end = request
                    return Response(R.COMMIT_SUCCESS, request.offset)
            return processed()

    def committed_record(self, base: SegmentRecord) -> SegmentRecord:
        end = self.commit_end
        assert end is not None
        return base.committed(end_offset=end.offset, total_docs=end.total_docs, size_bytes=end.size_bytes,
                              crc=end.crc, download_uri=end.location, now_ms=base.creation_time_ms + 1000)


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.segment.stop()
        replica.client.close()


def start(replicas: list[Replica], replica: Replica) -> Replica:
    replicas.append(replica)
    replica.segment.start()
    return replica


def finished(replica: Replica, state: ConsumerState | None = None) -> ConsumerState:
    reached = wait_until(lambda: replica.segment.state.terminal and replica.segment.state,
                         message=lambda: f"{replica.segment.name} is {replica.segment.state}")
    if state is not None:
        assert reached is state, replica.segment.story()
    return reached


def test_commit_uploads_to_the_deep_store_and_commit_end_carries_location_and_crc(
        tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(150))
    mini = MiniController()
    fake = ScriptedController(mini)
    with serving(fake) as service:
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=100), instance="s1",
                                               client=SegmentCompletionClient(FAST, leader_url=service.url)))
        finished(replica, ConsumerState.COMMITTED)
    assert fake.kinds() == [K.SEGMENT_CONSUMED, K.SEGMENT_COMMIT_START, K.SEGMENT_COMMIT_END]
    end = mini.commit_end
    assert end is not None and end.offset == 100 and end.total_docs == 100
    key = replica.deep_store.key_of(end.location)  # an upload of its own: the commit moves it into place
    assert upload_of(key, TABLE, SEGMENT) and key.startswith(f"events_REALTIME/uploads/{SEGMENT}.")
    assert replica.deep_store.exists(key)
    uploaded = unpack(replica.deep_store.get(key, tmp_path / "dl.tar.gz"), tmp_path / "unpacked")
    online = replica.segment.go_online(mini.committed_record(record(rows=100)))
    assert online.crc == end.crc and online.total_docs == 100
    assert [f.read_bytes() for f in data_files(uploaded)] == [f.read_bytes() for f in data_files(online.path)]
    assert online.path == tmp_path / "s1" / SEGMENT
    assert online.metadata.start_offset == 0 and online.metadata.end_offset == 100
    assert online.to_arrow().column("id").to_pylist() == list(range(100))
    assert replica.fetched == []
    assert replica.segment.go_online(mini.committed_record(record(rows=100))) is online  # idempotent


def test_keep_builds_a_copy_with_the_committers_crc(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(0, 120, 1), bad_at=(7,))
    mini = MiniController()
    with serving(ScriptedController(mini)) as service:
        pair = [start(replicas, make_replica(tmp_path, log_dir, record(rows=100), instance=name,
                                             client=SegmentCompletionClient(FAST, leader_url=service.url)))
                for name in ("s1", "s2")]
        states = {finished(r) for r in pair}
    assert states == {ConsumerState.COMMITTED, ConsumerState.RETAINED}
    committed = mini.committed_record(record(rows=100))
    assert committed.end_offset == 101
    segments = [r.segment.go_online(committed) for r in pair]
    assert [s.crc for s in segments] == [committed.crc, committed.crc]
    assert [f.read_bytes() for f in data_files(segments[0].path)] == [f.read_bytes() for f in data_files(segments[1].path)]
    assert all(r.fetched == [] for r in pair)


def test_discard_downloads_on_go_online(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(50))
    fake = ScriptedController(lambda request: Response(R.DISCARD))
    committed_rows = tmp_path / "committer"
    theirs = build_segment(rows_table(40), schema(), table(log_dir).indexing, committed_rows, SEGMENT,
                           start_offset=0, end_offset=40)
    with serving(fake) as service:
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=50), instance="s1",
                                               client=SegmentCompletionClient(FAST, leader_url=service.url),
                                               fetch=lambda committed: theirs))
        finished(replica, ConsumerState.DISCARDED)
    committed = record(rows=50).committed(end_offset=40, total_docs=40, size_bytes=1, crc=theirs.crc,
                                          download_uri="file:///x", now_ms=1)
    assert replica.segment.go_online(committed) is theirs
    assert replica.fetched == [committed]
    assert replica.segment.snapshot().num_rows == 50  # still queryable until the shell swaps and stops it
    replica.segment.stop()
    assert replica.segment.num_docs == 0 and replica.segment.snapshot().num_rows == 0


def test_catch_up_ends_at_exactly_the_named_offset(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(30))

    def script(request: Any) -> Response:
        if isinstance(request, SegmentConsumed):
            return Response(R.CATCH_UP, 60) if request.offset < 60 else Response(R.KEEP, 60)
        return processed()

    fake = ScriptedController(script)
    with serving(fake) as service:
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=1000), instance="s1",
                                               client=SegmentCompletionClient(FAST, leader_url=service.url)))
        wait_until(lambda: replica.segment.num_docs == 30)
        replica.segment.force_commit()
        wait_until(lambda: replica.segment.state is ConsumerState.CATCHING_UP)
        produce(log_dir, range(30, 80))
        finished(replica, ConsumerState.RETAINED)
    offsets = [r.offset for r in fake.of(K.SEGMENT_CONSUMED)]
    assert offsets == [30, 60]
    assert replica.segment.num_docs == 60
    assert replica.segment.info()["currentOffset"] == 60


def test_not_leader_re_resolves_the_leader(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(20))
    election = {"url": ""}
    standby = ScriptedController(lambda request: not_leader())
    leader = ScriptedController(lambda request: Response(R.DISCARD))
    with serving(standby) as standby_service, serving(leader) as leader_service:
        election["url"] = standby_service.url

        def resolve() -> str:
            url = election["url"]
            election["url"] = leader_service.url  # leadership moved after the first look
            return url

        client = SegmentCompletionClient(FAST, resolve_leader=resolve)
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=20), instance="s1", client=client))
        finished(replica, ConsumerState.DISCARDED)
    assert standby.kinds() == [K.SEGMENT_CONSUMED] and leader.kinds() == [K.SEGMENT_CONSUMED]
    assert client.leader_resolutions == 2 and client.leader_url == leader_service.url


def test_not_leader_hint_is_used_directly(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(20))
    leader = ScriptedController(lambda request: Response(R.DISCARD))
    with serving(leader) as leader_service:
        standby = ScriptedController(lambda request: not_leader(leader_service.url))
        with serving(standby) as standby_service:
            client = SegmentCompletionClient(FAST, leader_url=standby_service.url)
            replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=20), instance="s1", client=client))
            finished(replica, ConsumerState.DISCARDED)
    assert leader.kinds() == [K.SEGMENT_CONSUMED] and client.leader_resolutions == 0


class BrokenDeepStore(LocalDeepStore):
    def put(self, local_path: Any, key: str) -> str:
        raise DeepStoreError("the deep store is down")


def test_upload_failure_commits_with_an_empty_location(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(20))
    mini = MiniController()
    with serving(ScriptedController(mini)) as service:
        replica = start(replicas, make_replica(
            tmp_path, log_dir, record(rows=20), instance="s1", deep_store=BrokenDeepStore(tmp_path / "deep"),
            client=SegmentCompletionClient(FAST, leader_url=service.url)))
        finished(replica, ConsumerState.COMMITTED)
    assert mini.commit_end is not None and mini.commit_end.location == ""
    assert "down" in replica.segment.info()["uploadError"]
    online = replica.segment.go_online(mini.committed_record(record(rows=20)))
    assert online.crc == mini.commit_end.crc and replica.fetched == []


def test_slow_build_extends_the_lease(tmp_path: Path, log_dir: Path, replicas: list[Replica],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    produce(log_dir, range(20))
    mini = MiniController(build_time_seconds=1)
    extended = threading.Event()

    def script(request: Any) -> Response:
        if isinstance(request, ExtendBuildTime):
            extended.set()
        return mini(request)

    real_build = building.build_from_mutable

    def slow_build(*args: Any, **kwargs: Any) -> Any:
        assert extended.wait(10), "no extendBuildTime while the build was running"
        return real_build(*args, **kwargs)

    monkeypatch.setattr(building, "build_from_mutable", slow_build)
    config = ConsumerConfig(**{**FAST.__dict__, "lease_margin_seconds": 0.9, "extend_build_seconds": 5})
    fake = ScriptedController(script)
    with serving(fake) as service:
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=20), instance="s1", config=config,
                                               client=SegmentCompletionClient(config, leader_url=service.url)))
        finished(replica, ConsumerState.COMMITTED)
    sent = fake.of(K.EXTEND_BUILD_TIME)
    assert sent and sent[0].extra_seconds == 5 and sent[0].offset == 20
    assert fake.kinds().index(K.EXTEND_BUILD_TIME) < fake.kinds().index(K.SEGMENT_COMMIT_START)


def test_go_online_catches_up_and_uses_its_own_build_when_it_matches(tmp_path: Path, log_dir: Path,
                                                                     replicas: list[Replica]) -> None:
    produce(log_dir, range(80))
    mini = MiniController()

    def script(request: Any) -> Response:
        return mini(request) if request.instance == "s1" else hold(request.offset)

    with serving(ScriptedController(script)) as service:
        committer = start(replicas, make_replica(tmp_path, log_dir, record(rows=60), instance="s1",
                                                 client=SegmentCompletionClient(FAST, leader_url=service.url)))
        behind = make_replica(tmp_path, log_dir, record(rows=60), instance="s2",
                              client=SegmentCompletionClient(FAST, leader_url=service.url))
        behind.segment.set_paused(True)  # consumes nothing: it will be 60 rows behind
        start(replicas, behind)
        finished(committer, ConsumerState.COMMITTED)
        assert behind.segment.num_docs == 0
        online = behind.segment.go_online(mini.committed_record(record(rows=60)))
    assert online.crc == mini.commit_end.crc and online.total_docs == 60  # type: ignore[union-attr]
    assert behind.fetched == []


def test_go_online_downloads_when_its_copy_differs(tmp_path: Path, log_dir: Path, replicas: list[Replica]) -> None:
    produce(log_dir, range(30))
    theirs = build_segment(rows_table(30), schema(), table(log_dir).indexing, tmp_path / "committer", SEGMENT,
                           start_offset=0, end_offset=30)
    fake = ScriptedController(lambda request: Response(R.KEEP, request.offset))
    with serving(fake) as service:
        replica = start(replicas, make_replica(tmp_path, log_dir, record(rows=30), instance="s1",
                                               client=SegmentCompletionClient(FAST, leader_url=service.url),
                                               fetch=lambda committed: theirs))
        finished(replica, ConsumerState.RETAINED)
    committed = record(rows=30).committed(end_offset=30, total_docs=30, size_bytes=1, crc=theirs.crc + 1,
                                          download_uri="", now_ms=1)
    assert replica.segment.go_online(committed) is theirs
    assert replica.fetched == [committed]
    assert not (tmp_path / "s1" / SEGMENT).exists()  # the differing local copy is gone


class TrackedSlots(threading.BoundedSemaphore):
    """A build-slot semaphore that records how many builds held it at once. The first holder waits (bounded) until
    a second build asks for a slot, so without a cap the two builds would certainly overlap."""

    def __init__(self, value: int):
        super().__init__(value)
        self.holding = 0
        self.most = 0
        self.asked = threading.Event()
        self._count = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        if self.holding:
            self.asked.set()
        got = super().acquire(blocking, timeout)
        if got:
            with self._count:
                self.holding += 1
                self.most = max(self.most, self.holding)
            self.asked.wait(5)
            self.asked.set()  # (the second holder does not wait for a third)
        return got

    def release(self, n: int = 1) -> None:
        with self._count:
            self.holding -= 1
        super().release(n)


@pytest.mark.parametrize(("cap", "overlap"), [(1, 1), (2, 2)])
def test_the_servers_build_cap_serialises_builds(tmp_path: Path, log_dir: Path, replicas: list[Replica],
                                                 cap: int, overlap: int) -> None:
    produce(log_dir, range(150))
    slots = TrackedSlots(cap)
    fakes = [ScriptedController(MiniController()) for _ in range(2)]
    with serving(fakes[0]) as first, serving(fakes[1]) as second:
        made = [make_replica(tmp_path, log_dir, record(rows=100, name=name), instance="s1",
                             client=SegmentCompletionClient(FAST, leader_url=service.url), build_slots=slots)
                for name, service in ((SEGMENT, first), ("events__1__0__20261121T1647Z", second))]
        for replica in made:
            start(replicas, replica)
        for replica in made:
            finished(replica, ConsumerState.COMMITTED)
    assert slots.most == overlap and slots.holding == 0


def test_go_online_waits_for_a_build_slot_instead_of_downloading(tmp_path: Path, log_dir: Path,
                                                                  replicas: list[Replica]) -> None:
    """A replica still holding when its segment is committed builds its own copy in go_online; with the server's
    build slots all taken it waits for one (it used to give up at once, and download)."""
    produce(log_dir, range(150))
    mini = MiniController()
    slots = threading.BoundedSemaphore(1)
    with serving(ScriptedController(mini)) as committer_side, \
            serving(ScriptedController(lambda request: hold(request.offset))) as holding_side:
        committer = start(replicas, make_replica(tmp_path, log_dir, record(rows=100), instance="s1",
                                                 client=SegmentCompletionClient(FAST, leader_url=committer_side.url)))
        finished(committer, ConsumerState.COMMITTED)
        holder = start(replicas, make_replica(tmp_path, log_dir, record(rows=100), instance="s2",
                                              client=SegmentCompletionClient(FAST, leader_url=holding_side.url),
                                              build_slots=slots))
        wait_until(lambda: holder.segment.state is ConsumerState.HOLDING)
        assert slots.acquire(timeout=5)  # every build slot of the server is busy
        done: list[Any] = []
        worker = threading.Thread(target=lambda: done.append(
            holder.segment.go_online(mini.committed_record(record(rows=100)))))
        worker.start()
        worker.join(1.0)
        assert worker.is_alive() and not done  # waiting for the slot, not downloading
        slots.release()
        worker.join(30)
    [online] = done
    assert online.crc == mini.commit_end.crc and online.path == tmp_path / "s2" / SEGMENT  # its own build
    assert holder.fetched == []
