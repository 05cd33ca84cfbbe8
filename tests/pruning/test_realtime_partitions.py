"""A REALTIME table partitioned on ``uid`` (Murmur, 4 partitions) over a stream keyed by ``uid``, two servers,
committed and consuming segments: the broker prunes both kinds by partition, sums COUNT(DISTINCT uid) per server,
and answers as DuckDB does over the same rows. A producer that then writes rows of another partition into a stream
partition never makes a matching row vanish: that consuming segment stops being pruned (the others still are) and
the distinct count goes back to shipping values. ``cuvee.pruning.stream_partitions`` says why."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pytest

from cuvee.pruning.stream_partitions import MixedPartitions
from cuvee.segment.partitioning import PartitionSpec, partitions
from cuvee.stream import open_producer
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.broker.helpers import spy_summed_plans

SCHEMA = {"schemaName": "hits", "dimensionFieldSpecs": [{"name": "uid", "dataType": "LONG"},
                                                        {"name": "page", "dataType": "STRING"}],
          "metricFieldSpecs": [{"name": "ms", "dataType": "LONG"}]}
SPEC = PartitionSpec("uid", "Murmur", 4)
ROWS = [{"uid": (i * 7919) % 613, "page": f"p{i % 7}", "ms": i % 100} for i in range(1200)]


def _table(configs: dict[str, str]) -> dict[str, Any]:
    return {"tableName": "hits", "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
            "routing": {"segmentPrunerTypes": ["partition"]},
            "tableIndexConfig": {"streamConfigs": configs, "segmentPartitionConfig": {"columnPartitionMap": {
                "uid": {"functionName": "Murmur", "numPartitions": 4}}}}}


def _partition(uid: int) -> int:
    return int(partitions(pa.array([uid], pa.int64()), SPEC)[0])


@pytest.fixture(scope="module")
def cluster() -> Iterator[InProcessCluster]:
    with tempfile.TemporaryDirectory(prefix="cuvee-rtpart-") as root, \
            InProcessCluster(Path(root), servers=2) as running:
        running.create_topic("hits", 4)
        running.add_schema(SCHEMA)
        configs = running.log_stream_configs("hits", **{"realtime.segment.flush.threshold.rows": "120"})
        running.add_table(_table(configs))
        running.produce(configs, ROWS, key_field="uid")  # keyed by uid: stream partition = Murmur partition
        wait_until(lambda: running.scalar("SELECT COUNT(*) FROM hits") == len(ROWS), 60, message="rows consumed")
        wait_until(lambda: _settled(running), 60, message="commits done, one consuming segment per partition")
        yield running


def _settled(cluster: InProcessCluster) -> bool:
    ideal = cluster.ideal_state("hits_REALTIME")
    consuming = [s for s, r in ideal.items() if "CONSUMING" in r.values()]
    view = cluster.broker.view.snapshot.tables.get("hits_REALTIME")
    return len(consuming) == 4 and len(ideal) > 4 and view is not None and set(view.view.segments) == set(ideal)


@pytest.fixture
def summed(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per query, whether the broker sent the summed distinct-count plan (``QueryPlan.disjoint``)."""
    return spy_summed_plans(monkeypatch)


def _oracle(rows: list[dict[str, Any]], sql: str) -> list[list[Any]]:
    hits = pa.Table.from_pylist(rows, schema=pa.schema([("uid", pa.int64()), ("page", pa.string()),
                                                        ("ms", pa.int64())]))
    with duckdb.connect() as con:
        con.register("hits", hits)
        return [list(r) for r in con.execute(sql.replace("DISTINCTCOUNT(", "COUNT(DISTINCT ")).fetchall()]


def _answer(cluster: InProcessCluster, sql: str) -> dict[str, Any]:
    answer = cluster.query(sql)
    assert answer["exceptions"] == [], answer["exceptions"]
    return answer


def test_committed_realtime_segments_record_their_rows_partitions(cluster: InProcessCluster) -> None:
    for segment in cluster.committed_segments("hits_REALTIME"):
        stream_partition = int(segment.split("__")[1])
        meta = cluster.segment_metadata("hits_REALTIME", segment)
        assert meta["partitionMetadata"] == {"column": "uid", "functionName": "Murmur", "numPartitions": 4,
                                             "partitions": [stream_partition]}, segment


