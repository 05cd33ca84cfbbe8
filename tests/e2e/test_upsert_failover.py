"""An upsert table on separate processes (sqlite and ZooKeeper metadata): a server SIGKILLed mid-ingest, restarted
on its config, preloads its key map from valid-docs snapshots; then the other replica is killed, so every answer
comes from the restarted server alone: the latest value of every key, exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, fast_sqlite, log_stream, restart_server

TABLE = "accounts"
KEYS = 600
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
          "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                                  "granularity": "1:MILLISECONDS"}],
          "primaryKeyColumns": ["id"]}


def value(key: int, version: int) -> int:
    return version * 10_000 + key


@pytest.mark.multiprocess
@pytest.mark.timeout(400)
@pytest.mark.parametrize("metadata", ["sqlite", pytest.param("zk", marks=pytest.mark.zookeeper)])
def test_a_restarted_upsert_server_preloads_and_answers_alone(metadata: str, tmp_path: Path,
                                                              request: pytest.FixtureRequest) -> None:
    uri = (request.getfixturevalue("zookeeper").zk_uri(f"/upsert-{tmp_path.name}", session_timeout=2)
           if metadata == "zk" else fast_sqlite(tmp_path))
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, metadata=uri, overrides=FAST))
    http = httpx.Client(timeout=30)
    configs = log_stream(tmp_path, TABLE, flush_rows=250)
    restarted: subprocess.Popen[bytes] | None = None
    latest: dict[int, int] = {}

    def produce(version: int, keys: range = range(KEYS)) -> None:
        with open_producer(configs) as producer:
            producer.produce_many((str(k).encode(), orjson.dumps({"id": k, "v": value(k, version), "ts": version}))
                                  for k in keys)
            producer.flush()
        latest.update({k: value(k, version) for k in keys})

    def answer() -> Any:
        doc = http.post(f"{info['broker']}/query/sql",
                        json={"sql": f"SELECT COUNT(*), COUNT(DISTINCT id), SUM(v) FROM {TABLE}"}).json()
        return None if doc.get("exceptions") else tuple(doc["resultTable"]["rows"][0])

    def exact() -> bool:
        return answer() == (len(latest), len(latest), sum(latest.values()))

    def consuming() -> set[str]:
        """The segments both servers consume (the external view's CONSUMING on two replicas)."""
        view = http.get(f"{info['controller']}/tables/{TABLE}/externalview").json().get("REALTIME") or {}
        return {s for s, replicas in view.items() if list(replicas.values()).count("CONSUMING") == 2}

    try:
        with open_admin(configs) as admin:
            admin.create_topic(TABLE, 2)
        assert http.post(f"{info['controller']}/schemas", json=SCHEMA).status_code < 300
        assert http.post(f"{info['controller']}/tables", json={
            "tableName": TABLE, "tableType": "REALTIME",
            "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
            "tableIndexConfig": {"streamConfigs": configs},
            "routing": {"instanceSelectorType": "strictReplicaGroup"},
            "upsertConfig": {"mode": "FULL"}}).status_code < 300
        for version in (1, 2, 3):  # 1,800 rows, segments of 250 per partition: several commits each
            produce(version)
        wait_until(exact, 90, interval=0.1, message=lambda: f"before the kill: {answer()}")
        # A snapshot round runs when a commit finds the partition's next consuming segment empty; while rows
        # stream in they may always be there first (CI, stop 20), so commit once with nothing behind it.
        data = tmp_path / "data" / "server-0"
        before = consuming()
        assert http.post(f"{info['controller']}/tables/{TABLE}/forceCommit").status_code < 300
        wait_until(lambda: len(list(data.glob("**/partition-*.json"))) == 2, 90, interval=0.2,
                   message="server-0 wrote no snapshot round for each partition")
        # the forced commits end before the kill: a committer killed mid-commit would hold the partitions' next
        # segments back until the completion protocol gives up on it, longer than the wait below (CI, stop 22)
        wait_until(lambda: len(consuming() - before) == 2, 90, interval=0.2,
                   message=lambda: f"the forced commits did not end: consuming {sorted(consuming())}")

        os.kill(info["pids"]["server-0"], signal.SIGKILL)
        produce(4, range(0, KEYS, 2))
        wait_until(exact, 90, interval=0.1, message=lambda: f"after the kill: {answer()}")

        restarted = restart_server(tmp_path, "server-0")
        url = info["servers"][0]

        def preloaded() -> int:
            try:
                doc = http.get(f"{url}/tables/{TABLE}_REALTIME/upsert").json()
            except (httpx.HTTPError, ValueError):
                return 0
            return int(doc.get("preloadedSegments", 0))

        wait_until(lambda: preloaded() > 0, 120, interval=0.2, message="the restarted server preloaded nothing")
        produce(5, range(1, KEYS, 3))
        wait_until(exact, 90, interval=0.1, message=lambda: f"after the restart: {answer()}")

        os.kill(info["pids"]["server-1"], signal.SIGKILL)  # from now on only the restarted server answers
        produce(6, range(0, KEYS, 5))
        wait_until(exact, 120, interval=0.2, message=lambda: f"the restarted server alone: {answer()}")
        rows = http.post(f"{info['broker']}/query/sql",
                         json={"sql": f"SELECT id, v FROM {TABLE} WHERE id < 20 ORDER BY id LIMIT 20"}).json()
        assert rows["resultTable"]["rows"] == [[k, latest[k]] for k in range(20)]
    finally:
        http.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(30)
        down(tmp_path)
