"""The repair task's last two duties: consumers for new stream partitions, and uploading peer-only segments to
the deep store. Pure plans, then a real controller on sqlite with an embedded-log topic; peers are a FastAPI app
on a real HttpService serving a real segment archive."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, Response

from cuvee.cluster.assignment import mark_done
from cuvee.cluster.records import ExternalView, IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller
from cuvee.controller.repair import CreateSuccessor
from cuvee.controller.repair_partitions import NewPartition, missing_partitions
from cuvee.controller.repair_upload import UploadPeerOnly, plan_uploads
from cuvee.node.http import HttpService
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.archive import pack
from cuvee.protocol.completion_http import SEGMENT_DOWNLOAD_PATH
from cuvee.stream.log import LogAdmin
from tests.controller.test_controller_support import (
    get,
    post,
    produce,
    register_servers,
    schema_doc,
    table_doc,
    wait_until,
)
from tests.controller.test_repair import _ideal, _versions, clock, make_controller  # noqa: F401  (fixtures)
from tests.server.server_helpers import build

T = "events_REALTIME"
ON, OFF, CONS = SegmentState.ONLINE, SegmentState.OFFLINE, SegmentState.CONSUMING


def _seg(partition: int, seq: int) -> str:
    return LLCSegmentName.create("events", partition, seq, 1_700_000_000_000).name


# ---- pure plans ----


def test_missing_partitions_only_beyond_existing_and_never_while_paused() -> None:
    ideal = IdealState(T, {_seg(0, 0): {"a": ON}, _seg(0, 1): {"a": CONS}, _seg(1, 0): {"a": CONS}})
    assert missing_partitions(ideal, 2) == []
    assert missing_partitions(ideal, 4) == [2, 3]
    assert missing_partitions(dataclasses.replace(ideal, paused=True), 4) == []


def test_plan_uploads_picks_done_segments_without_uri_held_online_by_live_servers() -> None:
    a, b, c, d = _seg(0, 0), _seg(1, 0), _seg(2, 0), _seg(3, 0)
    ideal = IdealState(T, {a: {"s1": ON, "s2": ON}, b: {"s1": ON}, c: {"s1": CONS}, d: {"s3": ON}})
    records = {
        a: SegmentRecord(a, SegmentStatus.DONE, 0, 0, 0, end_offset=5, crc=1),
        b: SegmentRecord(b, SegmentStatus.DONE, 0, 1, 0, end_offset=5, crc=1, download_uri="file:///x/b.tar.gz"),
        c: SegmentRecord(c, SegmentStatus.IN_PROGRESS, 0, 2, 0),
        d: SegmentRecord(d, SegmentStatus.DONE, 0, 3, 0, end_offset=5, crc=1),  # its only holder is dead
    }
    view = ExternalView(T, {a: {"s2": ON, "s1": OFF}})
    assert plan_uploads(ideal, view, records, {"s1", "s2"}) == [UploadPeerOnly(a, ("s2", "s1"))]
    assert plan_uploads(ideal, None, records, {"s2"}) == [UploadPeerOnly(a, ("s2",))]


# ---- new stream partitions ----


@pytest.fixture
def leader(make_controller: Callable[..., Controller]) -> Controller:
    controller = make_controller()
    wait_until(lambda: controller.is_leader, message="controller never became leader")
    return controller


def test_grown_topic_gets_a_consuming_segment_for_the_new_partition(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    admin = LogAdmin(str(log_dir))
    admin.create_topic("grow", 2)
    register_servers(side_store, 3)
    post(leader.url, "/schemas", schema_doc())
    doc = table_doc(log_dir, replicas=2, rows=200, topic="grow", reset="largest")
    assert post(leader.url, "/tables", doc).status_code == 200
    assert leader.repair.run_once() == []  # nothing to add yet
    admin.set_partition_count("grow", 3)
    produce(log_dir, {2: 7}, topic="grow")
    assert post(leader.url, "/tables/events/pauseConsumption").json()["paused"] is True
    before = _versions(side_store)
    assert leader.repair.run_once() == []  # paused: nothing created
    assert _versions(side_store) == before

    side_store.update_ideal_state(T, lambda ideal: dataclasses.replace(ideal, paused=False))
    assert leader.repair.run_once() == [NewPartition(2)]
    ideal = _ideal(side_store)
    [new] = [s for s in ideal.segments if LLCSegmentName.parse(s).partition == 2]
    assert set(ideal.segments[new].values()) == {CONS} and len(ideal.segments[new]) == 2
    record = side_store.segment(T, new).record
    # the table says largest, but a new partition starts at its earliest offset: the 7 rows produced before the
    # pass noticed it are the table's too (Pinot's #7741)
    assert (record.status, record.sequence, record.start_offset) == (SegmentStatus.IN_PROGRESS, 0, 0)

    before = _versions(side_store)
    assert leader.repair.run_once() == []
    assert _versions(side_store) == before
    status = get(leader.url, "/tables/events/repairStatus").json()
    assert status["partitionsAdded"] == 1 and status["failures"] == 0


# ---- peer-only segments ----


class FakePeer:
    """A server that serves segment archives at the real download path; counts requests."""

    def __init__(self) -> None:
        self.archives: dict[str, Path] = {}
        self.requests = 0
        app = FastAPI()

        @app.get(SEGMENT_DOWNLOAD_PATH)
        def download(table: str, segment: str) -> Response:
            self.requests += 1
            if table != T or segment not in self.archives:
                return JSONResponse({"error": "not held"}, status_code=404)
            return FileResponse(self.archives[segment], media_type="application/gzip")

        self.http = HttpService(app, name="fake-peer").start()


@pytest.fixture
def peer() -> Iterator[FakePeer]:
    fake = FakePeer()
    yield fake
    fake.http.stop()


def _peer_only_segment(leader: Controller, side_store: ClusterStore, log_dir: Path, peer: FakePeer,
                       tmp_path: Path, *, crc_delta: int = 0) -> str:
    """Partition 0's segment committed with no download URI, ONLINE on Server_0 (the fake peer) and Server_1
    (registered without an HTTP port, so asking it fails)."""
    register_servers(side_store, 2, ports={"Server_0": peer.http.port})
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2, rows=200)).status_code == 200
    [segment] = [s for s in _ideal(side_store).segments if LLCSegmentName.parse(s).partition == 0]
    built = build(tmp_path / "built", segment, 40)
    peer.archives[segment] = pack(built.path, tmp_path / f"{segment}.tar.gz")
    side_store.update_segment(T, segment, mark_done(end_offset=40, total_docs=40, size_bytes=1,
                                                    crc=built.crc + crc_delta, download_uri="", now_ms=1))
    side_store.update_ideal_state(T, lambda i: i.with_segments_in(segment, i.instances_of(segment), ON))
    return segment


@pytest.fixture
def uploading(make_controller: Callable[..., Controller], tmp_path: Path) -> Controller:
    controller = make_controller(deep_store=f"file://{tmp_path / 'deep'}")
    wait_until(lambda: controller.is_leader, message="controller never became leader")
    assert controller.repair.deep_store is controller.deep_store
    return controller


def test_peer_only_segment_is_uploaded_once_the_deep_store_works(
    uploading: Controller, side_store: ClusterStore, log_dir: Path, peer: FakePeer, tmp_path: Path
) -> None:
    segment = _peer_only_segment(uploading, side_store, log_dir, peer, tmp_path)
    blocker = tmp_path / "deep" / T
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the table's directory should be")

    done = uploading.repair.run_once()
    assert UploadPeerOnly(segment, ("Server_0", "Server_1")) not in done
    assert any(isinstance(r, CreateSuccessor) for r in done)  # the other duties still ran
    assert side_store.segment(T, segment).record.download_uri == ""
    status = get(uploading.url, "/tables/events/repairStatus").json()
    assert (status["uploadFailures"], status["segmentsUploaded"]) == (1, 0)
    assert "deep store" in status["lastError"]

    blocker.unlink()  # the deep store is back: the next pass retries
    assert uploading.repair.run_once() == [UploadPeerOnly(segment, ("Server_0", "Server_1"))]
    uri = side_store.segment(T, segment).record.download_uri
    assert uri == f"file://{tmp_path / 'deep' / T / segment}.tar.zst"
    stored = tmp_path / "deep" / T / f"{segment}.tar.zst"
    assert stored.read_bytes() == peer.archives[segment].read_bytes()
    status = get(uploading.url, "/tables/events/repairStatus").json()
    assert (status["uploadFailures"], status["segmentsUploaded"]) == (1, 1)

    requests, before = peer.requests, _versions(side_store)
    assert uploading.repair.run_once() == []
    assert _versions(side_store) == before and peer.requests == requests


def test_peer_copy_with_the_wrong_crc_is_not_uploaded(
    uploading: Controller, side_store: ClusterStore, log_dir: Path, peer: FakePeer, tmp_path: Path
) -> None:
    segment = _peer_only_segment(uploading, side_store, log_dir, peer, tmp_path, crc_delta=1)
    done = uploading.repair.run_once()
    assert not any(isinstance(r, UploadPeerOnly) for r in done)
    assert side_store.segment(T, segment).record.download_uri == ""
    assert not (tmp_path / "deep" / T / f"{segment}.tar.zst").exists()
    status = get(uploading.url, "/tables/events/repairStatus").json()
    assert status["uploadFailures"] == 1 and "CRC" in status["lastError"]
