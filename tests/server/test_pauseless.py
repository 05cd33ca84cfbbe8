"""Pauseless consumption on the server: a segment whose metadata is COMMITTING (its end offset fixed, the next
segment already consuming from there) is consumed to exactly that end offset and reported there; it can be started
like an IN_PROGRESS one but not committed nor downloaded; and a partition's next segment starts while the previous
one is still CONSUMING."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cuvee.cluster.records import SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.protocol.completion import Request, RequestKind, Response, ResponseStatus, StopReason, hold
from cuvee.server.consuming import ConsumerConfig, ConsumerState, SegmentCompletionClient
from cuvee.server.handlers import TransitionError
from cuvee.server.server import Server
from cuvee.stream import open_admin
from cuvee.stream.log import TopicSettings
from tests.server.server_helpers import (
    TABLE, ScriptedConsuming, build, server_config, set_ideal,
)
from tests.server.test_consuming_support import (
    FAST, TOPIC, ScriptedController, make_replica, produce, record, serving, stream_configs, wait_until,
)

K = RequestKind
S = SegmentState
SEG = "events__0__0__20260101T0000Z"
NEXT = "events__0__1__20260101T0100Z"
OTHER = "events__1__0__20260101T0000Z"


# ---- ConsumingSegment: a COMMITTING record is consumed to exactly its end offset ----------------------------


def committing(start: int, end: int, rows: int) -> SegmentRecord:
    return record(start=start, rows=rows).committing(end_offset=end, now_ms=1)


@contextmanager
def controller(script: Callable[[Request], Response],
               config: ConsumerConfig = FAST) -> Iterator[tuple[ScriptedController, SegmentCompletionClient]]:
    fake = ScriptedController(script)
    with serving(fake) as service:
        client = SegmentCompletionClient(config, leader_url=service.url)
        try:
            yield fake, client
        finally:
            client.close()


def consumed(fake: ScriptedController, count: int = 1) -> list:
    return wait_until(lambda: (sent := fake.of(K.SEGMENT_CONSUMED)) and len(sent) >= count and sent,
                      message=f"fewer than {count} segmentConsumed")


@pytest.mark.parametrize("row_threshold", [100, 50], ids=["below-row-limit", "past-row-limit"])
def test_a_committing_segment_consumes_exactly_to_its_end_offset(tmp_path: Path, log_dir: Path, replicas,
                                                                 row_threshold: int) -> None:
    """Rows 10..79 whatever the row threshold says (and whatever pause or force commit ask): the next segment
    starts at 80, so one row more would be read twice."""
    produce(log_dir, range(250))
    with controller(lambda request: hold(request.offset)) as (fake, client):
        replica = make_replica(tmp_path, log_dir, committing(10, 80, row_threshold), instance="s1", client=client)
        replicas.append(replica)
        replica.segment.set_paused(True)
        replica.segment.force_commit()
        replica.segment.start()
        first, second = consumed(fake, 2)[:2]  # the second one comes after a HOLD: nothing was consumed meanwhile
        assert (first.offset, first.rows, first.reason) == (80, 70, StopReason.ROW_LIMIT)
        assert (second.offset, second.rows) == (80, 70)
        assert replica.segment.state is ConsumerState.HOLDING
        assert replica.segment.snapshot().column("id").to_pylist() == list(range(10, 80))
        assert replica.segment.info()["currentOffset"] == 80
        replica.segment.stop()


def test_a_timed_out_catch_up_reports_where_it_stopped_and_catch_up_finishes_it(tmp_path: Path, log_dir: Path,
                                                                                replicas) -> None:
    """The stream has only part of the range: segmentConsumed at that offset; the controller's CATCH_UP then
    consumes the rest once it is there, and never a row past the end."""
    produce(log_dir, range(40))

    def script(request: Request) -> Response:
        return Response(ResponseStatus.CATCH_UP, 70) if request.offset < 70 else hold(request.offset)

    config = dataclasses.replace(FAST, catch_up_timeout_seconds=0.3)
    with controller(script, config) as (fake, client):
        replica = make_replica(tmp_path, log_dir, committing(0, 70, 100), instance="s1", client=client,
                               config=config)
        replicas.append(replica)
        replica.segment.start()
        (first,) = consumed(fake)[:1]
        assert first.offset < 70 and first.rows == first.offset and first.reason is StopReason.TIME_LIMIT
        produce(log_dir, range(40, 250))
        wait_until(lambda: any(r.offset == 70 for r in fake.of(K.SEGMENT_CONSUMED)), message="no report at 70")
        assert all(r.offset <= 70 for r in fake.of(K.SEGMENT_CONSUMED))
        assert replica.segment.snapshot().column("id").to_pylist() == list(range(70))
        replica.segment.stop()


def test_a_committing_record_needs_an_end_offset(tmp_path: Path, log_dir: Path) -> None:
    broken = dataclasses.replace(record(), status=SegmentStatus.COMMITTING, end_offset=None)
    with pytest.raises(ValueError, match="COMMITTING without a valid end offset"):
        make_replica(tmp_path, log_dir, broken, instance="s1", client=None)  # type: ignore[arg-type]


# ---- the server shell: COMMITTING is consumable, not committable -------------------------------------------


@pytest.fixture
def made() -> list[ScriptedConsuming]:
    return []


@pytest.fixture
def server(tmp_path: Path, made: list[ScriptedConsuming]) -> Iterator[Server]:
    builds = {SEG: lambda rec: build(tmp_path / "s1" / TABLE, SEG, 20)}

    def factory(table: str, rec: SegmentRecord) -> ScriptedConsuming:
        consuming = ScriptedConsuming(table, rec, builds)
        made.append(consuming)
        return consuming

    server = Server(server_config(tmp_path, "s1"), extra_routers=(), make_consuming=factory).start()
    yield server
    server.stop()


def put_committing(store: ClusterStore, name: str = SEG, partition: int = 0) -> None:
    rec = SegmentRecord(name, SegmentStatus.IN_PROGRESS, 1, partition=partition, sequence=0, start_offset=0,
                        row_threshold=20)
    store.put(store.paths.segment(TABLE, name), rec.committing(end_offset=20, now_ms=2))


def put_next(store: ClusterStore) -> None:
    store.put(store.paths.segment(TABLE, NEXT), SegmentRecord(NEXT, SegmentStatus.IN_PROGRESS, 2, partition=0,
                                                                sequence=1, start_offset=20, row_threshold=20))


def state_of(store: ClusterStore, segment: str) -> S | None:
    current = store.current_state("s1", TABLE)
    return current.segments.get(segment) if current else None


def test_the_next_segment_consumes_while_the_committing_one_is_still_consuming(
        tmp_path: Path, store: ClusterStore, server: Server, made: list[ScriptedConsuming]) -> None:
    """Both CONSUMING at once (a restart mid-commit: N COMMITTING, N+1 IN_PROGRESS); N then goes ONLINE from its
    own consumer once committed, and N+1 is left consuming."""
    put_committing(store)
    put_next(store)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}, NEXT: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, SEG) is S.CONSUMING and state_of(store, NEXT) is S.CONSUMING)
    by_name = {c.name: c for c in made}
    assert by_name[SEG].record.status is SegmentStatus.COMMITTING and by_name[SEG].record.end_offset == 20
    assert by_name[SEG].calls == ["start"] and by_name[NEXT].calls == ["start"]
    assert set(server.registry.names(TABLE)) == {SEG, NEXT}

    crc = build(tmp_path / "other", SEG, 20).crc
    store.update_segment(TABLE, SEG, lambda r: r.committed(end_offset=20, total_docs=20, size_bytes=1, crc=crc,
                                                            download_uri="", now_ms=3))
    set_ideal(store, {SEG: {"s1": S.ONLINE}, NEXT: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, SEG) is S.ONLINE)
    assert by_name[SEG].calls == ["start", "go_online", "stop"]
    assert by_name[NEXT].calls == ["start"] and state_of(store, NEXT) is S.CONSUMING
    assert len(made) == 2


def test_a_committing_segment_is_not_taken_online(store: ClusterStore, server: Server,
                                                  made: list[ScriptedConsuming]) -> None:
    """COMMITTING has no CRC nor download URI yet: CONSUMING→ONLINE fails (ERROR) without go_online."""
    put_committing(store)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, SEG) is S.CONSUMING)
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store, SEG) is S.ERROR)
    assert made[0].calls == ["start"]
    with pytest.raises(TransitionError, match="still COMMITTING"):
        server.transitions._commit(TABLE, SEG)


def test_a_committing_segment_is_not_downloaded(store: ClusterStore, server: Server) -> None:
    put_committing(store, OTHER, partition=1)
    with pytest.raises(TransitionError, match=r"not committed yet \(COMMITTING\)"):
        server.transitions._download(TABLE, OTHER)
    assert server.registry.names(TABLE) == []


# ---- the cap: a segment still consuming ends where its successor starts ------------------------------------


def test_starting_the_next_segment_caps_the_one_still_consuming(store: ClusterStore, server: Server,
                                                                 made: list[ScriptedConsuming]) -> None:
    put_committing(store)
    store.update_segment(TABLE, SEG, lambda r: dataclasses.replace(r, status=SegmentStatus.IN_PROGRESS,
                                                                   end_offset=None))
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, SEG) is S.CONSUMING)
    put_next(store)  # the commit start placed the next segment, from offset 20
    set_ideal(store, {SEG: {"s1": S.CONSUMING}, NEXT: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, NEXT) is S.CONSUMING)
    by_name = {c.name: c for c in made}
    assert by_name[SEG].capped_at == 20 and by_name[NEXT].capped_at is None


def test_a_replica_past_the_cap_serves_only_the_rows_below_it_and_stops(tmp_path: Path, log_dir: Path,
                                                                         replicas) -> None:
    """It consumed to 100 (a later time limit than the committer's); the next segment starts at 60 here: queries
    must see rows 0..59 only, or they would count 60..99 twice. It reports where it is (past the end: DISCARD)."""
    produce(log_dir, range(100))
    with controller(lambda request: hold(request.offset)) as (fake, client):
        replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client)
        replicas.append(replica)
        replica.segment.start()
        wait_until(lambda: replica.segment.num_docs == 100)
        replica.segment.cap(60)
        assert replica.segment.num_docs == 60
        assert replica.segment.snapshot().column("id").to_pylist() == list(range(60))
        assert replica.segment.encoded_snapshot().num_rows == 60
        (first,) = consumed(fake)[:1]
        assert (first.offset, first.reason) == (100, StopReason.TIME_LIMIT)
        produce(log_dir, range(100, 150))
        assert replica.segment.num_docs == 60 and replica.segment.info()["currentOffset"] == 100


def test_a_capped_replica_counts_a_batch_as_soon_as_it_is_published(tmp_path: Path, log_dir: Path,
                                                                     replicas) -> None:
    """Under a cap, readers count the rows they may see by the rows' offsets: those must be recorded before the
    rows are published, or a published batch is invisible for a moment (an upsert table's newest versions among
    it: keys missing from a query, seen once in CI as 54 of 80 keys)."""
    produce(log_dir, range(30))
    with controller(lambda request: hold(request.offset)) as (fake, client):
        replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client)
        replicas.append(replica)
        seen: list[tuple[int, int]] = []

        def check_after_publish(rows, first_doc: int, publish: Callable[[], None]) -> None:
            publish()
            seen.append((replica.segment.num_docs, first_doc + rows.num_rows))

        replica.segment._consumer.before_publish = check_after_publish  # the hook an upsert table installs
        replica.segment.cap(50)
        replica.segment.start()
        wait_until(lambda: replica.segment.num_docs == 30)
        produce(log_dir, range(30, 90))
        consumed(fake)
        assert seen and all(visible == published for visible, published in seen), seen
        assert replica.segment.num_docs == 50


def test_a_replica_before_the_cap_stops_exactly_at_it(tmp_path: Path, log_dir: Path, replicas) -> None:
    produce(log_dir, range(30))
    with controller(lambda request: hold(request.offset)) as (fake, client):
        replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client)
        replicas.append(replica)
        replica.segment.start()
        wait_until(lambda: replica.segment.num_docs == 30)
        replica.segment.cap(50)
        produce(log_dir, range(30, 90))
        (first,) = consumed(fake)[:1]
        assert (first.offset, first.rows, first.reason) == (50, 50, StopReason.ROW_LIMIT)
        assert replica.segment.snapshot().column("id").to_pylist() == list(range(50))


def test_a_committing_segment_whose_range_retention_removed_ends_at_its_offset_and_reports_the_loss(
        tmp_path: Path, log_dir: Path, replicas) -> None:
    """Nobody can read offsets 10..79 any more (the committer died, retention moved past the end): the replica
    reports the fixed end with its loss, so the controller can commit what exists instead of leaving the segment
    unavailable to queries for good."""
    admin = open_admin(stream_configs(log_dir))
    admin.configure_topic(TOPIC, TopicSettings(segment_bytes=2000, retention_bytes=2000))
    for start in range(0, 300, 20):
        produce(log_dir, range(start, start + 20))
    assert admin.apply_retention(TOPIC)[0] > 80
    with controller(lambda request: hold(request.offset)) as (fake, client):
        replica = make_replica(tmp_path, log_dir, committing(10, 80, 100), instance="s1", client=client)
        replicas.append(replica)
        replica.segment.start()
        (first,) = consumed(fake)[:1]
        assert (first.offset, first.rows, first.reason) == (80, 0, StopReason.ROW_LIMIT)
        assert first.lossy and first.messages_lost > 70
        assert replica.segment.state is ConsumerState.HOLDING


def test_a_catch_up_past_which_retention_removed_everything_ends_at_its_target_and_reports_the_loss(
        tmp_path: Path, log_dir: Path, replicas) -> None:
    """Told CATCH_UP to 80 (a complete replica committed there), but retention removed offsets up to past 80:
    the replica ends at exactly 80 with what it has and says it lost messages (never an offset past the end)."""
    produce(log_dir, range(20))
    admin = open_admin(stream_configs(log_dir))
    admin.configure_topic(TOPIC, TopicSettings(segment_bytes=2000, retention_bytes=2000))

    def script(request: Request) -> Response:
        if request.offset < 80 and not any(r.offset == 80 for r in fake.of(K.SEGMENT_CONSUMED)):
            for start in range(20, 300, 20):  # the stream moves on and retention removes 20..80 meanwhile
                produce(log_dir, range(start, start + 20))
            assert admin.apply_retention(TOPIC)[0] > 80
            return Response(ResponseStatus.CATCH_UP, 80)
        return hold(request.offset)

    with controller(script) as (fake, client):
        replica = make_replica(tmp_path, log_dir, record(rows=20), instance="s1", client=client)
        replicas.append(replica)
        replica.segment.start()
        reports = consumed(fake, 2)
        assert (reports[0].offset, reports[0].rows) == (20, 20) and not reports[0].lossy
        assert (reports[1].offset, reports[1].rows) == (80, 20) and reports[1].lossy
        assert all(r.offset <= 80 for r in fake.of(K.SEGMENT_CONSUMED))


def test_a_segment_started_after_its_successor_is_capped_at_the_successors_start(
        store: ClusterStore, server: Server, made: list[ScriptedConsuming]) -> None:
    put_committing(store)
    store.update_segment(TABLE, SEG, lambda r: dataclasses.replace(r, status=SegmentStatus.IN_PROGRESS,
                                                                   end_offset=None))
    put_next(store)
    set_ideal(store, {NEXT: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, NEXT) is S.CONSUMING)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}, NEXT: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, SEG) is S.CONSUMING)
    assert {c.name: c for c in made}[SEG].capped_at == 20
