"""Building, storing and pushing offline segments in tests, the way a batch job does (metadata push)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment

SCHEMA = {
    "schemaName": "sales",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
}


def offline_table(name: str = "sales", replication: int = 2, **segments: Any) -> dict[str, Any]:
    return {"tableName": name, "tableType": "OFFLINE",
            "segmentsConfig": {"timeColumnName": "ts", "replication": str(replication), **segments},
            "tableIndexConfig": {"invertedIndexColumns": ["country"]}}


def rows(ids: range, ts: int, amount: float = 1.0) -> pa.Table:
    n = len(ids)
    return pa.table({"id": pa.array(list(ids), pa.int64()), "country": [("us", "fr", "de")[i % 3] for i in ids],
                     "amount": pa.array([amount] * n, pa.float64()), "ts": pa.array([ts + i for i in ids], pa.int64())})


def build_archive(tmp: Path, name: str, data: pa.Table, table: dict[str, Any] | None = None) -> Path:
    schema = Schema.from_json(SCHEMA)
    config = TableConfig.from_json(table or offline_table())
    segment = build_segment(data, schema, config.indexing, tmp / "built", name, table_name="sales",
                            time_column="ts", overwrite=True)
    return pack(segment.path, tmp / f"{name}{ARCHIVE_SUFFIX}")


def describe(archive: Path, uri: str) -> dict[str, Any]:
    from cuvee.segment.archive import unpack
    from cuvee.segment.immutable import ImmutableSegment

    seg = ImmutableSegment.load(unpack(archive, archive.parent / "check", overwrite=True))
    return {"segmentName": seg.name, "downloadUri": uri, "crc": seg.crc, "totalDocs": seg.total_docs,
            "sizeBytes": seg.size_bytes, "timeMin": seg.metadata.start_time, "timeMax": seg.metadata.end_time}


def metadata_push(http: httpx.Client, controller: str, deep_store_uri: str, tmp: Path, name: str,
                  data: pa.Table, table: str = "sales") -> httpx.Response:
    """Build ``name`` from ``data``, put its archive in the deep store, push its metadata."""
    archive = build_archive(tmp, name, data)
    uri = open_deepstore(deep_store_uri).put(archive, f"{table}_OFFLINE/{name}{ARCHIVE_SUFFIX}")
    return http.post(f"{controller}/v2/segments", params={"tableName": table, "tableType": "OFFLINE"},
                     json={"segments": [describe(archive, uri)]})


def add_hybrid_sales(cluster: Any, offline_config: dict[str, Any] | None = None,
                     schema: dict[str, Any] | None = None) -> dict[str, str]:
    """The ``sales`` hybrid table on an in-process cluster: the schema, a 2-partition embedded-log topic, the
    REALTIME half (one replica) and the OFFLINE half; returns the stream configs to produce with."""
    cluster.add_schema(schema or SCHEMA)
    cluster.create_topic("sales", 2)
    configs = cluster.log_stream_configs("sales")
    cluster.add_table({"tableName": "sales", "tableType": "REALTIME",
                       "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "1"},
                       "tableIndexConfig": {"streamConfigs": configs}})
    cluster.add_table(offline_config or offline_table(replication=1))
    return dict(configs)
