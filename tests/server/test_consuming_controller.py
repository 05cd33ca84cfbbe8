"""Two ConsumingSegments against the REAL controller (in-process, sqlite metastore, embedded log): the leader is
found through the election node, one replica commits (upload, metadata DONE), the other KEEPs an identical copy,
and both go online with their own builds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cuvee.cluster.records import InstanceInfo, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller import Controller, ControllerConfig
from cuvee.controller.config import CompletionTiming
from cuvee.metastore import open_metastore
from cuvee.server.consuming import ConsumerState, SegmentCompletionClient
from cuvee.segment.archive import deep_store_key
from tests.server.test_consuming_support import (
    FAST,
    SCHEMA_DOC,
    TABLE,
    Replica,
    create_topic,
    make_replica,
    produce,
    stream_configs,
    wait_until,
)

CLUSTER = "ctest"
META_OPTIONS = "session_timeout=3&heartbeat_interval=0.1&poll_interval=0.02"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Controller, ClusterStore]]:
    uri = f"sqlite://{tmp_path / 'meta.db'}?{META_OPTIONS}"
    timing = CompletionTiming(hold_seconds=0.3, commit_lease_seconds=10, max_commit_seconds=30,
                              max_segment_completion_seconds=30)
    (tmp_path / "deep").mkdir()
    controller = Controller(ControllerConfig(metadata=uri, cluster=CLUSTER, completion=timing,
                                             deep_store=f"file://{tmp_path / 'deep'}",  # the replicas' (make_replica)
                                             external_view_interval_seconds=0.2, server_timeout_seconds=3)).start()
    meta = open_metastore(uri)
    store = ClusterStore(meta, CLUSTER)
    try:
        wait_until(lambda: controller.is_leader, message="the controller never led")
        for sid in ("Server_0", "Server_1"):
            store.register_instance(InstanceInfo(sid, "127.0.0.1", {}, ("DefaultTenant_REALTIME",)))
            meta.create(store.paths.live(sid), b"", ephemeral=True)
        yield controller, store
    finally:
        meta.close()
        controller.stop()


def _post_as_leader(url: str, body: dict) -> httpx.Response:
    """POST, again while the controller answers 503: with this test's 0.1 s heartbeats a loaded machine can make the
    session SUSPENDED for a moment, and the controller gives up leadership until it is CONNECTED again."""
    replies: list[httpx.Response] = []
    wait_until(lambda: replies.append(httpx.post(url, json=body, timeout=30)) or replies[-1].status_code != 503,
               message=lambda: f"{url} kept answering 503: {replies[-1].text}")
    return replies[-1]


def test_two_replicas_commit_and_keep_through_the_real_controller(tmp_path: Path, cluster) -> None:
    controller, store = cluster
    log_dir = tmp_path / "log"
    create_topic(log_dir)
    produce(log_dir, range(250))
    doc = {"tableName": "events", "tableType": "REALTIME",
           "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "2"},
           "tenants": {"server": "DefaultTenant"},
           "tableIndexConfig": {"invertedIndexColumns": ["country"], "streamConfigs": stream_configs(
               log_dir, **{"realtime.segment.flush.threshold.rows": "100",
                           "stream.log.consumer.prop.auto.offset.reset": "smallest"})}}
    assert _post_as_leader(controller.url + "/schemas", SCHEMA_DOC).status_code == 200
    reply = _post_as_leader(controller.url + "/tables", doc)
    assert reply.status_code == 200, reply.text
    ideal = store.ideal_state(TABLE)
    assert ideal is not None
    (name,) = ideal.record.segments
    record = store.segment(TABLE, name).record
    assert (record.start_offset, record.row_threshold) == (0, 100)
    table = TableConfig.from_json(doc)

    replicas: list[Replica] = []
    try:
        for sid in sorted(ideal.record.segments[name]):
            client = SegmentCompletionClient.for_cluster(FAST, store.metastore, CLUSTER)
            replica = make_replica(tmp_path, log_dir, record, instance=sid, client=client, table_config=table)
            replicas.append(replica)
            replica.segment.start()
        states = {wait_until(lambda r=r: r.segment.state.terminal and r.segment.state) for r in replicas}
        assert states == {ConsumerState.COMMITTED, ConsumerState.RETAINED}, [r.segment.story() for r in replicas]

        done = wait_until(lambda: (v := store.segment(TABLE, name).record).status is SegmentStatus.DONE and v)
        assert done.end_offset == 100 and done.total_docs == 100
        key = deep_store_key(TABLE, name)
        assert done.download_uri == replicas[0].deep_store.uri(key) and replicas[0].deep_store.exists(key)
        assert replicas[0].deep_store.list(f"{TABLE}/uploads/") == []  # the commit moved the upload into place
        online = [r.segment.go_online(done) for r in replicas]
        assert [s.crc for s in online] == [done.crc, done.crc]
        assert all(r.fetched == [] for r in replicas)
        assert all(r.client.leader_url == controller.url for r in replicas)

        after = store.ideal_state(TABLE)
        assert after is not None
        assert set(after.record.segments[name].values()) == {SegmentState.ONLINE}
        following = [s for s in after.record.segments if s != name]
        assert len(following) == 1 and store.segment(TABLE, following[0]).record.start_offset == 100
    finally:
        for replica in replicas:
            replica.segment.stop()
            replica.client.close()
