"""The provisioning matrices against a hand-computed case, and ``cuvee provision`` on a real sample segment."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.cli.main import main
from cuvee.config.schema import Schema
from cuvee.config.table import TableConfig
from cuvee.provision import Measured, ProvisionInputs, matrices, measure
from cuvee.segment.builder import build_segment

GIB = 1024**3


def test_the_matrices_of_a_hand_computed_case() -> None:
    # 4 partitions, 2 replicas, 1,000 rows/s a partition, 24 h retention; the sample: 100 B/row committed,
    # 300 B/row while consuming.
    inputs = ProvisionInputs(partitions=4, replicas=2, rows_per_second=1000, hosts=(1, 2, 4), hours=(6, 12),
                             max_host_memory=48 * GIB, retention_hours=24)
    out = matrices(inputs, Measured(rows=1000, committed_bytes=100_000, consuming_bytes=300_000))
    # 6 h: 21.6 M rows a segment; 2.16 GB committed; 6.48 GB consuming each.
    # 2 hosts: 4 consuming segments a host (4 × 2 / 2): 25.92 GB; retention keeps 4 a partition: 4 × 2 × 4 / 2 = 16
    # segments a host: 34.56 GB; 60.48 GB in all > 48 GiB (51.54 GB): NA.
    assert out["memoryPerHost"][6][2] is None and out["segmentsQueriedPerHost"][6][2] is None
    # 4 hosts: 2 consuming (12.96 GB) + 8 served (17.28 GB) = 30.24 GB; 10 segments queried.
    assert out["memoryPerHost"][6][4] == 30_240_000_000
    assert out["consumingMemoryPerHost"][6][4] == 12_960_000_000
    assert out["optimalSegmentSize"][6][4] == 2_160_000_000
    assert out["segmentsQueriedPerHost"][6][4] == 10
    # 12 h: 43.2 M rows, 4.32 GB segments, retention keeps 2 a partition; 4 hosts: 2 × 12.96 + 4 × 4.32 = 43.2 GB.
    assert out["memoryPerHost"][12][4] == 43_200_000_000 and out["segmentsQueriedPerHost"][12][4] == 6
    assert all(out[m][h][1] is None for m in out for h in (6, 12))  # one host cannot hold two replicas apart
    with pytest.raises(ValueError):
        ProvisionInputs(partitions=0, replicas=1, rows_per_second=1, hosts=(1,), hours=(1,), max_host_memory=1,
                        retention_hours=1)


def test_cuvee_provision_measures_a_sample_segment_and_prints_the_matrices(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema_doc = {"schemaName": "events", "dimensionFieldSpecs": [{"name": "country", "dataType": "STRING"}],
                  "metricFieldSpecs": [{"name": "clicks", "dataType": "LONG"}]}
    table_doc = {"tableName": "events", "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "2"},
                 "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "events",
                                                        "stream.log.dir": str(tmp_path)}}}
    schema, table = Schema.from_json(schema_doc), TableConfig.from_json(table_doc)
    rows = pa.table({"country": [f"c{i % 40}" for i in range(5000)], "clicks": list(range(5000))})
    build_segment(rows, schema, table.indexing, tmp_path / "built", "sample")
    measured = measure(tmp_path / "built" / "sample", schema, table)
    assert measured.rows == 5000 and measured.committed_bytes > 0 and measured.consuming_bytes > 0
    (tmp_path / "schema.json").write_text(json.dumps(schema_doc))
    (tmp_path / "table.json").write_text(json.dumps(table_doc))
    args = ["provision", "--table", str(tmp_path / "table.json"), "--schema", str(tmp_path / "schema.json"),
            "--sample-segment", str(tmp_path / "built" / "sample"), "--partitions", "4", "--ingestion-rate", "500",
            "--num-hosts", "2,4", "--num-hours", "6,12", "--max-usable-host-memory", "2G", "--retention-hours", "24"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sample"]["rows"] == 5000 and set(doc["memoryPerHost"]) == {"6", "12"}
    expected = matrices(ProvisionInputs(4, 2, 500, (2, 4), (6, 12), 2 * GIB, 24), measured)
    assert doc["memoryPerHost"]["6"]["4"] == expected["memoryPerHost"][6][4]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "Memory used per host" in printed and "Segments queried per host" in printed
