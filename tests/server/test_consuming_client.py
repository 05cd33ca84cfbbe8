"""SegmentCompletionClient: leader resolution from the election node, retries on connection errors, and clear
failure when no controller answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from cuvee.cluster.paths import ClusterPaths
from cuvee.cluster.records import InstanceInfo
from cuvee.metastore import open_metastore
from cuvee.metastore.election import LEADER_NODE, leader_payload
from cuvee.metastore.paths import join
from cuvee.protocol.completion import Response, ResponseStatus, SegmentConsumed, StopReason
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.server.consuming import (
    CompletionUnavailable,
    ConsumerConfig,
    SegmentCompletionClient,
    metastore_leader_resolver,
)
from cuvee.spi.metastore import MetadataStore
from tests.server.test_consuming_support import FAST, SEGMENT, ScriptedController, serving

CLUSTER = "c1"
REQUEST = SegmentConsumed(LLCSegmentName.parse(SEGMENT), "s1", 10, 10, StopReason.ROW_LIMIT)
QUICK = ConsumerConfig(**{**FAST.__dict__, "controller_timeout_seconds": 0.5})


@pytest.fixture
def meta(tmp_path: Path) -> Iterator[MetadataStore]:
    store = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?session_timeout=3&heartbeat_interval=0.1")
    yield store
    store.close()


def set_leader(meta: MetadataStore, identifier: str) -> None:
    meta.create(join(ClusterPaths(CLUSTER).leader, LEADER_NODE), leader_payload(identifier, "s"), make_parents=True)


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed when the block ends: connections are refused


def test_the_leader_url_comes_from_the_election_node(meta: MetadataStore) -> None:
    resolve = metastore_leader_resolver(meta, CLUSTER)
    assert resolve() is None
    set_leader(meta, "http://10.0.0.5:9000/")
    assert resolve() == "http://10.0.0.5:9000"


def test_an_instance_id_in_the_election_node_is_looked_up(meta: MetadataStore) -> None:
    paths = ClusterPaths(CLUSTER)
    meta.create(paths.instance("Controller_a"),
                InstanceInfo("Controller_a", "ctl-host", {"http": 9123}, ("controller",)).encode(), make_parents=True)
    set_leader(meta, "Controller_a")
    assert metastore_leader_resolver(meta, CLUSTER)() == "http://ctl-host:9123"


def test_the_client_finds_and_uses_the_leader(meta: MetadataStore) -> None:
    fake = ScriptedController(lambda request: Response(ResponseStatus.HOLD, request.offset))
    with serving(fake) as service:
        set_leader(meta, service.url)
        client = SegmentCompletionClient.for_cluster(FAST, meta, CLUSTER)
        try:
            assert client.send(REQUEST) == Response(ResponseStatus.HOLD, 10)
            assert client.send(REQUEST).status is ResponseStatus.HOLD
        finally:
            client.close()
    assert fake.requests == [REQUEST, REQUEST]
    assert client.leader_resolutions == 1  # cached until invalidated


def test_connection_errors_re_resolve_and_retry() -> None:
    fake = ScriptedController(lambda request: Response(ResponseStatus.DISCARD))
    with serving(fake) as service:
        urls = iter([dead_url(), service.url])
        client = SegmentCompletionClient(FAST, resolve_leader=lambda: next(urls))
        try:
            assert client.send(REQUEST).status is ResponseStatus.DISCARD
        finally:
            client.close()
    assert client.leader_resolutions == 2 and client.leader_url == service.url


def test_no_leader_and_dead_leaders_fail_clearly_after_the_timeout() -> None:
    nobody = SegmentCompletionClient(QUICK, resolve_leader=lambda: None)
    with pytest.raises(CompletionUnavailable, match="no lead controller"):
        nobody.send(REQUEST)
    dead = SegmentCompletionClient(QUICK, leader_url=dead_url())
    with pytest.raises(CompletionUnavailable, match="segmentConsumed"):
        dead.send(REQUEST)
    nobody.close()
    dead.close()


def test_a_reply_that_is_not_a_protocol_response_is_an_error() -> None:
    app = FastAPI()
    app.post("/segmentConsumed")(lambda: PlainTextResponse("oops", status_code=500))
    from cuvee.node.http import HttpService

    service = HttpService(app).start()
    client = SegmentCompletionClient(QUICK, leader_url=service.url)
    try:
        with pytest.raises(CompletionUnavailable, match="HTTP 500"):
            client.send(REQUEST)
    finally:
        client.close()
        service.stop()


def test_invalidate_with_a_hint_skips_resolution() -> None:
    client = SegmentCompletionClient(FAST, resolve_leader=lambda: "http://elected:1")
    client.invalidate_leader("http://hinted:2/")
    assert client.leader_url == "http://hinted:2"
    client.close()
