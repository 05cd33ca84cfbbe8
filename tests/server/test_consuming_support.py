"""Shared pieces of the consuming-segment tests (no tests here): a table on an embedded-log topic, a producer,
a thread-safe fake clock, a scripted fake controller on a real HttpService, and ConsumingSegment construction."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pyarrow as pa
from fastapi import FastAPI, Request

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.node.http import HttpService
from cuvee.protocol.completion import Request as CompletionRequest
from cuvee.protocol.completion import RequestKind, Response, request_from_dict
from cuvee.protocol.completion_http import COMPLETION_PATHS
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.consuming import ConsumerConfig, ConsumingSegment, SegmentCompletionClient
from cuvee.spi.deepstore import DeepStore
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until as shared_wait_until

T = TypeVar("T")
TOPIC = "events"
TABLE = "events_REALTIME"
CREATED_MS = 1_790_000_040_000  # on a minute
SEGMENT = LLCSegmentName.create("events", 0, 0, CREATED_MS).name

SCHEMA_DOC = {
    "schemaName": "events",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"},
                            {"name": "tags", "dataType": "STRING", "singleValueField": False}],
    "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}

FAST = ConsumerConfig(fetch_max_messages=50, fetch_max_wait_seconds=0.02, hold_retry_seconds=0.05,
                      not_leader_retry_seconds=0.02, controller_timeout_seconds=3.0, lease_check_seconds=0.05,
                      download_retry_initial_seconds=0.02, download_retry_max_seconds=0.1,
                      stream_error_backoff_seconds=0.01, catch_up_timeout_seconds=5.0)


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, **kwargs: Any) -> T:
    """The shared wait, with the longer default deadline cluster tests need on a busy machine."""
    return shared_wait_until(predicate, timeout, **kwargs)


def schema() -> Schema:
    return Schema.from_json(SCHEMA_DOC)


def stream_configs(log_dir: Path, **extra: str) -> dict[str, str]:
    return {"streamType": "log", "stream.log.topic.name": TOPIC, "stream.log.dir": str(log_dir),
            "realtime.segment.flush.threshold.rows": "1000", **extra}


def table(log_dir: Path, replicas: int = 2, **extra: str) -> TableConfig:
    return TableConfig.from_json({
        "tableName": TABLE, "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(replicas)},
        "tableIndexConfig": {"invertedIndexColumns": ["country"], "streamConfigs": stream_configs(log_dir, **extra)},
    })


def create_topic(log_dir: Path, partitions: int = 1) -> None:
    admin = open_admin(stream_configs(log_dir))
    admin.create_topic(TOPIC, partitions)
    admin.close()


def event(i: int) -> dict[str, Any]:
    return {"id": i, "country": ["fr", "us", "de", "jp"][i % 4], "tags": [f"t{i % 3}", "x"], "clicks": i % 7,
            "ts": 1_700_000_000_000 + i}


def produce(log_dir: Path, ids: range, *, bad_at: tuple[int, ...] = ()) -> None:
    """Produce events ``ids`` to partition 0 in order; an id in ``bad_at`` is replaced by an undecodable message."""
    producer = open_producer(stream_configs(log_dir))
    for i in ids:
        value = b"{not json" if i in bad_at else orjson.dumps(event(i))
        producer.produce(value, partition=0)
    producer.flush()
    producer.close()


def rows_table(n: int) -> pa.Table:
    """Events 0..n-1 as an Arrow table of the schema (what a committer that consumed them would build from)."""
    target = schema().arrow_schema()
    rows = [event(i) for i in range(n)]
    return pa.table({f.name: pa.array([r[f.name] for r in rows], f.type) for f in target}, schema=target)


def record(start: int = 0, rows: int = 100, time_ms: int | None = None, name: str = SEGMENT) -> SegmentRecord:
    return SegmentRecord(segment_name=name, status=SegmentStatus.IN_PROGRESS, creation_time_ms=CREATED_MS,
                         partition=0, sequence=0, start_offset=start, row_threshold=rows, time_threshold_ms=time_ms)


class FakeClock:
    """Seconds; advanced by the test only."""

    def __init__(self, start: float = 1_800_000_000.0):
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


# ---- a scripted controller ----

Script = Callable[[CompletionRequest], Response]


@dataclass
class ScriptedController:
    """A FastAPI app answering completion requests from ``script``; records every request it got."""

    script: Script
    requests: list[CompletionRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> FastAPI:
        app = FastAPI()

        async def handle(request: Request) -> dict[str, Any]:
            parsed = request_from_dict(await request.json())
            with self.lock:
                self.requests.append(parsed)
            return self.script(parsed).to_dict()

        for path in COMPLETION_PATHS.values():
            app.post(path)(handle)
        return app

    def kinds(self, instance: str | None = None) -> list[RequestKind]:
        with self.lock:
            return [r.kind for r in self.requests if instance is None or r.instance == instance]

    def of(self, kind: RequestKind, instance: str | None = None) -> list[Any]:
        with self.lock:
            return [r for r in self.requests if r.kind is kind and (instance is None or r.instance == instance)]


@contextmanager
def serving(controller: ScriptedController) -> Iterator[HttpService]:
    service = HttpService(controller.app(), name="fake-controller").start()
    try:
        yield service
    finally:
        service.stop()


@dataclass
class Replica:
    segment: ConsumingSegment
    client: SegmentCompletionClient
    fetched: list[SegmentRecord]
    deep_store: DeepStore


def make_replica(tmp: Path, log_dir: Path, rec: SegmentRecord, *, instance: str, client: SegmentCompletionClient,
                 deep_store: DeepStore | None = None, fetch: Callable[[SegmentRecord], ImmutableSegment] | None = None,
                 config: ConsumerConfig = FAST, clock: Callable[[], float] = time.time,
                 table_config: TableConfig | None = None, build_slots: threading.Semaphore | None = None,
                 report_mixed: Callable[[str, int], None] | None = None) -> Replica:
    fetched: list[SegmentRecord] = []
    store = deep_store or open_deepstore(f"file://{tmp / 'deep'}")

    def fetch_committed(committed: SegmentRecord) -> ImmutableSegment:
        fetched.append(committed)
        if fetch is None:
            raise AssertionError("this test does not expect a download")
        return fetch(committed)

    segment = ConsumingSegment(
        table=table_config or table(log_dir), schema=schema(), record=rec, instance_id=instance, completion=client,
        deep_store=store, segment_dir=tmp / instance, fetch_committed=fetch_committed, config=config, clock=clock,
        build_slots=build_slots, report_mixed=report_mixed)
    return Replica(segment, client, fetched, store)
