"""A server killed with SIGKILL mid-ingest, as separate processes: the surviving replicas keep ingesting and
committing, no row is lost or doubled, and the killed server, restarted on its config, serves its segments again
with the committed CRCs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer
from cuvee.testing.process import die_with_parent
from cuvee.testing.waiting import wait_until

TABLE = "failover"
FAST = {
    "controller": {"external_view_interval_seconds": 0.2, "completion.hold_seconds": 0.3},
    "server": {"ideal_state_poll_seconds": 0.5, "consumer.hold_retry_seconds": 0.1},
    "broker": {"routing_poll_seconds": 0.5},
}


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_killed_server_loses_nothing_and_serves_again_after_restart(tmp_path: Path) -> None:
    metadata = f"sqlite:///{tmp_path / 'metadata.db'}?session_timeout=2&heartbeat_interval=0.2"
    info = up(LocalClusterSpec(dir=tmp_path, servers=3, metadata=metadata, overrides=FAST))
    http = httpx.Client(timeout=30)
    restarted: subprocess.Popen[bytes] | None = None
    configs = {"streamType": "log", "stream.log.topic.name": TABLE, "stream.log.dir": str(tmp_path / "stream"),
               "stream.log.consumer.prop.auto.offset.reset": "smallest",
               "realtime.segment.flush.threshold.rows": "8000"}

    def produce(start: int, end: int) -> None:
        with open_producer(configs) as producer:
            producer.produce_many((str(i).encode(), orjson.dumps({"id": i, "v": i % 7})) for i in range(start, end))
            producer.flush()

    def count() -> tuple[int, int]:
        answer = http.post(f"{info['broker']}/query/sql",
                           json={"sql": f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {TABLE}"}).json()
        return tuple(answer["resultTable"]["rows"][0]) if not answer.get("exceptions") else (-1, -1)

    try:
        with open_admin(configs) as admin:
            admin.create_topic(TABLE, 2)
        assert http.post(f"{info['controller']}/schemas", json={
            "schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
            "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}).status_code < 300
        assert http.post(f"{info['controller']}/tables", json={
            "tableName": TABLE, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "2"},
            "tableIndexConfig": {"streamConfigs": configs}}).status_code < 300
        produce(0, 10_000)
        wait_until(lambda: count() == (10_000, 10_000), 60, interval=0.1)

        victim = "server-0"
        os.kill(info["pids"][victim], signal.SIGKILL)
        produce(10_000, 30_000)
        wait_until(lambda: count() == (30_000, 30_000), 120, interval=0.2,
                   message=lambda: f"count after the kill: {count()}")

        # Restart the killed server on its own config: same port, same instance id.
        restarted = subprocess.Popen([sys.executable, "-m", "cuvee", "server", "--config",
                                      str(tmp_path / "conf" / f"{victim}.toml")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=die_with_parent())
        url = info["servers"][0]

        def serves_committed() -> bool:
            try:
                held = http.get(f"{url}/tables/{TABLE}_REALTIME/segments").json()["segments"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            committed = [s for s in held if "crc" in s]
            if not committed:
                return False
            for s in committed:
                meta = http.get(f"{info['controller']}/segments/{TABLE}/{s['segmentName']}/metadata").json()
                assert s["crc"] == meta["crc"], (s, meta)
            return True

        wait_until(serves_committed, 120, interval=0.2, message="the restarted server serves no committed segment")
        produce(30_000, 32_000)
        wait_until(lambda: count() == (32_000, 32_000), 120, interval=0.2,
                   message=lambda: f"count after the restart: {count()}")
    finally:
        http.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(30)
        down(tmp_path)
