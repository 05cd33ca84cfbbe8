"""A REALTIME table's partition config changed while segments consume: a consuming segment is pruned only under
the function its record says its replicas check its rows with (written by the controller when it created the
segment), never under a config its rows were not checked against. Two tables on one cluster (two servers, all rows
in consuming segments): one whose function changes from Murmur to Modulo (rows keyed by Murmur), one partitioned
only after its rows, produced round robin, were consumed. Each point lookup answers as DuckDB does."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pytest

from cuvee.segment.partitioning import PartitionSpec, partitions
from cuvee.stream import open_producer
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

COLUMNS = [{"name": "uid", "dataType": "LONG"}, {"name": "page", "dataType": "STRING"}]
KEYED = [{"uid": (i * 7919) % 613, "page": f"p{i % 7}"} for i in range(400)]
SPREAD = [{"uid": i % 50, "page": f"p{i % 7}"} for i in range(400)]
CONFIGS: dict[str, dict[str, str]] = {}  # each table's stream configs


def _table(name: str, configs: dict[str, str], function: str | None) -> dict[str, Any]:
    index: dict[str, Any] = {"streamConfigs": configs}
    if function is not None:
        index["segmentPartitionConfig"] = {"columnPartitionMap": {"uid": {"functionName": function,
                                                                           "numPartitions": 4}}}
    return {"tableName": name, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
            "routing": {"segmentPrunerTypes": ["partition"]}, "tableIndexConfig": index}


def _partition(uid: int, function: str) -> int:
    return int(partitions(pa.array([uid], pa.int64()), PartitionSpec("uid", function, 4))[0])


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with tempfile.TemporaryDirectory(prefix="cuvee-rtchange-") as root, \
            InProcessCluster(Path(root), servers=2) as running:
        for name, rows, function in (("fnchange", KEYED, "Murmur"), ("added", SPREAD, None)):
            running.create_topic(name, 4)
            running.add_schema({"schemaName": name, "dimensionFieldSpecs": COLUMNS})
            configs = CONFIGS[name] = running.log_stream_configs(
                name, **{"realtime.segment.flush.threshold.rows": "100000"})
            running.add_table(_table(name, configs, function))
            if function is not None:
                running.produce(configs, rows, key_field="uid")  # keyed: stream partition = Murmur partition
            else:
                with open_producer(configs) as producer:  # round robin: every partition holds every uid
                    for i, row in enumerate(rows):
                        producer.produce(orjson.dumps(row), partition=i % 4)
                    producer.flush()
            wait_until(lambda: running.scalar(f"SELECT COUNT(*) FROM {name}") == len(rows), 60,
                       message=f"{name}: rows consumed")
        yield running


def _change(cluster: InProcessCluster, name: str, function: str) -> None:
    """PUT the table with ``function`` and wait until the broker routes by it."""
    answer = cluster.http.put(f"{cluster.controller_url}/tables/{name}_REALTIME",
                              json=_table(name, CONFIGS[name], function))
    assert answer.status_code == 200, answer.text

    def routed() -> bool:
        spec = cluster.broker.view.snapshot.tables[f"{name}_REALTIME"].partition_spec
        return spec is not None and spec.function == function
    wait_until(routed, 20, message=f"{name}: the broker routes by {function}")


def _oracle(rows: list[dict[str, Any]], sql: str) -> int:
    table = pa.Table.from_pylist(rows, schema=pa.schema([("uid", pa.int64()), ("page", pa.string())]))
    with duckdb.connect() as con:
        con.register("t", table)
        return int(con.execute(sql).fetchone()[0])  # type: ignore[index]


def test_changing_the_function_never_prunes_segments_checked_under_the_old_one(cluster: InProcessCluster) -> None:
    _change(cluster, "fnchange", "Modulo")
    moved = sorted({r["uid"] for r in KEYED if _partition(r["uid"], "Murmur") != _partition(r["uid"], "Modulo")})
    assert len(moved) > 20
    for uid in moved[:20]:
        answer = cluster.query(f"SELECT COUNT(*) FROM fnchange WHERE uid = {uid}")
        assert answer["exceptions"] == []
        assert answer["resultTable"]["rows"] == [[_oracle(KEYED, f"SELECT COUNT(*) FROM t WHERE uid = {uid}")]], uid
        assert answer.get("numSegmentsPrunedByBroker", 0) == 0  # checked under Murmur: not pruned under Modulo
    listed = ",".join(str(u) for u in moved[:80])
    assert cluster.scalar(f"SELECT COUNT(*) FROM fnchange WHERE uid IN ({listed})") == \
        _oracle(KEYED, f"SELECT COUNT(*) FROM t WHERE uid IN ({listed})")
    assert cluster.scalar("SELECT COUNT(DISTINCT uid) FROM fnchange") == len({r["uid"] for r in KEYED})
    # committed now: the partitions a replica computed under the function its segment started with are not kept
    # (the controller keeps a commit's partitions only under the table's function now)
    answer = cluster.http.post(f"{cluster.controller_url}/tables/fnchange_REALTIME/forceCommit")
    assert answer.status_code == 200, answer.text
    wait_until(lambda: len(cluster.committed_segments("fnchange_REALTIME")) == 4, 60, message="force commit done")
    store = cluster.broker.view.store
    for segment in cluster.committed_segments("fnchange_REALTIME"):
        found = store.find_segment("fnchange_REALTIME", segment)
        assert found is not None and found.record.partitions is None, found
    uid = moved[0]
    assert cluster.scalar(f"SELECT COUNT(*) FROM fnchange WHERE uid = {uid}") == \
        _oracle(KEYED, f"SELECT COUNT(*) FROM t WHERE uid = {uid}")


def test_adding_a_partition_config_never_prunes_segments_whose_rows_were_not_checked(
        cluster: InProcessCluster) -> None:
    _change(cluster, "added", "Murmur")
    for uid in range(50):
        answer = cluster.query(f"SELECT COUNT(*) FROM added WHERE uid = {uid}")
        assert answer["exceptions"] == []
        assert answer["resultTable"]["rows"] == [[8]], uid  # DuckDB: 400 rows over 50 uids
    assert cluster.scalar("SELECT COUNT(DISTINCT uid) FROM added") == 50
