"""`cuvee cluster up|down` and the quickstart, as a user runs them: separate processes, real ports."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from cuvee.deploy.local import LocalClusterError, LocalClusterSpec, down, up
from cuvee.deploy.quickstart import QuickstartOptions, run

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300)]


def _cuvee(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cuvee", *args], capture_output=True, text=True, timeout=120)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_cluster_up_writes_cluster_json_and_down_stops_every_process(tmp_path: Path) -> None:
    started = _cuvee("cluster", "up", "--dir", str(tmp_path), "--servers", "2")
    assert started.returncode == 0, started.stderr
    info = json.loads((tmp_path / "cluster.json").read_text())
    try:
        assert set(info) >= {"controller", "broker", "servers", "streamDir", "deepStore", "metadata", "pids", "logs"}
        assert len(info["servers"]) == 2
        assert len({info["controller"], info["broker"], *info["servers"]}) == 4, "two roles share a port"
        assert info["metadata"].startswith("sqlite:///") and info["deepStore"].startswith("file:///")
        for url in [info["controller"], info["broker"], *info["servers"]]:
            assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        instances = httpx.get(f"{info['controller']}/instances", timeout=5).json()["instances"]
        assert sum(1 for i in instances if i.startswith("Server_")) == 2
        assert all(Path(log).is_file() for log in info["logs"].values())
        again = _cuvee("cluster", "up", "--dir", str(tmp_path))
        assert again.returncode != 0 and "already running" in again.stderr
    finally:
        stopped = _cuvee("cluster", "down", "--dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    assert not any(_alive(pid) for pid in info["pids"].values())


def test_down_without_a_cluster_is_a_clear_error(tmp_path: Path) -> None:
    result = _cuvee("cluster", "down", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert "no cluster.json" in result.stderr and "Traceback" not in result.stderr


def test_a_role_that_cannot_start_fails_up_and_leaves_nothing_running(tmp_path: Path) -> None:
    spec = LocalClusterSpec(dir=tmp_path, servers=1, metadata="bogus://nowhere", start_timeout_seconds=20)
    with pytest.raises(LocalClusterError, match="controller exited"):
        up(spec)
    assert not (tmp_path / "cluster.json").exists()


def test_quickstart_ingests_and_answers_its_queries(tmp_path: Path) -> None:
    console = Console(record=True, width=120)
    try:
        run(QuickstartOptions(dir=tmp_path, rows=8_000, rows_per_segment=3_000), console=console)
    finally:
        down(tmp_path)
    text = console.export_text()
    assert "8000" in text.replace(",", "")  # the COUNT(*) answer
    assert "cuvee cluster down --dir" in text
    assert "ONLINE" in text, "no segment committed during the quickstart"


def test_a_stopped_cluster_restarts_on_its_ports_and_serves_its_data(tmp_path: Path) -> None:
    """Restart (issue: committed segments load from local disk; consuming ones re-consume from their start)."""
    import orjson

    from cuvee.stream import open_admin, open_producer
    from cuvee.testing.waiting import wait_until

    configs = {"streamType": "log", "stream.log.topic.name": "t", "stream.log.dir": str(tmp_path / "stream"),
               "stream.log.consumer.prop.auto.offset.reset": "smallest",
               "realtime.segment.flush.threshold.rows": "1000"}
    schema = {"schemaName": "t", "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
              "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
    table = {"tableName": "t", "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
             "tableIndexConfig": {"streamConfigs": configs}}
    spec = LocalClusterSpec(dir=tmp_path, servers=1)

    def count(info: dict) -> int:
        answer = httpx.post(f"{info['broker']}/query/sql", json={"sql": "SELECT COUNT(*) FROM t"}, timeout=10).json()
        return answer["resultTable"]["rows"][0][0] if not answer.get("exceptions") else -1

    info = up(spec)
    try:
        with open_admin(configs) as admin:
            admin.create_topic("t", 2)
        assert httpx.post(f"{info['controller']}/schemas", json=schema).status_code < 300
        assert httpx.post(f"{info['controller']}/tables", json=table).status_code < 300
        with open_producer(configs) as producer:
            producer.produce_many((str(i).encode(), orjson.dumps({"id": i, "v": i})) for i in range(2_500))
            producer.flush()
        wait_until(lambda: count(info) == 2_500, 60, interval=0.1)
    finally:
        down(tmp_path)
    restarted = up(spec)
    try:
        assert restarted["servers"] == info["servers"] and restarted["controller"] == info["controller"]
        wait_until(lambda: count(restarted) == 2_500, 60, interval=0.1, message="data not served after restart")
        with open_producer(configs) as producer:
            producer.produce_many((str(i).encode(), orjson.dumps({"id": i, "v": i})) for i in range(2_500, 3_000))
            producer.flush()
        wait_until(lambda: count(restarted) == 3_000, 60, interval=0.1, message="ingestion did not resume")
    finally:
        down(tmp_path)


def test_cluster_up_with_auth_and_tls_serves_https_asks_for_credentials_and_restarts_with_the_same_secrets(
        tmp_path: Path) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    for i, pem in enumerate(cert.cert_chain_pems):
        pem.write_to_path(str(cert_file), append=i > 0)
    cert.private_key_pem.write_to_path(str(key_file))
    directory = tmp_path / "cluster"
    args = ["cluster", "up", "--dir", str(directory), "--servers", "1", "--auth", "--tls-cert", str(cert_file),
            "--tls-key", str(key_file), "--tls-ca", str(ca_file)]
    for attempt in range(2):  # the second start reuses the first one's secrets
        started = _cuvee(*args)
        assert started.returncode == 0, started.stderr
        info = json.loads((directory / "cluster.json").read_text())
        try:
            assert info["tls"] and all(url.startswith("https://") for url in [info["controller"], info["broker"],
                                                                               *info["servers"]])
            password_file = Path(info["adminPasswordFile"])
            assert password_file.stat().st_mode & 0o777 == 0o600
            assert (directory / "conf").stat().st_mode & 0o777 == 0o700
            assert all(f.stat().st_mode & 0o777 == 0o600 for f in (directory / "conf").iterdir())  # token inside
            admin = ("admin", password_file.read_text().strip())
            with httpx.Client(verify=ssl.create_default_context(cafile=str(ca_file)), timeout=10) as http:
                assert http.get(f"{info['controller']}/instances").status_code == 401
                instances = http.get(f"{info['controller']}/instances", auth=admin).json()["instances"]
                assert sum(1 for i in instances if i.startswith("Server_")) == 1
                sql = {"sql": "SELECT COUNT(*) FROM nothing"}
                assert http.post(f"{info['broker']}/query/sql", json=sql).status_code == 401
                answered = http.post(f"{info['broker']}/query/sql", json=sql, auth=admin)
                assert answered.status_code == 200 and answered.json()["exceptions"]  # past auth: no such table
            with pytest.raises(httpx.ConnectError):  # not trusted without the CA
                httpx.get(f"{info['controller']}/health", timeout=5)
        finally:
            stopped = _cuvee("cluster", "down", "--dir", str(directory))
        assert stopped.returncode == 0, stopped.stderr
        assert "internal_token" not in started.stdout and admin[1] not in started.stdout
