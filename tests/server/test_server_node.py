"""The server shell against a real sqlite metastore and local deep store, with a scripted consumer standing in
for ConsumingSegment: registration, transitions, swaps, downloads (deep store and peer, with backoff), restart,
drop, ERROR, and the HTTP endpoints."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cuvee.cluster.records import ExternalView, InstanceInfo, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.segment.archive import unpack
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.server import Server
from cuvee.server.transitions import Transition
from cuvee.spi.deepstore import DeepStore

from tests.server.server_helpers import (
    TABLE, ScriptedConsuming, build, commit_segment, server_config, set_ideal, wait_until,
)

S = SegmentState
SEG = "events__0__0__20260101T0000Z"
NEXT = "events__0__1__20260101T0100Z"


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def start(servers: list[Server], tmp: Path, name: str, consumers: dict | None = None, **overrides: object) -> Server:
    builds = (consumers or {}).get("builds", {})
    made = (consumers or {}).setdefault("made", []) if consumers is not None else []

    def factory(table: str, record: SegmentRecord) -> ScriptedConsuming:
        consuming = ScriptedConsuming(table, record, builds)
        made.append(consuming)
        return consuming

    server = Server(server_config(tmp, name, **overrides), extra_routers=(), make_consuming=factory)
    servers.append(server)
    return server.start()


def state_of(store: ClusterStore, instance: str, segment: str) -> S | None:
    current = store.current_state(instance, TABLE)
    return current.segments.get(segment) if current else None


def test_start_registers_and_stop_leaves(tmp_path: Path, store: ClusterStore, servers: list[Server]) -> None:
    server = start(servers, tmp_path, "s1")
    info = store.instance("s1")
    assert info == InstanceInfo("s1", "127.0.0.1", {"http": int(server.url.rsplit(":", 1)[1])},
                                ("DefaultTenant_REALTIME", "DefaultTenant_OFFLINE"))
    assert "s1" in store.live_instance_ids()
    assert httpx.get(server.url + "/health").json() == {"status": "OK", "instanceId": "s1"}
    server.stop()
    assert "s1" not in store.live_instance_ids()


def test_default_instance_id_names_the_bound_port(tmp_path: Path, store: ClusterStore, servers: list[Server]) -> None:
    server = start(servers, tmp_path, "sx", instance_id="")
    assert server.instance_id == f"Server_127.0.0.1_{server.url.rsplit(':', 1)[1]}"
    assert store.instance(server.instance_id).tags == ("DefaultTenant_REALTIME", "DefaultTenant_OFFLINE")


def test_offline_to_online_downloads_from_the_deep_store_and_serves_the_archive(
    tmp_path: Path, store: ClusterStore, deep: DeepStore, servers: list[Server]
) -> None:
    record = commit_segment(store, deep, tmp_path / "work", SEG, 50)
    server = start(servers, tmp_path, "s1")
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store, "s1", SEG) is S.ONLINE)
    held = server.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == record.crc and held.to_arrow().num_rows == 50
    response = httpx.get(f"{server.url}/tables/{TABLE}/segments/{SEG}")
    assert response.status_code == 200
    (tmp_path / "got.tar.gz").write_bytes(response.content)
    assert ImmutableSegment.load(unpack(tmp_path / "got.tar.gz", tmp_path / "unpacked")).crc == record.crc
    listing = httpx.get(f"{server.url}/tables/{TABLE}/segments").json()
    assert listing["segments"] == [{"segmentName": SEG, "isConsuming": False, "numDocs": 50, "crc": record.crc}]
    assert listing["currentState"] == {SEG: "ONLINE"}


def test_peer_download_retries_with_backoff_until_a_peer_is_online(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    """Deep-store bypass: no download URI; s2 retries until the external view shows s1 ONLINE, then fetches
    the archive from s1 and verifies its CRC."""
    record = commit_segment(store, None, tmp_path / "work", SEG, 40, upload=False)
    shutil.copytree(tmp_path / "work" / SEG, tmp_path / "s1" / TABLE / SEG)  # s1 built it itself
    set_ideal(store, {SEG: {"s1": S.ONLINE, "s2": S.ONLINE}})
    s1 = start(servers, tmp_path, "s1")
    assert state_of(store, "s1", SEG) is S.ONLINE  # loaded from local disk at start
    s2 = start(servers, tmp_path, "s2", download_max_attempts=40, download_retry_max_seconds=0.1)
    wait_until(lambda: s2.fetcher.failed_attempts >= 2)
    assert state_of(store, "s2", SEG) is None  # still retrying: nobody to download from yet
    store.put_external_view(ExternalView(TABLE, {SEG: {"s1": S.ONLINE}}))
    wait_until(lambda: state_of(store, "s2", SEG) is S.ONLINE)
    held = s2.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == record.crc == s1.registry.get(TABLE, SEG).crc


def test_download_fails_into_error_then_drop_cleans_up(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    commit_segment(store, None, tmp_path / "work", SEG, 10, upload=False)
    server = start(servers, tmp_path, "s1", download_max_attempts=2, error_retry_initial_seconds=600.0)
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store, "s1", SEG) is S.ERROR)
    assert server.registry.get(TABLE, SEG) is None
    reconciles = server._follower.reconciles  # type: ignore[union-attr]
    server.wake()
    wait_until(lambda: server._follower.reconciles > reconciles + 1)  # type: ignore[union-attr]
    assert state_of(store, "s1", SEG) is S.ERROR  # no hot retry: the next one waits for the backoff
    set_ideal(store, {})
    wait_until(lambda: state_of(store, "s1", SEG) is None)


def test_restart_serves_local_segments_and_redownloads_a_corrupt_one(
    tmp_path: Path, store: ClusterStore, deep: DeepStore, servers: list[Server]
) -> None:
    record = commit_segment(store, deep, tmp_path / "work", SEG, 30)
    server = start(servers, tmp_path, "s1")
    set_ideal(store, {SEG: {"s1": S.ONLINE}})
    wait_until(lambda: state_of(store, "s1", SEG) is S.ONLINE)
    server.stop()
    assert store.current_state("s1", TABLE) is not None
    deep_key = f"{TABLE}/{SEG}.tar.gz"
    archive = tmp_path / "kept.tar.gz"
    deep.get(deep_key, archive)
    deep.delete(deep_key)  # a restart must not need the deep store for an intact local copy

    again = start(servers, tmp_path, "s1")
    assert state_of(store, "s1", SEG) is S.ONLINE
    assert again.registry.get(TABLE, SEG).crc == record.crc  # type: ignore[union-attr]
    again.stop()

    forward = next(p for p in (tmp_path / "s1" / TABLE / SEG).iterdir() if p.name != "metadata.json")
    data = bytearray(forward.read_bytes())
    data[-1] ^= 0xFF
    forward.write_bytes(bytes(data))
    deep.put(archive, deep_key)
    third = start(servers, tmp_path, "s1")
    wait_until(lambda: state_of(store, "s1", SEG) is S.ONLINE)
    held = third.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == record.crc
    held.segment.verify_crc()  # the corrupt copy was replaced by a good one


def test_local_segments_without_done_metadata_are_deleted_at_start(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    build(tmp_path / "s1" / TABLE, "events__9__0__20260101T0000Z", 5)  # no metadata for it
    server = start(servers, tmp_path, "s1")
    assert server.registry.names(TABLE) == []
    assert not (tmp_path / "s1" / TABLE / "events__9__0__20260101T0000Z").exists()


def test_consuming_lifecycle_endpoints_swap_and_drop(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    store.put(store.paths.segment(TABLE, SEG),
              SegmentRecord(SEG, SegmentStatus.IN_PROGRESS, 1, partition=0, sequence=0, start_offset=0,
                            row_threshold=20))
    consumers: dict = {"builds": {SEG: lambda rec: build(tmp_path / "s1" / TABLE, SEG, 20)}}
    server = start(servers, tmp_path, "s1", consumers)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, "s1", SEG) is S.CONSUMING)
    (consuming,) = consumers["made"]
    assert consuming.calls == ["start"]
    assert isinstance(server.registry.get(TABLE, SEG), ConsumingView)

    info = httpx.get(f"{server.url}/tables/{TABLE}/consumingSegmentsInfo").json()
    assert [s["segmentName"] for s in info["segments"]] == [SEG]
    bad = httpx.get(f"{server.url}/tables/{TABLE}/badRecords").json()
    assert bad == {"segments": [{"segmentName": SEG, "badRecords": 1,
                                 "recentBadRecords": [{"offset": 1, "error": "not JSON"}]}]}
    forced = httpx.post(f"{server.url}/tables/{TABLE}/forceCommit", json={"segments": [SEG, "nope"]}).json()
    assert forced == {"forceCommitted": [SEG], "notConsuming": ["nope"]}
    assert consuming.calls[-1] == "force_commit"

    set_ideal(store, {SEG: {"s1": S.CONSUMING}}, paused=True)
    wait_until(lambda: "paused=True" in consuming.calls)

    # commit: DONE metadata, then the ideal state flips; go_online's build is swapped in, the consumer stopped
    built_crc = build(tmp_path / "other", SEG, 20).crc
    store.update_segment(TABLE, SEG, lambda r: r.committed(end_offset=20, total_docs=20, size_bytes=1, crc=built_crc,
                                                            download_uri="", now_ms=2))
    store.put(store.paths.segment(TABLE, NEXT),
              SegmentRecord(NEXT, SegmentStatus.IN_PROGRESS, 2, partition=0, sequence=1, start_offset=20,
                            row_threshold=20))
    set_ideal(store, {SEG: {"s1": S.ONLINE}, NEXT: {"s1": S.CONSUMING}}, paused=True)
    wait_until(lambda: state_of(store, "s1", NEXT) is S.CONSUMING and state_of(store, "s1", SEG) is S.ONLINE)
    assert consuming.calls[-2:] == ["go_online", "stop"]
    held = server.registry.get(TABLE, SEG)
    assert isinstance(held, CommittedSegment) and held.crc == built_crc
    assert consumers["made"][1].name == NEXT and consumers["made"][1].calls[0] == "paused=True"

    set_ideal(store, {NEXT: {"s1": S.OFFLINE}})
    wait_until(lambda: state_of(store, "s1", SEG) is None and state_of(store, "s1", NEXT) is S.OFFLINE)
    assert consumers["made"][1].calls[-1] == "stop"
    assert not (tmp_path / "s1" / TABLE / SEG).exists()
    assert server.registry.names(TABLE) == []


def test_http_errors_are_json(tmp_path: Path, store: ClusterStore, servers: list[Server]) -> None:
    server = start(servers, tmp_path, "s1")
    missing = httpx.get(f"{server.url}/tables/{TABLE}/segments/{SEG}")
    assert missing.status_code == 404
    assert missing.json()["code"] == 404 and "not held" in missing.json()["error"]
    bad = httpx.post(f"{server.url}/tables/{TABLE}/forceCommit", json={"segments": "x"})
    assert bad.status_code == 400 and bad.json()["code"] == 400
    unknown = httpx.get(f"{server.url}/nope")
    assert unknown.status_code == 404 and unknown.json() == {"code": 404, "error": "Not Found"}


def test_extra_routers_are_mounted(tmp_path: Path, store: ClusterStore, servers: list[Server]) -> None:
    from fastapi import APIRouter

    router = APIRouter()

    @router.get("/ping")
    def ping() -> dict:
        return {"pong": True}

    server = Server(server_config(tmp_path, "s1"), extra_routers=[router])
    servers.append(server)
    server.start()
    assert httpx.get(server.url + "/ping").json() == {"pong": True}


def test_a_segment_started_twice_releases_its_first_consumer(
    tmp_path: Path, store: ClusterStore, servers: list[Server]
) -> None:
    """A chain planned twice (the follower read current states just before the first run recorded CONSUMING):
    the first consumer is released, not left running beside the second (an upsert table would keep its rows)."""
    store.put(store.paths.segment(TABLE, SEG),
              SegmentRecord(SEG, SegmentStatus.IN_PROGRESS, 1, partition=0, sequence=0, start_offset=0,
                            row_threshold=20))
    consumers: dict = {"builds": {}}
    server = start(servers, tmp_path, "s1", consumers)
    set_ideal(store, {SEG: {"s1": S.CONSUMING}})
    wait_until(lambda: state_of(store, "s1", SEG) is S.CONSUMING)
    assert server.transitions.run_chain(TABLE, [Transition(SEG, S.OFFLINE, S.CONSUMING)])
    first, second = consumers["made"]
    assert first.calls[-1] == "stop" and second.calls == ["start"]
    held = server.registry.get(TABLE, SEG)
    assert isinstance(held, ConsumingView) and held.consuming is second
