"""Pinot's virtual columns ``$segmentName``, ``$docId`` and ``$hostName`` on a real cluster.

Two servers registered under different hosts (127.0.0.1 and 127.0.0.2, both loopback), a realtime table with
one replica per segment so that its segments spread over both, committed segments (copied into DuckDB's own
storage: ``native_copy_min_rows`` = 1, so the queries that do not name a virtual column read those copies) and a
consuming segment per partition. Every answer is checked against what the cluster says of its segments: the
segment metadata's ``totalDocs``, the ideal state's instances."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.config import Schema
from cuvee.controller.catalog import Catalog
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "vc"
ROWS = 230
SCHEMA: dict[str, Any] = {"schemaName": TABLE,
                          "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
                          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root = tmp_path_factory.mktemp("virtual")
    with InProcessCluster(root, servers=1, server={"native_copy_min_rows": 1}) as cluster:
        cluster.add_server(host="127.0.0.2")
        configs = cluster.realtime_table(SCHEMA, partitions=2, replicas=1, flush_rows=50)
        cluster.produce(configs, ({"id": i, "v": i % 7} for i in range(ROWS)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == ROWS, 30)
        wait_until(lambda: len(cluster.committed_segments(TABLE)) >= 4, 30, message="segments never committed")
        yield cluster


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]]:
    answer = cluster.query(sql)
    assert not answer.get("exceptions"), (sql, answer["exceptions"])
    return answer["resultTable"]["rows"]


def _host_of(instance: str) -> str:
    return instance.split("_")[1]  # Server_<host>_<port>


def test_segment_counts_match_the_segment_metadata(cluster: InProcessCluster) -> None:
    answer = cluster.query(f"SELECT $segmentName, COUNT(*) FROM {TABLE} GROUP BY 1 LIMIT 100")
    assert not answer.get("exceptions"), answer["exceptions"]
    assert answer["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "LONG"]
    counts = dict(map(tuple, answer["resultTable"]["rows"]))
    committed = cluster.committed_segments(TABLE)
    for segment in committed:
        assert counts[segment] == cluster.segment_metadata(TABLE, segment)["totalDocs"] == 50
    consuming = sorted(set(counts) - set(committed))
    assert consuming and all(s in cluster.ideal_state(TABLE) for s in consuming)
    assert sum(counts.values()) == ROWS


def test_filter_on_segment_name_and_doc_ids(cluster: InProcessCluster) -> None:
    segment = cluster.committed_segments(TABLE)[-1]
    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE $segmentName = '{segment}'") == [[50]]
    assert _rows(cluster, f"SELECT COUNT(*), MAX({TABLE}.$docId) FROM {TABLE} WHERE {TABLE}.$segmentName = "
                          f"'{segment}'") == [[50, 49]]  # qualified by the table's name
    # a segment's doc ids are its row positions: 0 .. totalDocs - 1, each once
    ids = _rows(cluster, f"SELECT $docId FROM {TABLE} WHERE $segmentName = '{segment}' ORDER BY $docId LIMIT 100")
    assert [row[0] for row in ids] == list(range(50))
    per_segment = _rows(cluster, f"SELECT $segmentName, MIN($docId), MAX($docId), COUNT(*) FROM {TABLE} "
                                 "GROUP BY $segmentName LIMIT 100")
    assert all(low == 0 and high == n - 1 for _, low, high, n in per_segment)
    # a range of doc ids picks that many rows in every segment holding them
    sizes = [n for *_, n in per_segment]
    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE $docId BETWEEN 10 AND 19") == \
        [[sum(min(max(n - 10, 0), 10) for n in sizes)]]
    # the same row's doc id and stored values: the first doc of a committed segment is its first row
    first = _rows(cluster, f"SELECT id, v FROM {TABLE} WHERE $segmentName = '{segment}' AND $docId = 0")
    assert len(first) == 1 and first[0][1] == first[0][0] % 7


def test_host_name_is_the_serving_server_host(cluster: InProcessCluster) -> None:
    ideal = cluster.ideal_state(TABLE)
    rows = _rows(cluster, f"SELECT $segmentName, $hostName, COUNT(*) FROM {TABLE} GROUP BY 1, 2 LIMIT 100")
    assert len(rows) == len({s for s, *_ in rows})  # one host per segment (one replica each)
    hosts = {segment: host for segment, host, _ in rows}
    for segment, host in hosts.items():
        assert host in {_host_of(instance) for instance in ideal[segment]}
    assert set(hosts.values()) == {"127.0.0.1", "127.0.0.2"}
    by_host = dict(map(tuple, _rows(cluster, f"SELECT $hostName, COUNT(*) FROM {TABLE} GROUP BY $hostName "
                                             "ORDER BY $hostName")))
    assert sum(by_host.values()) == ROWS and len(by_host) == 2


def test_star_leaves_them_out_and_plain_queries_still_answer(cluster: InProcessCluster) -> None:
    answer = cluster.query(f"SELECT * FROM {TABLE} LIMIT 1")
    assert answer["resultTable"]["dataSchema"]["columnNames"] == ["id", "v"]
    assert _rows(cluster, f"SELECT SUM(v), COUNT(*) FROM {TABLE} WHERE id >= 0") == \
        [[float(sum(i % 7 for i in range(ROWS))), ROWS]]
    unknown = cluster.query(f"SELECT $partition FROM {TABLE}")
    assert unknown["exceptions"][0]["errorCode"] == 710
    for sql in (f"SELECT id FROM {TABLE} WHERE $docId = ?", f"SELECT id FROM {TABLE} WHERE id = ?"):
        [error] = cluster.query(sql)["exceptions"]  # a parameter with no value, not an unknown column '$?'
        assert error["errorCode"] == 700 and "prepared statement parameters" in error["message"], error
        assert "Traceback" not in error["message"] and "$?" not in error["message"]


def test_a_schema_column_may_not_be_named_like_one(cluster: InProcessCluster) -> None:
    schema = {"schemaName": "clash", "dimensionFieldSpecs": [{"name": "$DocId", "dataType": "INT"}]}
    response = cluster.http.post(f"{cluster.controller_url}/schemas", json=schema)
    assert response.status_code == 400 and "$docId" in response.text


def test_a_column_stored_under_such_a_name_before_the_upgrade_wins(tmp_path: Path) -> None:
    # a schema stored before Cuvee answered virtual columns (written to the metadata store as it was then, past
    # today's create-time check) still loads on every role, and its column answers, not the virtual one
    legacy = {"schemaName": "legacy", "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"},
                                                             {"name": "$docId", "dataType": "INT"}]}
    with InProcessCluster(tmp_path, servers=1) as cluster:
        Catalog(cluster.controller.store).create_schema(Schema.from_json(legacy))
        cluster.create_topic("legacy", 1)
        configs = cluster.log_stream_configs("legacy", **{"realtime.segment.flush.threshold.rows": "5"})
        cluster.add_table({"tableName": "legacy", "tableType": "REALTIME",
                           "segmentsConfig": {"replicasPerPartition": "1"},
                           "tableIndexConfig": {"streamConfigs": configs}})
        cluster.produce(configs, ({"id": i, "$docId": 100 + i} for i in range(12)), key_field="id")
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM legacy") == 12, 30)
        wait_until(lambda: len(cluster.committed_segments("legacy")) >= 2, 30, message="segments never committed")
        cluster.add_server(host="127.0.0.2")  # a server starting with the schema stored
        expected = [[i, 100 + i] for i in range(12)]
        assert _rows(cluster, "SELECT id, $docId FROM legacy ORDER BY id LIMIT 20") == expected
        assert _rows(cluster, "SELECT id, $DOCID FROM legacy WHERE $docId >= 105 ORDER BY id LIMIT 3 "
                              "OPTION(useMultistageEngine=true)") == expected[5:8]
        assert _rows(cluster, "SELECT $segmentName, COUNT(*) FROM legacy GROUP BY 1 LIMIT 10")  # the others still
        answer = cluster.http.post(f"{cluster.controller_url}/schemas", json={**legacy, "schemaName": "other"})
        assert answer.status_code == 400 and "reserved" in answer.text


def test_multi_stage_queries_read_them_in_their_leaves(cluster: InProcessCluster) -> None:
    single = sorted(map(tuple, _rows(cluster, f"SELECT $segmentName, COUNT(*) FROM {TABLE} GROUP BY 1 LIMIT 100")))
    staged = _rows(cluster, f"SELECT s, COUNT(*) FROM (SELECT $segmentName AS s FROM {TABLE}) GROUP BY s LIMIT 100")
    assert sorted(map(tuple, staged)) == single
    joined = _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} a JOIN {TABLE} b ON a.id = b.id WHERE a.$docId < 5")
    assert joined == [[5 * len(single)]]  # every segment holds at least 5 rows
    hosts = _rows(cluster, f"WITH x AS (SELECT $hostName AS h FROM {TABLE}) SELECT h, COUNT(*) FROM x GROUP BY h "
                           "ORDER BY h")
    assert [h for h, _ in hosts] == ["127.0.0.1", "127.0.0.2"] and sum(n for _, n in hosts) == ROWS
