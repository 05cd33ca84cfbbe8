"""consumingSegmentsInfo and forceCommit against tiny fake server apps, the external view writer, the config
file loader and the ``cuvee controller`` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from cuvee.cluster.records import CurrentState, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config.errors import ConfigValidationError
from cuvee.controller import Controller, ControllerConfig
from cuvee.node.config import load_config
from cuvee.node.http import HttpService
from tests.controller.test_controller_support import (
    get,
    post,
    produce,
    register_servers,
    schema_doc,
    table_doc,
    wait_until,
)

T = "events_REALTIME"


class FakeServer:
    """Answers the two server endpoints the controller calls, from what the test tells it."""

    def __init__(self, offsets: dict[str, int]):
        self.offsets = offsets
        self.details: dict[str, dict[str, Any]] = {}  # segment -> more of what a server reports of it
        self.force_commits: list[Any] = []
        app = FastAPI()

        @app.get("/tables/{table}/consumingSegmentsInfo")
        def info(table: str) -> dict[str, Any]:
            assert table == T
            return {"segments": [
                {"segmentName": s, "consumerState": "CONSUMING", "currentOffset": o, "partition": 0,
                 "lastConsumedTimestampMs": 123, **self.details.get(s, {})}
                for s, o in self.offsets.items()]}

        @app.post("/tables/{table}/forceCommit")
        def force(table: str, body: dict[str, Any]) -> dict[str, Any]:
            self.force_commits.append((table, body))
            return {"status": "OK"}

        self.http = HttpService(app, name="fake-server").start()


@pytest.fixture
def fake_servers() -> Iterator[list[FakeServer]]:
    servers = [FakeServer({}), FakeServer({})]
    yield servers
    for server in servers:
        server.http.stop()


def test_consuming_info_and_force_commit(leader: Controller, side_store: ClusterStore, log_dir: Path,
                                         fake_servers: list[FakeServer]) -> None:
    register_servers(side_store, 3, ports={"Server_0": fake_servers[0].http.port,
                                           "Server_1": fake_servers[1].http.port})  # Server_2 has no port
    produce(log_dir, {0: 10, 1: 4})
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2)).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    p0 = next(s for s in ideal.record.segments if s.startswith("events__0__"))
    fake_servers[0].offsets[p0] = 4

    info = get(leader.url, "/tables/events/consumingSegmentsInfo").json()
    segments = info["_segmentToConsumingInfoMap"]
    assert sorted(segments) == sorted(ideal.record.segments)
    rows = {r["serverName"]: r for r in segments[p0]}
    assert set(rows) == set(ideal.record.segments[p0])
    reported = rows["Server_0"]
    assert (reported["consumerState"], reported["currentOffset"], reported["latestUpstreamOffset"],
            reported["recordsLag"]) == ("CONSUMING", 4, 10, 6)
    assert reported["partitionOffsetInfo"]["recordsLagMap"] == {"0": 6}
    assert info["serversFailingToRespond"] == 1 and "Server_2" in info["serverErrors"]

    result = post(leader.url, "/tables/events/forceCommit").json()
    assert result["segments"] == sorted(ideal.record.segments)
    assert result["servers"]["Server_0"] == "OK" and result["servers"]["Server_2"] != "OK"
    [(table, body)] = fake_servers[0].force_commits
    expected = sorted(s for s, r in ideal.record.segments.items() if "Server_0" in r)
    assert table == T and sorted(body["segments"]) == expected
    assert get(leader.url, "/tables/nope/consumingSegmentsInfo").status_code == 404


def test_a_decoder_waiting_for_its_registry_shows_in_consuming_info_and_status(
        leader: Controller, side_store: ClusterStore, log_dir: Path, fake_servers: list[FakeServer]) -> None:
    """docs/server.md said consumingSegmentsInfo shows decoderUnavailable and decoderRetries: the controller
    dropped both, and cuvee status showed a table stalled on its registry as healthy."""
    from rich.console import Console

    from cuvee.cli.status_cmd import _render

    register_servers(side_store, 3, ports={"Server_0": fake_servers[0].http.port,
                                           "Server_1": fake_servers[1].http.port})
    produce(log_dir, {0: 10, 1: 4})
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2)).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    p0 = next(s for s in ideal.record.segments if s.startswith("events__0__"))
    waiting = "the schema registry at http://registry:8081 cannot be reached (ConnectError)"
    fake_servers[0].offsets[p0] = 0
    fake_servers[0].details[p0] = {"decoderUnavailable": waiting, "decoderRetries": 4}

    rows = {r["serverName"]: r for r in
            get(leader.url, "/tables/events/consumingSegmentsInfo").json()["_segmentToConsumingInfoMap"][p0]}
    assert (rows["Server_0"]["decoderUnavailable"], rows["Server_0"]["decoderRetries"]) == (waiting, 4)

    status = get(leader.url, "/tables/events/status").json()
    partition = next(p for p in status["partitions"] if p["partition"] == 0)
    replica = next(r for r in partition["consuming"] if r["server"] == "Server_0")
    assert (replica["decoderUnavailable"], replica["decoderRetries"]) == (waiting, 4)
    assert partition["health"] == "ERROR" and status["health"] == "ERROR"
    console = Console(width=400, record=True)
    console.print(_render([status]))
    assert f"decoder waiting (4 retries): {waiting}"[:90] in console.export_text()


def test_external_view_follows_live_current_states(leader: Controller, side_store: ClusterStore,
                                                   log_dir: Path) -> None:
    register_servers(side_store, 2)
    post(leader.url, "/schemas", schema_doc())
    assert post(leader.url, "/tables", table_doc(log_dir, replicas=2)).status_code == 200
    ideal = side_store.ideal_state(T)
    assert ideal is not None
    seg = sorted(ideal.record.segments)[0]
    side_store.put_current_state(CurrentState("Server_0", T, {seg: SegmentState.CONSUMING}))
    side_store.put_current_state(CurrentState("Ghost", T, {seg: SegmentState.ONLINE}))  # not live: ignored

    def view() -> dict[str, Any]:
        return get(leader.url, "/tables/events/externalview").json()["REALTIME"]

    wait_until(lambda: view() == {seg: {"Server_0": "CONSUMING"}}, message="external view never showed Server_0")
    side_store.put_current_state(CurrentState("Server_1", T, {seg: SegmentState.ONLINE}))
    wait_until(lambda: view() == {seg: {"Server_0": "CONSUMING", "Server_1": "ONLINE"}})
    side_store.metastore.delete(side_store.paths.live("Server_0"))
    wait_until(lambda: view() == {seg: {"Server_1": "ONLINE"}}, message="a dead server stayed in the view")


def test_config_file_and_every_mistake(tmp_path: Path) -> None:
    path = tmp_path / "controller.toml"
    path.write_text('metadata = "sqlite:///x.db"\nport = 9000\n[completion]\nhold_seconds = 0.5\n')
    config = load_config(ControllerConfig, path)
    assert (config.port, config.cluster, config.completion.hold_seconds) == (9000, "cuvee", 0.5)
    assert config.completion.fsm_config().hold_ms == 500
    path.write_text('port = "x"\nbogus = 1\n[completion]\nhold_seconds = -1\n')
    with pytest.raises(ConfigValidationError) as caught:
        load_config(ControllerConfig, path)
    assert {i.path for i in caught.value.issues} >= {"$.port", "$.bogus", "$.metadata"}


def test_cli_runs_in_the_foreground_until_sigterm(tmp_path: Path, meta_uri: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'metadata = "{meta_uri}"\ncluster = "cli"\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "cuvee", "controller", "--config", str(config), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        wait_until(lambda: httpx.get(url + "/health").json()["leader"], message="CLI controller never led")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
