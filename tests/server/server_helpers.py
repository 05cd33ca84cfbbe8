"""Helpers for the server shell tests: a cluster on a sqlite metastore, committed segments in a deep store,
servers with a scripted consumer, and polling with a deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pyarrow as pa

from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.config import IndexingConfig, Schema
from cuvee.segment.archive import pack
from cuvee.segment.builder import build_segment
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.config import ServerConfig
from cuvee.spi.deepstore import DeepStore
from cuvee.testing.waiting import wait_until as shared_wait_until

T = TypeVar("T")
CLUSTER = "c1"
TABLE = "events_REALTIME"
FAST_META = "session_timeout=5&heartbeat_interval=0.2&poll_interval=0.02"

SCHEMA_DOC = {
    "schemaName": "events",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}


def table_doc(stream_dir: str = "/nonexistent", topic: str = "events", rows: int = 1000, replicas: int = 1) -> dict:
    return {
        "tableName": TABLE,
        "tableType": "REALTIME",
        "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": str(replicas)},
        "tableIndexConfig": {
            "streamConfigs": {
                "streamType": "log",
                "stream.log.topic.name": topic,
                "stream.log.dir": stream_dir,
                "realtime.segment.flush.threshold.rows": str(rows),
                "stream.log.consumer.prop.auto.offset.reset": "smallest",
            }
        },
    }


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, **kwargs: Any) -> T:
    """The shared wait, with the longer default deadline cluster tests need on a busy machine."""
    return shared_wait_until(predicate, timeout, **kwargs)


def write_table(store: ClusterStore, doc: dict | None = None) -> None:
    store.metastore.create(store.paths.schema("events"), orjson.dumps(SCHEMA_DOC))
    store.metastore.create(store.paths.table(TABLE), orjson.dumps(doc or table_doc()))


def schema() -> Schema:
    return Schema.from_json(SCHEMA_DOC)


def rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "country": pa.array([["fr", "us", "de"][i % 3] for i in ids]),
        "clicks": pa.array([i % 7 for i in ids], pa.int32()),
        "ts": pa.array([1_700_000_000_000 + i for i in ids], pa.timestamp("ms")),
    })


def build(out_dir: Path, name: str, n: int, start: int = 0) -> ImmutableSegment:
    return build_segment(rows(n, start), schema(), IndexingConfig(), out_dir, name, start_offset=start,
                         end_offset=start + n, table_name=TABLE, time_column="ts", creation_time_ms=1)


def commit_segment(store: ClusterStore, deep: DeepStore | None, work: Path, name: str, n: int,
                   *, upload: bool = True) -> SegmentRecord:
    """A committed segment: built, packed, uploaded (or peer-only), with DONE metadata."""
    segment = build(work, name, n)
    uri = deep.put(pack(segment.path, work / f"{name}.tar.gz"), f"{TABLE}/{name}.tar.gz") if upload and deep else ""
    record = SegmentRecord(name, SegmentStatus.DONE, 1, partition=0, sequence=0, start_offset=0, end_offset=n,
                           total_docs=n, crc=segment.crc, download_uri=uri)
    store.put(store.paths.segment(TABLE, name), record)
    return record


def set_ideal(store: ClusterStore, segments: dict[str, dict[str, SegmentState]], paused: bool = False) -> None:
    store.update_ideal_state(TABLE, lambda _: IdealState(TABLE, segments, paused))


def server_config(tmp: Path, name: str, **overrides: Any) -> ServerConfig:
    values: dict[str, Any] = dict(
        cluster=CLUSTER, metadata=f"sqlite://{tmp / 'meta.db'}?{FAST_META}", deep_store=f"file://{tmp / 'deep'}",
        data_dir=str(tmp / name), instance_id=name, ideal_state_poll_seconds=0.5,
        download_retry_initial_seconds=0.05, download_retry_max_seconds=0.2, download_max_attempts=4,
        download_timeout_seconds=5.0,
    )
    values.update(overrides)
    return ServerConfig(**values)


class ScriptedConsuming:
    """Stands in for ConsumingSegment in shell tests: records calls; go_online returns a given build."""

    def __init__(self, table: str, record: SegmentRecord, builds: dict[str, Callable[[SegmentRecord], ImmutableSegment]]):
        self.table = table
        self.record = record
        self.name = record.segment_name
        self.is_consuming = True
        self.num_docs = 2
        self.last_ingestion_ms: int | None = 123
        self.calls: list[str] = []
        self.capped_at: int | None = None
        self._builds = builds

    def start(self) -> None:
        self.calls.append("start")

    def stop(self) -> None:
        self.calls.append("stop")

    def halt(self) -> None:
        self.calls.append("halt")

    def set_gate(self, gate: Callable[[threading.Event], bool]) -> None:
        self.calls.append("set_gate")

    def force_commit(self) -> None:
        self.calls.append("force_commit")

    def cap(self, end_offset: int) -> None:
        self.capped_at = end_offset

    def set_paused(self, paused: bool) -> None:
        self.calls.append(f"paused={paused}")

    def info(self) -> dict:
        return {"segmentName": self.name, "consumerState": "CONSUMING", "currentOffset": 2,
                "partition": self.record.partition, "lastConsumedTimestampMs": 123, "rowsConsumed": 2,
                "badRecords": 1, "recentBadRecords": [{"offset": 1, "error": "not JSON"}]}

    def go_online(self, record: SegmentRecord) -> ImmutableSegment:
        self.calls.append("go_online")
        return self._builds[self.name](record)

    def snapshot(self) -> pa.Table:
        return rows(2)
