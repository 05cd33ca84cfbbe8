"""BYTES columns on an in-process cluster: a filter on one answers, and the queries after it too.

Segments hold BYTES dimensions dictionary-encoded; DuckDB 1.5 failed filtering a dictionary of binary values with an
internal error that invalidated the process-wide database, so every later query of the server (and of the broker,
in the same process here) failed until a restart. Both a column the table had from the start and one added by a
schema update (served as its default in the segments built before it, ``cuvee.evolution.serving``) are filtered."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "bt"
SCHEMA: dict[str, Any] = {"schemaName": TABLE,
                          "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"},
                                                  {"name": "b", "dataType": "BYTES"}],
                          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path, servers=1, server={"native_copy_bytes": 0}) as cluster:
        yield cluster


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]]:
    answer = cluster.query(sql)
    assert not answer.get("exceptions"), (sql, answer["exceptions"])
    return answer["resultTable"]["rows"]


def test_filters_on_bytes_columns_answer_and_later_queries_still_run(cluster: InProcessCluster) -> None:
    http, ctl = cluster.http, cluster.controller_url
    configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=50)
    cluster.produce(configs, ({"id": i, "v": 1, "b": "abcd" if i % 2 else "ff"} for i in range(120)), key_field="id")
    wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 120, 30)
    wait_until(lambda: len(cluster.committed_segments(TABLE)) >= 2, 30, message="no segment committed")

    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE b = from_hex('abcd')") == [[60]]
    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE b <> from_hex('ff')") == [[60]]
    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE b = from_hex('')") == [[0]]
    # the queries after them: the server's and the broker's DuckDB still run
    assert _rows(cluster, f"SELECT SUM(v), MAX(id) FROM {TABLE} WHERE id >= 10") == [[110.0, 119]]
    assert _rows(cluster, f"SELECT b, COUNT(*) FROM {TABLE} GROUP BY b ORDER BY b") == [["abcd", 60], ["ff", 60]]

    evolved = copy.deepcopy(SCHEMA)
    evolved["dimensionFieldSpecs"].append({"name": "x", "dataType": "BYTES", "defaultNullValue": "0aff"})
    assert http.put(f"{ctl}/schemas/{TABLE}", json=evolved, params={"reload": "true"}).status_code == 200

    def served() -> bool:
        answer = cluster.query(f"SELECT COUNT(*) FROM {TABLE} WHERE x = from_hex('0aff')")
        return not answer.get("exceptions") and answer["resultTable"]["rows"] == [[120]]

    wait_until(served, 30, message="the added BYTES column was never filtered")  # the segments built before it
    assert _rows(cluster, f"SELECT COUNT(*) FROM {TABLE} WHERE x = from_hex('') OR b = from_hex('ff')") == [[60]]
    assert _rows(cluster, f"SELECT SUM(v) FROM {TABLE} WHERE id < 10") == [[10.0]]
