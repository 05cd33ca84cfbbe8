"""In-process cluster: a real Controller and two real Servers (real ConsumingSegments) on a sqlite metastore, an
embedded-log topic and a local deep store. Rows produced to a 2-replica realtime table with a small row threshold
commit: DONE metadata, segments ONLINE in the ideal state and external view, equal CRCs on both servers,
archives in the deep store, and every produced row served exactly once by each server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from cuvee.cluster.records import SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, ControllerConfig
from cuvee.controller.config import CompletionTiming
from cuvee.deepstore import open_deepstore
from cuvee.metastore import open_metastore
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.server.queryable import CommittedSegment
from cuvee.server.server import Server
from cuvee.stream.log import LogAdmin, LogProducer

from tests.server.server_helpers import CLUSTER, FAST_META, SCHEMA_DOC, TABLE, server_config, table_doc, wait_until

PARTITIONS = 2
PER_PARTITION = 120  # threshold 100 rows / 2 consuming segments per server = 50: two commits per partition
FAST_CONSUMER = ConsumerConfig(fetch_max_messages=200, fetch_max_wait_seconds=0.05, hold_retry_seconds=0.1,
                               not_leader_retry_seconds=0.05, controller_timeout_seconds=5,
                               download_retry_initial_seconds=0.05, download_retry_max_seconds=0.5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Controller, list[Server], ClusterStore]]:
    stream_dir = tmp_path / "stream"
    LogAdmin(str(stream_dir)).create_topic("events", PARTITIONS)
    meta_uri = f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}"
    timing = CompletionTiming(hold_seconds=0.2, commit_lease_seconds=10, max_commit_seconds=30,
                              max_segment_completion_seconds=30)
    controller = Controller(ControllerConfig(metadata=meta_uri, cluster=CLUSTER, deep_store=f"file://{tmp_path / 'deep'}",
                                             completion=timing, external_view_interval_seconds=0.1)).start()
    servers: list[Server] = []
    meta = open_metastore(meta_uri)
    try:
        wait_until(lambda: controller.is_leader)
        for name in ("s1", "s2"):
            servers.append(Server(server_config(tmp_path, name, consumer=FAST_CONSUMER), extra_routers=()).start())
        assert httpx.post(controller.url + "/schemas", json=SCHEMA_DOC).status_code < 300
        doc = table_doc(str(stream_dir), rows=100, replicas=2)
        doc["tableName"] = "events"
        created = httpx.post(controller.url + "/tables", json=doc)
        assert created.status_code < 300, created.text
        yield controller, servers, ClusterStore(meta, CLUSTER)
    finally:
        for server in servers:
            server.stop()
        controller.stop()
        meta.close()


def produce(stream_dir: Path) -> None:
    with LogProducer(str(stream_dir), "events") as producer:
        for partition in range(PARTITIONS):
            for i in range(PER_PARTITION):
                n = partition * 1000 + i
                event = {"id": n, "country": ["fr", "us"][n % 2], "clicks": n % 5, "ts": 1_700_000_000_000 + n}
                producer.produce(orjson.dumps(event), partition=partition)
        producer.flush()


def test_two_replicas_commit_identical_segments(tmp_path: Path, cluster: tuple[Controller, list[Server], ClusterStore]) -> None:
    controller, servers, store = cluster
    produce(tmp_path / "stream")
    deep = open_deepstore(f"file://{tmp_path / 'deep'}")

    def committed() -> list[str]:
        names = [n for n in store.segment_names(TABLE) if LLCSegmentName.parse(n).sequence < 2]
        return names if len(names) == 2 * PARTITIONS else []

    def all_online() -> bool:
        names = committed()
        ideal = store.ideal_state(TABLE)
        view = store.external_view(TABLE)
        if not names or ideal is None or view is None:
            return False
        for name in names:
            if store.segment(TABLE, name).record.status is not SegmentStatus.DONE:
                return False
            if set(ideal.record.segments.get(name, {}).values()) != {SegmentState.ONLINE}:
                return False
            if view.instances_in(name, SegmentState.ONLINE) != ("s1", "s2"):
                return False
        return True

    wait_until(all_online, timeout=60, message=lambda: f"ideal={store.ideal_state(TABLE)} view={store.external_view(TABLE)}")
    for name in committed():
        record = store.segment(TABLE, name).record
        assert record.total_docs == 50 and record.end_offset == record.start_offset + 50
        crcs = set()
        for server in servers:
            held = wait_until(lambda: server.registry.get(TABLE, name))
            assert isinstance(held, CommittedSegment)
            crcs.add(held.crc)
        assert crcs == {record.crc}
        if record.download_uri:  # the committer uploaded it (deep-store bypass only on upload failure)
            assert deep.exists(deep.key_of(record.download_uri))
        assert deep.exists(f"{TABLE}/{name}.tar.zst")

    def served_rows(server: Server) -> int:
        return sum(segment.num_docs for segment in server.registry.segments(TABLE))

    for server in servers:  # committed 2 x 50 + consuming 20 per partition: every row once
        wait_until(lambda: served_rows(server) == PARTITIONS * PER_PARTITION,
                   message=lambda: f"{server.instance_id} serves {served_rows(server)} rows")
        ids = sorted(i for s in server.registry.segments(TABLE) for i in s.to_arrow().column("id").to_pylist())
        assert ids == sorted(p * 1000 + i for p in range(PARTITIONS) for i in range(PER_PARTITION))
