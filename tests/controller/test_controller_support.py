"""Shared helpers for the controller tests (no tests here): a fast sqlite metastore, controllers, fake servers
registered straight through ClusterStore, an embedded-log topic, and schema/table documents."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from cuvee.cluster.records import InstanceInfo
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller, ControllerConfig
from cuvee.controller import faults
from cuvee.controller.config import CompletionTiming
from cuvee.metastore import open_metastore
from cuvee.spi.metastore import MetadataStore
from cuvee.stream.log import LogAdmin, LogProducer

T = TypeVar("T")
FAST = "session_timeout=3&heartbeat_interval=0.1&poll_interval=0.02"
CLUSTER = "ctest"
TOPIC = "events"


def wait_until(predicate: Callable[[], T], timeout: float = 15.0, message: str = "") -> T:
    """Poll ``predicate`` until truthy; fail at the deadline (no sleeping for a fixed time)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(0.02)


def schema_doc(name: str = "events") -> dict[str, Any]:
    return {
        "schemaName": name,
        "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
        "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"}],
        "dateTimeFieldSpecs": [
            {"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
        ],
    }


def table_doc(
    log_dir: Path, name: str = "events", *, replicas: int = 2, rows: int = 1000, reset: str = "smallest",
    topic: str = TOPIC, **stream: str,
) -> dict[str, Any]:
    return {
        "tableName": name,
        "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(replicas)},
        "tenants": {"server": "DefaultTenant"},
        "tableIndexConfig": {
            "streamConfigs": {
                "streamType": "log",
                "stream.log.topic.name": topic,
                "stream.log.dir": str(log_dir),
                "stream.log.consumer.prop.auto.offset.reset": reset,
                "realtime.segment.flush.threshold.rows": str(rows),
                **stream,
            }
        },
    }


@pytest.fixture(autouse=True)
def _reset_faults() -> Iterator[None]:
    faults.reset()
    yield
    faults.reset()


@pytest.fixture
def meta_uri(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'meta.db'}?{FAST}"


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "stream"
    LogAdmin(str(path)).create_topic(TOPIC, 4)
    return path


def produce(log_dir: Path, per_partition: dict[int, int], topic: str = TOPIC) -> None:
    with LogProducer(str(log_dir), topic) as producer:
        for partition, count in per_partition.items():
            for i in range(count):
                producer.produce(b'{"id": %d}' % i, partition=partition)
        producer.flush()


@pytest.fixture
def side_store(meta_uri: str) -> Iterator[ClusterStore]:
    """A second session, playing the servers: their registrations and live nodes. Its session outlives a loaded
    machine's stalls (30 s, not the controllers' 3 s): a CI run saw the fake servers' live nodes expire when its
    heartbeat thread was starved, and a table creation then found too few live servers (400)."""
    meta: MetadataStore = open_metastore(meta_uri.replace("session_timeout=3", "session_timeout=30"))
    yield ClusterStore(meta, CLUSTER)
    meta.close()


def register_servers(store: ClusterStore, count: int, tag: str = "DefaultTenant_REALTIME",
                     ports: dict[str, int] | None = None) -> list[str]:
    ids = []
    for i in range(count):
        sid = f"Server_{i}"
        http = {"http": ports[sid]} if ports and sid in ports else {}
        store.register_instance(InstanceInfo(sid, "127.0.0.1", http, (tag,)))
        store.metastore.create(store.paths.live(sid), b"", ephemeral=True)
        ids.append(sid)
    return ids


def controller_config(meta_uri: str, **overrides: Any) -> ControllerConfig:
    timing = overrides.pop("completion", CompletionTiming(hold_seconds=0.5, commit_lease_seconds=10,
                                                          max_commit_seconds=30, max_segment_completion_seconds=30))
    return ControllerConfig(metadata=meta_uri, cluster=CLUSTER, completion=timing,
                            external_view_interval_seconds=0.2, server_timeout_seconds=3, **overrides)


@pytest.fixture
def start_controller(meta_uri: str) -> Iterator[Callable[..., Controller]]:
    started: list[Controller] = []

    def start(**overrides: Any) -> Controller:
        controller = Controller(controller_config(meta_uri, **overrides)).start()
        started.append(controller)
        return controller

    yield start
    for controller in reversed(started):
        controller.stop()


@pytest.fixture
def leader(start_controller: Callable[..., Controller]) -> Controller:
    controller = start_controller()
    wait_until(lambda: controller.is_leader, message="controller never became leader")
    return controller


def post(url: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=30)


def get(url: str, path: str) -> httpx.Response:
    return httpx.get(url + path, timeout=30)
