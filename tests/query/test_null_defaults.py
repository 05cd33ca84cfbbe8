"""Pinot's answer without null handling (a missing value reads as its column's default null value) and with it
(``enableNullHandling=true``: NULL), over committed and consuming segments, Arrow views and DuckDB copies."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import pytest

from cuvee.config import Schema
from cuvee.query.null_defaults import default_literal
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

SCHEMA = {
    "schemaName": "nulls",
    "dimensionFieldSpecs": [
        {"name": "id", "dataType": "LONG"},
        {"name": "s", "dataType": "STRING"},
        {"name": "c", "dataType": "STRING", "defaultNullValue": "none"},
        {"name": "i", "dataType": "INT"},
        {"name": "f", "dataType": "DOUBLE"},
        {"name": "b", "dataType": "BOOLEAN"},
        {"name": "by", "dataType": "BYTES"},
        {"name": "tags", "dataType": "STRING", "singleValueField": False},
    ],
    "metricFieldSpecs": [{"name": "m", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
}


def test_each_types_default_as_a_duckdb_literal() -> None:
    schema = Schema.from_json({**SCHEMA, "dateTimeFieldSpecs": SCHEMA["dateTimeFieldSpecs"]
                               + [{"name": "t2", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH"}],
                               "metricFieldSpecs": [{"name": "m", "dataType": "LONG"},
                                                    {"name": "mf", "dataType": "FLOAT"}]})
    got = {spec.name: duckdb.sql(f"SELECT {default_literal(spec)}").fetchone()[0] for spec in schema.fields}
    assert got["s"] == "null" and got["c"] == "none" and got["i"] == -2**31 and got["id"] == -2**63
    assert got["f"] == -math.inf and got["b"] is False and got["by"] == b"" and got["tags"] == ["null"]
    assert got["m"] == 0 and got["mf"] == 0.0 and got["t2"] == -2**63
    assert str(got["ts"]) == "1970-01-01 00:00:00"


@pytest.fixture(scope="module", params=["arrow views", "duckdb copies"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = {"native_copy_bytes": 64 << 20, "native_copy_min_rows": 1} if request.param == "duckdb copies" \
        else {"native_copy_bytes": 0}
    with InProcessCluster(tmp_path_factory.mktemp("nulls"), servers=1, server=server) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=6)
        full = {"s": "x", "c": "red", "i": 7, "f": 1.5, "b": True, "by": "0a", "tags": ["t"], "m": 3, "ts": 1000}
        rows = [{"id": n, **full} if n % 2 == 0 else {"id": n, "ts": 2000} for n in range(10)]
        cluster.produce(configs, rows, key_field="id")
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM nulls") == 10, 30)
        wait_until(lambda: len(cluster.committed_segments("nulls")) >= 1, 30)  # a committed and a consuming segment
        column_based = {"schemaName": "cb", "enableColumnBasedNullHandling": True, "dimensionFieldSpecs": [
            {"name": "id", "dataType": "LONG"}, {"name": "kept", "dataType": "STRING", "notNull": True},
            {"name": "open", "dataType": "STRING"}]}
        cb = cluster.realtime_table(column_based, partitions=1, replicas=1, flush_rows=1000)
        cluster.produce(cb, [{"id": 1, "kept": "k", "open": "o"}, {"id": 2}], key_field="id")
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM cb") == 2, 30)
        yield cluster


def rows(cluster: InProcessCluster, sql: str, **options: str) -> list[list[Any]]:
    answer = cluster.query(sql, **options)
    assert not answer["exceptions"], answer["exceptions"]
    return answer["resultTable"]["rows"]


def test_a_missing_value_reads_as_its_columns_default_as_pinot_answers_without_null_handling(
        cluster: InProcessCluster) -> None:
    assert rows(cluster, "SELECT s, c, COUNT(*) FROM nulls GROUP BY s, c ORDER BY s") == \
        [["null", "none", 5], ["x", "red", 5]]
    assert rows(cluster, "SELECT COUNT(*) FROM nulls WHERE s IS NULL OR i IS NULL") == [[0]]
    assert rows(cluster, "SELECT COUNT(i), MIN(i), SUM(m), COUNT(m), MIN(f) FROM nulls") == \
        [[10, -2147483648, 15, 10, "-Infinity"]]
    assert rows(cluster, "SELECT COUNT(*) FROM nulls WHERE c = 'none' AND b = false AND m = 0") == [[5]]
    assert rows(cluster, "SELECT tags, by FROM nulls WHERE id = 1") == [[["null"], ""]]
    assert rows(cluster, "SELECT id, s FROM nulls ORDER BY id LIMIT 2") == [[0, "x"], [1, "null"]]


def test_enable_null_handling_answers_sqls_null(cluster: InProcessCluster) -> None:
    assert rows(cluster, "SELECT s, COUNT(*) FROM nulls GROUP BY s ORDER BY s", enableNullHandling="true") == \
        [["x", 5], [None, 5]]
    assert rows(cluster, "SELECT COUNT(*) FROM nulls WHERE s IS NULL", enableNullHandling="true") == [[5]]
    assert rows(cluster, "SELECT COUNT(i), SUM(m) FROM nulls", enableNullHandling="true") == [[5, 15.0]]
    assert rows(cluster, "SET enableNullHandling = true; SELECT COUNT(*) FROM nulls WHERE c IS NULL") == [[5]]
    # column-based null handling: a notNull column keeps no nulls (Pinot's rule), the others do
    assert rows(cluster, "SELECT kept, open FROM cb ORDER BY id", enableNullHandling="true") == \
        [["k", "o"], ["null", None]]
    assert rows(cluster, "SELECT kept, open FROM cb ORDER BY id") == [["k", "o"], ["null", "null"]]
    bad = cluster.query("SELECT COUNT(*) FROM nulls", enableNullHandling="maybe")
    assert [e["errorCode"] for e in bad["exceptions"]] == [150]
