from __future__ import annotations

import threading

import pytest

from cuvee.cluster.errors import CommitConflictError, RecordExistsError, RecordNotFoundError, RequirementFailedError
from cuvee.cluster.records import CurrentState, IdealState, InstanceInfo, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.spi.metastore import MetadataStore

T = "events_REALTIME"
C = SegmentState.CONSUMING


def _record(name: str = "events__0__0__20261121T1647Z") -> SegmentRecord:
    return SegmentRecord(name, SegmentStatus.IN_PROGRESS, 1000, partition=0, sequence=0, start_offset=0, row_threshold=10)


def test_create_read_and_create_if_absent(cluster: ClusterStore) -> None:
    path = cluster.paths.segment(T, "s")
    assert cluster.find(SegmentRecord, path) is None
    with pytest.raises(RecordNotFoundError, match="no segment metadata at /cuvee/c1/segments/events_REALTIME/s"):
        cluster.read(SegmentRecord, path)
    created = cluster.create(path, _record())
    assert created.version == 0
    assert cluster.read(SegmentRecord, path) == created
    with pytest.raises(RecordExistsError):
        cluster.create(path, _record())
    again, made = cluster.create_if_absent(path, _record("other__0__0__20261121T1647Z"))
    assert not made and again.record == _record()


def test_update_writes_only_when_the_record_changes(cluster: ClusterStore) -> None:
    cluster.create_segment(T, _record())
    bumped = cluster.update_segment(T, _record().segment_name, lambda r: r.committed(
        end_offset=5, total_docs=5, size_bytes=1, crc=1, download_uri="", now_ms=2))
    assert bumped.version == 1 and bumped.record.status is SegmentStatus.DONE
    unchanged = cluster.update_segment(T, _record().segment_name, lambda r: r)
    assert unchanged.version == 1
    assert cluster.metastore.get(cluster.paths.segment(T, _record().segment_name)).version == 1


def test_update_of_a_missing_record_needs_an_initial_one(cluster: ClusterStore) -> None:
    with pytest.raises(RecordNotFoundError, match="to update"):
        cluster.update_segment(T, "nope", lambda r: r)
    made = cluster.update_ideal_state(T, lambda i: i.with_segments_in("s0", ["a"], C))
    assert made.version == 0
    assert cluster.ideal_state(T) == made


def test_failed_requirement_is_not_retried(cluster: ClusterStore) -> None:
    cluster.create_segment(T, _record())
    calls = []

    def refuse(record: SegmentRecord) -> SegmentRecord:
        calls.append(record)
        raise RequirementFailedError("no")

    with pytest.raises(RequirementFailedError):
        cluster.update_segment(T, _record().segment_name, refuse)
    assert len(calls) == 1


def test_retries_are_bounded_with_a_clear_error(metastore: MetadataStore) -> None:
    cluster = ClusterStore(metastore, "c1", max_attempts=3)
    path = cluster.paths.ideal_state(T)
    cluster.update_ideal_state(T, lambda i: i)
    attempts = []

    def meddle(ideal: IdealState) -> IdealState:
        attempts.append(1)
        metastore.set(path, IdealState(T, paused=len(attempts) % 2 == 1).encode())  # another writer gets in first
        return ideal.with_segments_in(f"s{len(attempts)}", ["a"], C)

    with pytest.raises(CommitConflictError, match="each of 3 attempts"):
        cluster.update_ideal_state(T, meddle)
    assert len(attempts) == 3


def test_put_overwrites_whatever_is_there(cluster: ClusterStore) -> None:
    state = CurrentState("a", T, {"s0": C})
    assert cluster.put_current_state(state).version == 0
    assert cluster.put_current_state(state.with_segment("s1", C)).version == 1
    assert cluster.current_state("a", T) == state.with_segment("s1", C)
    assert cluster.current_states(T, ["a", "b"]) == [state.with_segment("s1", C)]


def test_instances_and_live_ones(cluster: ClusterStore, metastore: MetadataStore) -> None:
    assert cluster.instances() == [] and cluster.live_instance_ids() == []
    a = InstanceInfo("a", "h", {"http": 1}, ("DefaultTenant_REALTIME",))
    cluster.register_instance(a)
    cluster.register_instance(InstanceInfo("b", "h"))
    metastore.create(cluster.paths.live("a"), ephemeral=True)
    assert [i.instance_id for i in cluster.instances()] == ["a", "b"]
    assert cluster.instance("a") == a
    assert cluster.live_instance_ids() == ["a"]


def test_concurrent_ideal_state_updates_lose_nothing(cluster: ClusterStore, metastore_uri: str) -> None:
    """Two threads, each on its own session, add 40 segments each to one ideal state node."""
    per_thread = 40
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def writer(tag: str) -> None:
        session = open_metastore(metastore_uri)
        try:
            mine = ClusterStore(session, "c1", max_attempts=1000)
            barrier.wait()
            for i in range(per_thread):
                mine.update_ideal_state(T, lambda ideal, i=i: ideal.with_segments_in(f"{tag}{i}", [tag], C))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            session.close()

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    final = cluster.ideal_state(T)
    assert final is not None
    assert sorted(final.record.segments) == sorted(f"{t}{i}" for t in "ab" for i in range(per_thread))
    assert final.record.consuming_counts() == {"a": per_thread, "b": per_thread}
    assert final.version == 2 * per_thread - 1


def test_a_lost_race_is_retried_on_the_new_base(cluster: ClusterStore, metastore_uri: str) -> None:
    """Both writers read the same base before either writes: exactly one loses the CAS and re-applies."""
    cluster.update_ideal_state(T, lambda i: i)
    both_read = threading.Barrier(2, timeout=10)
    calls: dict[str, int] = {"a": 0, "b": 0}

    def writer(tag: str) -> None:
        session = open_metastore(metastore_uri)
        try:

            def add(ideal: IdealState) -> IdealState:
                calls[tag] += 1
                if calls[tag] == 1:
                    both_read.wait()
                return ideal.with_segments_in(tag, [tag], C)

            ClusterStore(session, "c1").update_ideal_state(T, add)
        finally:
            session.close()

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    final = cluster.ideal_state(T)
    assert final is not None and sorted(final.record.segments) == ["a", "b"]
    assert sorted(calls.values()) == [1, 2]
    assert final.version == 2
