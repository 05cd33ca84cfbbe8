"""Shared pieces of the broker and server-query tests: an events table, real segments, query-only servers."""

from __future__ import annotations

import datetime as dt
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from cuvee.cluster.records import ExternalView, InstanceInfo, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import IndexingConfig, Schema
from cuvee.node.http import HttpService
from cuvee.protocol.completion_http import HTTP_PORT_NAME
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.builder import build_segment
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.mutable.segment import MutableSegment
from cuvee.server.consuming.build import logical_table
from cuvee.server.query_routes import query_router
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from cuvee.spi.metastore import MetadataStore
from cuvee.testing.waiting import wait_until as shared_wait_until

CLUSTER = "qc"
TABLE = "events_REALTIME"
FAST_META = "session_timeout=5&heartbeat_interval=0.2&poll_interval=0.02"
BASE_MS = 1_790_000_000_000
CREATED_MS = 1_790_000_000_000 - 1_790_000_000_000 % 60_000

SCHEMA_DOC = {
    "schemaName": "events",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "city", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "INT"}, {"name": "d", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}
TABLE_DOC = {
    "tableName": TABLE,
    "tableType": "REALTIME",
    "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "2"},
    "tableIndexConfig": {
        "streamConfigs": {
            "streamType": "log",
            "stream.log.topic.name": "events",
            "stream.log.dir": "/nonexistent",
            "realtime.segment.flush.threshold.rows": "1000",
            "stream.log.consumer.prop.auto.offset.reset": "smallest",
        }
    },
}


def wait_until(predicate: Any, timeout: float = 20.0, **kwargs: Any) -> Any:
    return shared_wait_until(predicate, timeout, **kwargs)


def schema() -> Schema:
    return Schema.from_json(SCHEMA_DOC)


def segment_name(partition: int, sequence: int, table: str = "events") -> str:
    return LLCSegmentName(table, partition, sequence, CREATED_MS).name


def event_rows(n: int, start: int, seed: int) -> pa.Table:
    """Rows with nulls and floats exact in binary (quarters), so sums do not depend on the order of addition."""
    rng = random.Random(seed)
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "city": pa.array([rng.choice(["amsterdam", "berlin", "bern", "cairo", None]) for _ in ids]),
        "v": pa.array([None if rng.random() < 0.1 else rng.randint(-20, 20) for _ in ids], pa.int32()),
        "d": pa.array([rng.randint(-400, 400) / 4 for _ in ids], pa.float64()),
        "ts": pa.array([dt.datetime.fromtimestamp((BASE_MS + i * 1000) / 1000, dt.UTC).replace(tzinfo=None)
                        for i in ids], pa.timestamp("ms")),
    }, schema=schema().arrow_schema())


def committed(work: Path, name: str, rows: pa.Table) -> CommittedSegment:
    segment: ImmutableSegment = build_segment(rows, schema(), IndexingConfig(), work, name, table_name=TABLE,
                                              time_column="ts", creation_time_ms=1, overwrite=True)
    return CommittedSegment(segment)


class MutableView:
    """A real MutableSegment as a QueryableSegment (what the server's ConsumingView gives for a consumer)."""

    is_consuming = True

    def __init__(self, name: str, rows: pa.Table, last_ingestion_ms: int | None = 1234):
        self.name = name
        self.mutable = MutableSegment(schema(), IndexingConfig(), max(rows.num_rows, 1) + 100, name=name)
        if rows.num_rows:
            for batch in rows.to_batches():
                self.mutable.append(batch, list(range(batch.num_rows)))
        self._last = last_ingestion_ms

    @property
    def num_docs(self) -> int:
        return int(self.mutable.num_docs)

    @property
    def last_ingestion_ms(self) -> int | None:
        return self._last

    def to_arrow(self) -> pa.Table:
        return logical_table(self.mutable.snapshot(), schema())


class BlockingSegment:
    """A segment whose view blocks until released (or ``hold_seconds`` pass): a slow or stuck server."""

    is_consuming = False
    last_ingestion_ms = None

    def __init__(self, inner: Any, hold_seconds: float = 30.0):
        self.inner = inner
        self.name = inner.name
        self.hold_seconds = hold_seconds
        self.release = threading.Event()

    @property
    def num_docs(self) -> int:
        return int(self.inner.num_docs)

    def to_arrow(self) -> pa.Table:
        self.release.wait(self.hold_seconds)
        return self.inner.to_arrow()


@dataclass
class QueryServer:
    """A server that only answers queries: a registry behind the real query router on a real HTTP port."""

    instance_id: str
    registry: SegmentRegistry
    http: HttpService

    @property
    def url(self) -> str:
        return self.http.url


def start_query_server(instance_id: str) -> QueryServer:
    from fastapi import FastAPI

    registry = SegmentRegistry()
    app = FastAPI()
    app.include_router(query_router(registry))
    http = HttpService(app, name=instance_id).start()
    return QueryServer(instance_id, registry, http)


def register_server(meta: MetadataStore, store: ClusterStore, server: QueryServer) -> None:
    store.register_instance(InstanceInfo(server.instance_id, server.http.host, {HTTP_PORT_NAME: server.http.port},
                                         ("DefaultTenant_REALTIME",)))
    meta.create(store.paths.live(server.instance_id), b"", ephemeral=True)


def write_table(store: ClusterStore, raw_name: str = "events", **config: Any) -> str:
    """Schema ``raw_name`` (the events columns) and table ``<raw_name>_REALTIME`` (``config``: more table config
    keys); returns the table name."""
    table = f"{raw_name}_REALTIME"
    store.metastore.create(store.paths.schema(raw_name), orjson.dumps({**SCHEMA_DOC, "schemaName": raw_name}))
    store.metastore.create(store.paths.table(table), orjson.dumps({**TABLE_DOC, "tableName": table, **config}))
    return table


def write_view(store: ClusterStore, segments: dict[str, dict[str, SegmentState]], table: str = TABLE) -> None:
    store.put_external_view(ExternalView(table, segments))


def spy_summed_plans(monkeypatch: Any) -> list[bool]:
    """Per query from now on, whether the broker sent the summed distinct-count plan (``QueryPlan.disjoint``)."""
    from cuvee.broker import handler

    seen: list[bool] = []
    real = handler.disjoint_plan

    def spy(plan: Any, *args: Any) -> Any:
        picked = real(plan, *args)
        seen.append(picked is not plan)
        return picked
    monkeypatch.setattr(handler, "disjoint_plan", spy)
    return seen
