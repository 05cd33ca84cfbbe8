"""Tables partitioned on a column, built and pushed one segment per partition as a batch job does: what the
colocated-join tests and benchmark serve (``cuvee.multistage.colocated_join``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from cuvee.segment.partitioning import partition_spec, partitions

# two tables a join on customerId relates (the tests' and the benchmark's)
ORDERS_SCHEMA = {"schemaName": "orders", "dimensionFieldSpecs": [
    {"name": "customerId", "dataType": "STRING"}, {"name": "status", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}]}
CUSTOMERS_SCHEMA = {"schemaName": "customers", "dimensionFieldSpecs": [
    {"name": "customerId", "dataType": "STRING"}, {"name": "region", "dataType": "STRING"},
    {"name": "tier", "dataType": "STRING"}]}


def partitioned_table(name: str, column: str, num_partitions: int, function: str = "Murmur",
                      replication: int = 1) -> dict[str, Any]:
    """An OFFLINE table config partitioned on ``column``."""
    return {"tableName": name, "tableType": "OFFLINE", "segmentsConfig": {"replication": str(replication)},
            "tableIndexConfig": {"segmentPartitionConfig": {"columnPartitionMap": {
                column: {"functionName": function, "numPartitions": num_partitions}}}}}


def by_partition(rows: pa.Table, schema: dict[str, Any], table: dict[str, Any]) -> list[pa.Table]:
    """``rows`` split by the table's partition function: the non-empty partitions, in partition order."""
    spec = partition_spec(TableConfig.from_json(table).indexing.extra, Schema.from_json(schema))
    assert spec is not None, "the table has no segmentPartitionConfig"
    parts = partitions(rows.column(spec.column).combine_chunks(), spec)
    return [rows.filter(pa.array(parts == p)) for p in range(spec.num_partitions) if np.any(parts == p)]


def push_segment(http: httpx.Client, controller_url: str, deep_store_uri: str, schema: dict[str, Any],
                 table: dict[str, Any], segment: str, rows: pa.Table, *, metadata: bool = True) -> None:
    """Build ``segment`` from ``rows`` and push it: by metadata (the archive put in the deep store first, as a
    batch job does), or as an archive (``metadata=False``: a tar push)."""
    config = TableConfig.from_json(table)
    name = config.table_name
    with tempfile.TemporaryDirectory(prefix="cuvee-partitioned-") as tmp:
        built = build_segment(rows, Schema.from_json(schema), config.indexing, Path(tmp) / "built", segment,
                              table_name=config.name_with_type, overwrite=True)
        archive = pack(built.path, Path(tmp) / f"{segment}{ARCHIVE_SUFFIX}")
        params = {"tableName": name, "tableType": "OFFLINE"}
        if metadata:
            uri = open_deepstore(deep_store_uri).put(archive, f"{config.name_with_type}/{segment}{ARCHIVE_SUFFIX}")
            pushed = http.post(f"{controller_url}/v2/segments", params=params, json={"segments": [{
                "segmentName": segment, "downloadUri": uri, "crc": built.crc, "totalDocs": built.total_docs,
                "sizeBytes": archive.stat().st_size, "timeMin": None, "timeMax": None}]})
        else:
            with open(archive, "rb") as f:
                pushed = http.post(f"{controller_url}/v2/segments", params=params,
                                   files={"file": (archive.name, f, "application/octet-stream")})
        if pushed.status_code >= 300:
            raise AssertionError(f"push of {segment} failed: {pushed.status_code} {pushed.text[:500]}")