def test_a_point_lookup_prunes_committed_and_consuming_segments_of_other_partitions(
        cluster: InProcessCluster) -> None:
    ideal = cluster.ideal_state("hits_REALTIME")
    for uid in (0, 5, 17, 612, 1000):
        sql = f"SELECT COUNT(*), SUM(ms), MIN(page) FROM hits WHERE uid = {uid}"
        answer = _answer(cluster, sql)
        assert answer["resultTable"]["rows"] == _oracle(ROWS, sql), uid
        others = [s for s in ideal if int(s.split("__")[1]) != _partition(uid)]
        assert any("CONSUMING" in ideal[s].values() for s in others)
        # every segment of the other three partitions, their consuming segments among them, left out
        assert answer["numSegmentsPrunedByBroker"] == len(others), uid
    sql = "SELECT uid, COUNT(*) FROM hits WHERE uid IN (3, 4, 9, 600) GROUP BY uid ORDER BY uid"
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(ROWS, sql)
    assert answer["numSegmentsPrunedByBroker"] == sum(1 for s in ideal if int(s.split("__")[1]) not in
                                                      {_partition(u) for u in (3, 4, 9, 600)})
    # an IN list of 64 values or more (planned as raw text) prunes too
    listed = [u for u in range(0, 900) if _partition(u) == 2][:80]
    sql = f"SELECT COUNT(*), SUM(ms) FROM hits WHERE uid IN ({', '.join(map(str, listed))})"
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(ROWS, sql) and answer["resultTable"]["rows"][0][0] > 0
    assert answer["numSegmentsPrunedByBroker"] == sum(1 for s in ideal if int(s.split("__")[1]) != 2)


def test_a_distinct_count_of_the_partition_column_is_summed_per_server(cluster: InProcessCluster,
                                                                       summed: list[bool]) -> None:
    for sql in ("SELECT COUNT(DISTINCT uid) FROM hits", "SELECT page, DISTINCTCOUNT(uid) FROM hits GROUP BY page "
                                                          "ORDER BY page LIMIT 10",
                "SELECT COUNT(DISTINCT uid) FROM hits WHERE ms < 50"):
        answer = _answer(cluster, sql)
        assert answer["resultTable"]["rows"] == _oracle(ROWS, sql), sql
        assert answer["numServersQueried"] == 2
    assert summed == [True, True, True]


def test_rows_of_another_partition_in_a_stream_partition_are_never_lost(cluster: InProcessCluster,
                                                                       summed: list[bool]) -> None:
    # uids of partition 0 written into stream partition 1 by a producer keyed otherwise
    strays = [{"uid": u, "page": "stray", "ms": 1} for u in range(2000, 2200) if _partition(u) == 0][:5]
    configs = cluster.log_stream_configs("hits")
    with open_producer(configs) as producer:
        for row in strays:
            producer.produce(orjson.dumps(row), partition=1)
        producer.flush()
    rows = ROWS + strays
    consuming = next(s for s, r in cluster.ideal_state("hits_REALTIME").items()
                     if "CONSUMING" in r.values() and s.split("__")[1] == "1")
    wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM hits") == len(rows), 30, message="strays consumed")
    store = cluster.broker.view.store
    # the replica recorded the segment before its stray rows were readable
    recorded = store.find(MixedPartitions, store.paths.mixed_partitions("hits_REALTIME"))
    assert recorded is not None and recorded.record.segments == {consuming: 0}
    # held back (consumer.stray_publish_grace_seconds) until the broker saw the report: readable means not pruned
    assert consuming not in cluster.broker.view.snapshot.tables["hits_REALTIME"].partitions
    sql = f"SELECT COUNT(*), MIN(page) FROM hits WHERE uid = {strays[0]['uid']}"
    answer = _answer(cluster, sql)
    assert answer["resultTable"]["rows"] == _oracle(rows, sql) == [[1, "stray"]]
    ideal = cluster.ideal_state("hits_REALTIME")
    # the other two partitions' segments still pruned; partition 1's consuming segment is read
    assert answer["numSegmentsPrunedByBroker"] == sum(1 for s in ideal if s.split("__")[1] in ("2", "3")) \
        + sum(1 for s in ideal if s.split("__")[1] == "1" and s != consuming)
    sql = "SELECT COUNT(DISTINCT uid) FROM hits"
    assert _answer(cluster, sql)["resultTable"]["rows"] == _oracle(rows, sql)
    assert summed[-1] is False  # partition 0's values are in two partitions' segments now: values shipped
