"""End to end, as separate processes: 200,000 rows over 4 partitions, committed at least 3 times per partition,
queried while commits happen. Runs with the embedded metadata store and log, with ZooKeeper, and with Kafka (tansu).

Checks what the issue asks: exact COUNT, COUNT(DISTINCT id) and SUM; equal CRCs on every replica of a committed
segment; every committed segment in the deep store; and queries during commits never see a committed row twice
nor lose one (COUNT(*) equals COUNT(DISTINCT id) and never decreases).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until

ROWS = 200_000
PARTITIONS = 4
REPLICAS = 2
SERVERS = 3
# 8 consuming segments over 3 servers: the busiest hosts 3, so each segment gets 36,000 / 3 = 12,000 rows and
# each partition's 50,000 rows commit 4 times.
FLUSH_ROWS = 36_000
TABLE = "clicks"

FAST = {
    "controller": {"external_view_interval_seconds": 0.2, "completion.hold_seconds": 0.5},
    "server": {"ideal_state_poll_seconds": 0.5, "consumer.hold_retry_seconds": 0.1},
    "broker": {},
}

SCHEMA = {
    "schemaName": TABLE,
    "dimensionFieldSpecs": [
        {"name": "id", "dataType": "LONG"},
        {"name": "user", "dataType": "STRING"},
        {"name": "country", "dataType": "STRING"},
    ],
    "metricFieldSpecs": [{"name": "amount", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}


def rows() -> Iterator[dict[str, Any]]:
    countries = ["US", "FR", "DE", "IN", "BR", "JP"]
    for i in range(ROWS):
        yield {"id": i, "user": f"u{i % 5000}", "country": countries[i % 6], "amount": (i * 7) % 1000,
               "ts": 1_790_000_000_000 + i}


EXPECTED_SUM = sum((i * 7) % 1000 for i in range(ROWS))


@dataclass(frozen=True)
class Variant:
    name: str
    metadata: str  # "sqlite" or "zk"
    stream: str  # "log" or "kafka"
    pauseless: bool = False  # the next segment consumes while the previous one commits


VARIANTS = [
    Variant("sqlite-log", "sqlite", "log"),
    Variant("sqlite-log-pauseless", "sqlite", "log", pauseless=True),
    pytest.param(Variant("zookeeper-log", "zk", "log"), marks=pytest.mark.zookeeper),
    pytest.param(Variant("sqlite-kafka", "sqlite", "kafka"), marks=pytest.mark.kafka),
]


@pytest.fixture(params=VARIANTS, ids=lambda v: v.name)
def variant(request: pytest.FixtureRequest) -> Variant:
    return request.param


def stream_configs(variant: Variant, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    common = {"realtime.segment.flush.threshold.rows": str(FLUSH_ROWS), "realtime.segment.flush.threshold.time": "1h"}
    if variant.stream == "kafka":
        broker = request.getfixturevalue("tansu")
        return {"streamType": "kafka", "stream.kafka.topic.name": TABLE,
                "stream.kafka.broker.list": broker.bootstrap_servers,
                "stream.kafka.consumer.prop.auto.offset.reset": "smallest", **common}
    return {"streamType": "log", "stream.log.topic.name": TABLE, "stream.log.dir": str(tmp_path / "stream"),
            "stream.log.consumer.prop.auto.offset.reset": "smallest", **common}


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_ingest_commit_and_query_as_separate_processes(
    variant: Variant, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    metadata = ""
    if variant.metadata == "zk":
        metadata = request.getfixturevalue("zookeeper").zk_uri(f"/e2e-{variant.name}")
    configs = stream_configs(variant, tmp_path, request)
    spec = LocalClusterSpec(dir=tmp_path, servers=SERVERS, metadata=metadata, overrides=FAST)
    info = up(spec)
    http = httpx.Client(timeout=30)
    try:
        with open_admin(configs) as admin:
            admin.create_topic(TABLE, PARTITIONS)
        _ok(http.post(f"{info['controller']}/schemas", json=SCHEMA))
        table: dict[str, Any] = {
            "tableName": TABLE, "tableType": "REALTIME",
            "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(REPLICAS)},
            "tableIndexConfig": {"invertedIndexColumns": ["country"], "streamConfigs": configs},
        }
        if variant.pauseless:
            table["ingestionConfig"] = {"streamIngestionConfig": {"pauselessConsumptionEnabled": True}}
        _ok(http.post(f"{info['controller']}/tables", json=table))

        # (committed rows the broker routes to ONLINE replicas, just before the query; COUNT(*); COUNT(DISTINCT id))
        observed: list[tuple[int, int, int]] = []
        failures: list[str] = []
        done = threading.Event()
        committed_docs: dict[str, int] = {}

        def committed_lower_bound() -> int:
            """Rows of the segments the broker will read from ONLINE replicas: committed, so all must be counted.
            The broker's view only moves forward, so a query sent after this read routes at least these."""
            routing = _ok(http.get(f"{info['broker']}/debug/routingTable/{TABLE}"))
            online = {s for segs in routing["servers"].values() for s in segs} - set(routing["consuming"])
            for segment in online - committed_docs.keys():
                committed_docs[segment] = _ok(
                    http.get(f"{info['controller']}/segments/{TABLE}/{segment}/metadata"))["totalDocs"]
            return sum(committed_docs[s] for s in online)

        def query_during_ingest() -> None:
            while not done.is_set():
                lower = committed_lower_bound()
                answer = _query(http, info["broker"], f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {TABLE}")
                if answer.get("exceptions"):
                    failures.append(str(answer["exceptions"]))
                    continue
                count, distinct = answer["resultTable"]["rows"][0]
                observed.append((lower, count, distinct))

        watcher = threading.Thread(target=query_during_ingest, daemon=True)
        watcher.start()
        with open_producer(configs) as producer:
            producer.produce_many((str(r["id"]).encode(), orjson.dumps(r)) for r in rows())
            producer.flush()

        wait_until(lambda: _scalar(http, info["broker"], f"SELECT COUNT(*) FROM {TABLE}") == ROWS, 240,
                   interval=0.2, message=lambda: f"count stuck at {observed[-1:] }")
        committed = wait_until(lambda: _committed_per_partition(http, info["controller"], at_least=3), 240,
                               interval=0.2, message="fewer than 3 commits per partition")
        done.set()
        watcher.join(30)

        # Queries during commits: never a row twice, never a committed row lost.
        assert not failures, failures[:3]
        assert len(observed) >= 3, f"only {len(observed)} queries ran during ingestion"
        assert all(count == distinct for _, count, distinct in observed), [o for o in observed if o[1] != o[2]][:5]
        assert all(count >= lower for lower, count, _ in observed), [o for o in observed if o[1] < o[0]][:5]
        assert any(lower > 0 for lower, _, _ in observed), "no query ran after a commit"

        assert _scalar(http, info["broker"], f"SELECT COUNT(*) FROM {TABLE}") == ROWS
        assert _scalar(http, info["broker"], f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == ROWS
        assert _scalar(http, info["broker"], f"SELECT SUM(amount) FROM {TABLE}") == EXPECTED_SUM

        deep_store = Path(info["deepStore"].removeprefix("file://"))
        ideal = _ok(http.get(f"{info['controller']}/tables/{TABLE}/idealstate"))
        ideal = ideal.get("REALTIME", ideal)
        held = {url: _held_crcs(http, url) for url in info["servers"]}
        for segment in committed:
            meta = _ok(http.get(f"{info['controller']}/segments/{TABLE}/{segment}/metadata"))
            assert meta["status"] == "DONE"
            crcs = [crcs[segment] for crcs in held.values() if segment in crcs]
            assert len(crcs) == len(ideal[segment]) == REPLICAS, (segment, crcs)
            assert set(crcs) == {meta["crc"]}, f"{segment}: replica CRCs {crcs} vs committed {meta['crc']}"
            assert (deep_store / f"{TABLE}_REALTIME" / f"{segment}.tar.zst").is_file(), f"{segment} not in deep store"
    finally:
        http.close()
        down(tmp_path)


def _ok(response: httpx.Response) -> Any:
    assert response.status_code < 400, f"{response.request.url} -> {response.status_code} {response.text}"
    return response.json() if response.content else None


def _query(http: httpx.Client, broker: str, sql: str) -> dict[str, Any]:
    return _ok(http.post(f"{broker}/query/sql", json={"sql": sql}))


def _scalar(http: httpx.Client, broker: str, sql: str) -> Any:
    answer = _query(http, broker, sql)
    assert not answer.get("exceptions"), answer["exceptions"]
    return answer["resultTable"]["rows"][0][0]


def _committed_per_partition(http: httpx.Client, controller: str, at_least: int) -> list[str] | None:
    ideal = _ok(http.get(f"{controller}/tables/{TABLE}/idealstate"))
    ideal = ideal.get("REALTIME", ideal)
    committed = [s for s, replicas in ideal.items() if replicas and set(replicas.values()) == {"ONLINE"}]
    per_partition: dict[str, int] = {}
    for segment in committed:
        partition = segment.split("__")[1]
        per_partition[partition] = per_partition.get(partition, 0) + 1
    if len(per_partition) == PARTITIONS and min(per_partition.values()) >= at_least:
        return sorted(committed)
    return None


def _held_crcs(http: httpx.Client, server: str) -> dict[str, int]:
    doc = _ok(http.get(f"{server}/tables/{TABLE}_REALTIME/segments"))
    return {s["segmentName"]: s["crc"] for s in doc["segments"] if "crc" in s}
