"""Hybrid tables whose time column holds formatted date strings (SIMPLE_DATE_FORMAT, ClickBench's ``EventTime``), on
an in-process cluster: the OFFLINE half pushed as segments, the REALTIME half fed through the embedded log. The
boundary is Pinot's (the served offline segments' latest instant minus a day), shown in the column's format, and
every row is counted once — whether the pattern sorts as time (compared as strings) or not (``dd/MM/yyyy``: each
value parsed)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from cuvee.cluster.records import TimeBoundaryOverride
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.metastore import open_metastore
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import describe

DAY = 86_400_000
START = dt.datetime(2013, 7, 29, tzinfo=dt.UTC)  # days 0..3 cross a month: 29/07 .. 01/08 sorts wrongly as text


def schema(name: str, fmt: str, granularity: str) -> dict[str, Any]:
    return {"schemaName": name,
            "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
            "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
            "dateTimeFieldSpecs": [{"name": "t", "dataType": "STRING", "format": fmt, "granularity": granularity}]}


def instant(day: int, second: int) -> int:
    return int(START.timestamp() * 1000) + day * DAY + second * 1000


def item(i: int, millis: int, python_format: str) -> dict[str, Any]:
    text = dt.datetime.fromtimestamp(millis / 1000, dt.UTC).strftime(python_format)
    held = int(dt.datetime.strptime(text, python_format).replace(tzinfo=dt.UTC).timestamp() * 1000)  # as stored
    return {"id": i, "country": ("us", "fr", "de")[i % 3], "amount": float(i % 7), "t": text, "ms": held}


def as_table(items: list[dict[str, Any]]) -> pa.Table:
    return pa.table({"id": pa.array([r["id"] for r in items], pa.int64()), "country": [r["country"] for r in items],
                     "amount": pa.array([r["amount"] for r in items], pa.float64()), "t": [r["t"] for r in items]})


def push(cluster: InProcessCluster, tmp: Path, table: str, spec: dict[str, Any], name: str, data: pa.Table) -> None:
    config = TableConfig.from_json(offline_config(table))
    segment = build_segment(data, Schema.from_json(spec), config.indexing, tmp / "built", name, table_name=table,
                            time_column="t", overwrite=True)
    archive = pack(segment.path, tmp / f"{name}{ARCHIVE_SUFFIX}")
    uri = open_deepstore(cluster.deep_store).put(archive, f"{table}_OFFLINE/{name}{ARCHIVE_SUFFIX}")
    response = cluster.http.post(f"{cluster.controller_url}/v2/segments",
                                 params={"tableName": table, "tableType": "OFFLINE"},
                                 json={"segments": [describe(archive, uri)]})
    assert response.status_code == 200, response.text


def offline_config(table: str) -> dict[str, Any]:
    return {"tableName": table, "tableType": "OFFLINE",
            "segmentsConfig": {"timeColumnName": "t", "replication": "1"}}


def answer(cluster: InProcessCluster, sql: str) -> list[list[Any]] | None:
    doc = cluster.query(sql)
    return None if doc.get("exceptions") else doc["resultTable"]["rows"]


def duckdb_rows(items: list[dict[str, Any]], sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.register("every", as_table(items))
    return [list(r) for r in con.execute(sql).fetchall()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with InProcessCluster(tmp_path_factory.mktemp("hybrid_strings"), servers=2) as c:
        yield c


CASES = [  # table, format, granularity, the same pattern for Python, seconds between rows of a day
    ("seconds", "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss", "1:SECONDS", "%Y-%m-%d %H:%M:%S", 97),
    ("days", "1:DAYS:SIMPLE_DATE_FORMAT:yyyy-MM-dd", "1:DAYS", "%Y-%m-%d", 0),
    ("eu", "1:DAYS:SIMPLE_DATE_FORMAT:dd/MM/yyyy", "1:DAYS", "%d/%m/%Y", 0),
]


@pytest.mark.parametrize(("table", "fmt", "granularity", "python_format", "step"), CASES,
                         ids=[c[0] for c in CASES])
def test_hybrid_on_date_strings_counts_every_row_once(cluster: InProcessCluster, tmp_path: Path, table: str,
                                                      fmt: str, granularity: str, python_format: str,
                                                      step: int) -> None:
    spec = schema(table, fmt, granularity)
    cluster.add_schema(spec)
    cluster.create_topic(table, 2)
    configs = cluster.log_stream_configs(table)
    cluster.add_table({"tableName": table, "tableType": "REALTIME",
                       "segmentsConfig": {"timeColumnName": "t", "replicasPerPartition": "1"},
                       "tableIndexConfig": {"streamConfigs": configs}})
    cluster.add_table(offline_config(table))

    offline = {day: [item(day * 1000 + i, instant(day, i * step), python_format) for i in range(300)]
               for day in range(4)}  # days 0..3 (29/07 .. 01/08)
    latest = max(r["ms"] for items in offline.values() for r in items)
    boundary = latest - DAY  # Pinot's rule for a DAILY push: the latest end time minus one day
    realtime = [item(10_000 + i, instant(day, i * step), python_format) for day in (2, 3, 4, 5) for i in range(200)]
    # the boundary instant in both halves, and a second past it in the realtime half (a second of a SECONDS column)
    offline[3].append(item(50_000, boundary, python_format))
    realtime += [item(50_001, boundary, python_format), item(50_002, boundary + 1000, python_format)]
    cluster.produce(configs, [{k: v for k, v in r.items() if k != "ms"} for r in realtime], "id")
    wait_until(lambda: answer(cluster, f"SELECT COUNT(*) FROM {table}_REALTIME") == [[len(realtime)]], 30)
    for day, items in offline.items():
        push(cluster, tmp_path, table, spec, f"{table}_{day}", as_table(items))
    wait_until(lambda: answer(cluster, f"SELECT COUNT(*) FROM {table}_OFFLINE") == [[1201]], 30)

    every = [r for items in offline.values() for r in items if r["ms"] <= boundary] + \
        [r for r in realtime if r["ms"] > boundary]
    shown = dt.datetime.fromtimestamp(boundary / 1000, dt.UTC).strftime(python_format)
    doc = cluster.http.get(f"{cluster.controller_url}/tables/{table}/timeBoundary").json()
    assert doc == {"timeColumn": "t", "timeValue": shown}
    sql = f"SELECT COUNT(*), SUM(amount), COUNT(DISTINCT id) FROM {table}"
    expected = duckdb_rows(every, "SELECT COUNT(*), SUM(amount), COUNT(DISTINCT id) FROM every")
    wait_until(lambda: answer(cluster, sql) == expected, 30, message=lambda: f"{answer(cluster, sql)} != {expected}")
    ids = {row[0] for row in answer(cluster, f"SELECT id FROM {table} WHERE id >= 50000 LIMIT 10") or []}
    assert ids == ({50_000, 50_002} if step else {50_000})  # a DAYS column: the next second is the boundary's day
    groups = f"SELECT country, t, COUNT(*), SUM(amount) FROM {table} GROUP BY country, t ORDER BY country, t LIMIT 10000"
    assert answer(cluster, groups) == duckdb_rows(
        every, "SELECT country, t, COUNT(*), SUM(amount) FROM every GROUP BY country, t ORDER BY country, t")
    explain = answer(cluster, f"EXPLAIN PLAN FOR SELECT COUNT(*) FROM {table}") or []
    filters = sorted(m.group(1) for op, *_ in explain if (m := re.search(r"timeFilter:(t(?:<=|>)'[^']*')", op)))
    assert filters == [f"t<='{shown}'", f"t>'{shown}'"]


def test_an_explicit_boundary_a_date_string_column_cannot_hold_is_refused(cluster: InProcessCluster) -> None:
    for table, fmt in (("plain", "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss"),
                       ("zoned", "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss Z")):
        cluster.add_schema(schema(table, fmt, "1:SECONDS"))
        cluster.create_topic(table, 1)
        cluster.add_table({"tableName": table, "tableType": "REALTIME",
                           "segmentsConfig": {"timeColumnName": "t", "replicasPerPartition": "1"},
                           "tableIndexConfig": {"streamConfigs": cluster.log_stream_configs(table)}})
        cluster.add_table(offline_config(table))
    url = f"{cluster.controller_url}/tables/plain/timeBoundary"
    for value, error in ((10**17, "years 0001 to 9999"), (2**63 - 1, "years 0001 to 9999"),
                         (2**64, "64-bit integer")):
        response = cluster.http.post(url, params={"timeValue": value})
        assert response.status_code == 400 and error in response.text, response.text
    assert cluster.http.get(url).status_code == 404  # nothing was stored: the table's queries are untouched
    assert answer(cluster, "SELECT COUNT(*) FROM plain") == [[0]]
    zoned = cluster.http.post(f"{cluster.controller_url}/tables/zoned/timeBoundary", params={"timeValue": 0})
    assert zoned.status_code == 400 and "cannot split it" in zoned.text, zoned.text  # servers could not compare
    assert cluster.http.post(url, params={"timeValue": 253_402_300_799_999}).status_code == 200
    assert cluster.http.get(url).json() == {"timeColumn": "t", "timeValue": "9999-12-31 23:59:59"}
    assert answer(cluster, "SELECT COUNT(*) FROM plain") == [[0]]

    meta = open_metastore(cluster.metadata)  # one stored before the controller refused it: shown and split at the end
    try:
        ClusterStore(meta, "cuvee").put(ClusterStore(meta, "cuvee").paths.time_boundary("plain"),
                                        TimeBoundaryOverride("plain", 10**17))
    finally:
        meta.close()
    shown = {"timeColumn": "t", "timeValue": "9999-12-31 23:59:59"}
    assert cluster.http.get(url).json() == shown
    broker = f"{cluster.broker_url}/debug/timeBoundary/plain"
    wait_until(lambda: cluster.http.get(broker).json() == shown, 10, message=lambda: cluster.http.get(broker).text)
    assert answer(cluster, "SELECT COUNT(*) FROM plain") == [[0]]
