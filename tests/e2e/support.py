"""What the multi-process end-to-end tests share: fast role timings, a table over the embedded log, and the
exactness probe (COUNT(*) with COUNT(DISTINCT id): a lost row lowers the first, a doubled one splits them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from cuvee.stream import open_admin, open_producer
from cuvee.testing.process import die_with_parent

FAST = {
    "controller": {"external_view_interval_seconds": 0.2, "completion.hold_seconds": 0.3, "tasks.mode": "external",
                   "tasks.interval_seconds": 3600},
    "server": {"ideal_state_poll_seconds": 0.5, "consumer.hold_retry_seconds": 0.1},
    "broker": {"routing_poll_seconds": 0.5},
}


def fast_sqlite(root: Path) -> str:
    """A metadata store whose sessions expire in 2 s, so a killed process's live node goes quickly."""
    return f"sqlite:///{root / 'metadata.db'}?session_timeout=2&heartbeat_interval=0.2"


def log_stream(root: Path, table: str, flush_rows: int) -> dict[str, str]:
    return {"streamType": "log", "stream.log.topic.name": table, "stream.log.dir": str(root / "stream"),
            "stream.log.consumer.prop.auto.offset.reset": "smallest",
            "realtime.segment.flush.threshold.rows": str(flush_rows)}


def restart_server(root: Path, name: str) -> subprocess.Popen[bytes]:
    """Start the ``cuvee cluster up`` server ``name`` again on its own config (same port, same instance id), as a
    supervisor would after it was killed; terminate it when done."""
    log = open(root / "logs" / f"{name}.restarted.log", "ab")  # noqa: SIM115 - the child keeps it; kept to debug
    return subprocess.Popen([sys.executable, "-m", "cuvee", "server", "--config", str(root / "conf" / f"{name}.toml")],
                            stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent())


def start_standby_controller(root: Path) -> tuple[subprocess.Popen[str], str]:
    """A second controller process on the ``cuvee cluster up`` controller's config (another port): it campaigns
    for leadership and answers NOT_LEADER meanwhile. Returns the process and its URL; terminate it when done."""
    conf = root / "conf" / "standby.toml"
    conf.write_text(re.sub(r"(?m)^port = \d+$", "port = 0", (root / "conf" / "controller.toml").read_text()))
    process = subprocess.Popen([sys.executable, "-m", "cuvee", "controller", "--config", str(conf)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               preexec_fn=die_with_parent())
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    assert url.startswith("http://"), f"the standby controller printed {url!r}"
    return process, url


def create_id_table(http: httpx.Client, controller: str, table: str, configs: dict[str, str],
                    partitions: int = 2, replicas: int = 2, *, pauseless: bool = False) -> None:
    """A topic and a realtime table of rows {id: LONG, v: LONG}."""
    with open_admin(configs) as admin:
        admin.create_topic(table, partitions)
    schema = {"schemaName": table, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
              "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
    assert http.post(f"{controller}/schemas", json=schema).status_code < 300
    assert http.post(f"{controller}/tables", json={
        "tableName": table, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": str(replicas)},
        "tableIndexConfig": {"streamConfigs": configs},
        "ingestionConfig": {"streamIngestionConfig": {"pauselessConsumptionEnabled": pauseless}}}).status_code < 300


def produce_ids(configs: dict[str, str], start: int, end: int) -> None:
    with open_producer(configs) as producer:
        producer.produce_many((str(i).encode(), orjson.dumps({"id": i, "v": i % 7})) for i in range(start, end))
        producer.flush()


def counts(http: httpx.Client, broker: str, table: str) -> tuple[Any, ...]:
    """(COUNT(*), COUNT(DISTINCT id)), or (-1, -1) while the broker reports an exception."""
    answer = http.post(f"{broker}/query/sql", json={"sql": f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {table}"}).json()
    return tuple(answer["resultTable"]["rows"][0]) if not answer.get("exceptions") else (-1, -1)
