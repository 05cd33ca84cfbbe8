"""The ``cuvee`` data source with real local[2] Spark against an in-process cluster: every type read back as
written (TIMESTAMP as Spark timestamps, Spark timestamps into LONG milliseconds), overwrite and append writes, a
write with rows that do not fit fails and leaves the table as it was; a hybrid table read exactly once (consuming
segments only when asked), pushed filters and the column list, and a segment whose deep-store archive is gone read
from a server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import add_hybrid_sales

pytestmark = [pytest.mark.spark]

DAY = 86_400_000
UTC = dt.timezone.utc

TYPED_SCHEMA = {
    "schemaName": "typed",
    "dimensionFieldSpecs": [
        {"name": "id", "dataType": "INT"}, {"name": "name", "dataType": "STRING"},
        {"name": "flag", "dataType": "BOOLEAN"}, {"name": "tags", "dataType": "STRING", "singleValueField": False},
        {"name": "payload", "dataType": "BYTES"}, {"name": "big", "dataType": "LONG"},
        {"name": "score", "dataType": "FLOAT"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:TIMESTAMP", "granularity": "1:MILLISECONDS"},
        {"name": "created", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}],
}
TYPED_COLUMNS = ["id", "name", "flag", "tags", "payload", "big", "score", "amount", "ts", "created"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path_factory.mktemp("datasource"), servers=2,
                          controller={"lineage_end_timeout_seconds": 30}) as c:
        yield c


def reader(spark: Any, cluster: InProcessCluster, table: str, **options: str) -> Any:
    read = spark.read.format("cuvee").option("controller", cluster.controller_url).option("table", table)
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def writer(frame: Any, cluster: InProcessCluster, table: str, mode: str) -> None:
    frame.write.format("cuvee").option("controller", cluster.controller_url).option("table", table) \
        .option("rowsPerSegment", "700").mode(mode).save()


def typed_rows(ids: range) -> list[tuple[Any, ...]]:
    start = dt.datetime(2026, 11, 1, tzinfo=UTC)
    return [(i, f"n{i % 13}", i % 2 == 0, [f"t{i % 3}", f"t{i % 5}"], bytes([i % 256, 7]), i * 10_000_000_000,
             float(i % 9) / 4, i * 1.5, start + dt.timedelta(hours=i % 72, milliseconds=i % 1000),
             start + dt.timedelta(seconds=i)) for i in ids]


def typed_frame(spark: Any, ids: range) -> Any:
    ddl = ("id INT, name STRING, flag BOOLEAN, tags ARRAY<STRING>, payload BINARY, big BIGINT, score FLOAT, "
           "amount DOUBLE, ts TIMESTAMP, created TIMESTAMP")
    return spark.createDataFrame(typed_rows(ids), ddl)


def expected_typed(ids: range) -> list[tuple[Any, ...]]:
    """How the rows read back: ``created`` (a Spark timestamp written into a LONG column) as epoch milliseconds."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    return [(*r[:9], (r[9] - epoch) // dt.timedelta(milliseconds=1)) for r in typed_rows(ids)]


def read_typed(spark: Any, cluster: InProcessCluster) -> list[tuple[Any, ...]]:
    frame = reader(spark, cluster, "typed")
    assert frame.columns == TYPED_COLUMNS
    assert [f.dataType.simpleString() for f in frame.schema.fields] == [
        "int", "string", "boolean", "array<string>", "binary", "bigint", "float", "double", "timestamp", "bigint"]
    out = []
    for row in frame.collect():
        values = list(row)
        values[3] = list(values[3])
        values[4] = bytes(values[4])
        values[8] = values[8].astimezone(UTC)  # Spark gives local time; compare instants
        out.append(tuple(values))
    return sorted(out)


def test_types_overwrite_append_and_a_failed_write(spark: Any, cluster: InProcessCluster) -> None:
    cluster.add_schema(TYPED_SCHEMA)
    cluster.add_table({"tableName": "typed", "tableType": "OFFLINE",
                       "segmentsConfig": {"timeColumnName": "ts", "replication": "2"}})
    writer(typed_frame(spark, range(0, 2000)), cluster, "typed", "append")
    assert read_typed(spark, cluster) == expected_typed(range(0, 2000))

    writer(typed_frame(spark, range(5000, 5300)), cluster, "typed", "overwrite")
    assert read_typed(spark, cluster) == expected_typed(range(5000, 5300))
    writer(typed_frame(spark, range(6000, 6100)), cluster, "typed", "append")
    assert read_typed(spark, cluster) == sorted(expected_typed(range(5000, 5300)) + expected_typed(range(6000, 6100)))

    bad = spark.createDataFrame([("not a number", "x")], "id STRING, name STRING")
    with pytest.raises(Exception, match="do not fit the schema"):
        writer(bad, cluster, "typed", "overwrite")
    assert len(read_typed(spark, cluster)) == 400  # the failed overwrite changed nothing
    stored = list((Path(cluster.deep_store.removeprefix("file://")) / "typed_OFFLINE").glob("*.tar.zst"))
    segments = cluster.http.get(f"{cluster.controller_url}/segments/typed", params={"type": "OFFLINE"}).json()
    served = set(segments[0]["OFFLINE"])
    assert {p.name.split(".", 1)[0] for p in stored} >= served  # the aborted write left no archive behind
    assert len(stored) <= len(served) + 6  # replaced ones wait for the grace period; nothing from the failed write


def day_rows(day: int, ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "country": ("us", "fr", "de")[i % 3], "amount": float(i % 5),
             "ts": day * DAY + (i % 1000) * 60_000} for i in ids]


def as_tuples(items: Any) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["country"], r["amount"], r["ts"]) for r in items)


def test_hybrid_read_exactly_once_filters_columns_and_peer_fallback(spark: Any, cluster: InProcessCluster) -> None:
    http, ctl = cluster.http, cluster.controller_url
    configs = add_hybrid_sales(cluster)
    offline = [r for day in range(0, 3) for r in day_rows(day, range(day * 1000, day * 1000 + 1000))]
    realtime = day_rows(2, range(2000, 3000)) + day_rows(3, range(3000, 3500))  # day 2 in both halves
    cluster.produce(configs, realtime, "id")
    frame = spark.createDataFrame([(r["id"], r["country"], r["amount"], r["ts"]) for r in offline],
                                  "id BIGINT, country STRING, amount DOUBLE, ts BIGINT")
    writer(frame, cluster, "sales", "append")
    boundary = max(r["ts"] for r in offline) - DAY
    every = [r for r in offline if r["ts"] <= boundary] + [r for r in realtime if r["ts"] > boundary]
    sql = "SELECT COUNT(*) FROM sales"
    wait_until(lambda: cluster.query(sql)["resultTable"]["rows"] == [[len(every)]], 30)

    def read(**options: str) -> list[tuple[Any, ...]]:
        return sorted(tuple(row) for row in reader(spark, cluster, "sales", **options).collect())

    assert read(includeConsuming="true") == as_tuples(every)  # the broker's answer, row for row
    assert read() == as_tuples(r for r in offline if r["ts"] <= boundary)  # realtime is all consuming yet

    assert http.post(f"{ctl}/tables/sales/forceCommit").status_code == 200
    wait_until(lambda: read() == as_tuples(every), 60, interval=0.5)

    narrowed = reader(spark, cluster, "sales", columns="ts,id,country", segmentsPerPartition="1") \
        .filter("id >= 1500 AND id < 3200 AND country = 'fr' AND ts IS NOT NULL")
    assert narrowed.columns == ["ts", "id", "country"]
    assert sorted(tuple(r) for r in narrowed.collect()) == sorted(
        (r["ts"], r["id"], "fr") for r in every if 1500 <= r["id"] < 3200 and r["country"] == "fr")
    # every one of those filters was taken by the reader (so it must be exact): Spark keeps no Filter of its own
    assert "Filter" not in narrowed._jdf.queryExecution().optimizedPlan().toString()
    floats = reader(spark, cluster, "sales").filter("amount > 2.0")  # NaN order differs: left to Spark
    assert "Filter" in floats._jdf.queryExecution().optimizedPlan().toString()
    assert floats.count() == sum(1 for r in every if r["amount"] > 2.0)
    in_list = reader(spark, cluster, "sales").filter("country IN ('de') AND ts > 0")
    assert in_list.count() == sum(1 for r in every if r["country"] == "de")

    # the deep store lost an offline archive: the reader fetches that segment from the server holding it
    deep = Path(cluster.deep_store.removeprefix("file://")) / "sales_OFFLINE"
    victim = sorted(deep.glob("*.tar.zst"))[0]
    victim.unlink()
    assert read() == as_tuples(every)


def test_a_hybrid_table_on_date_strings_is_refused_by_name(spark: Any, cluster: InProcessCluster) -> None:
    cluster.add_schema({"schemaName": "dated", "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
                        "dateTimeFieldSpecs": [{"name": "day", "dataType": "STRING", "granularity": "1:DAYS",
                                                "format": "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd"}]})
    cluster.create_topic("dated", 1)
    cluster.add_table({"tableName": "dated", "tableType": "REALTIME",
                       "segmentsConfig": {"timeColumnName": "day", "replicasPerPartition": "1"},
                       "tableIndexConfig": {"streamConfigs": cluster.log_stream_configs("dated")}})
    cluster.add_table({"tableName": "dated", "tableType": "OFFLINE",
                       "segmentsConfig": {"timeColumnName": "day", "replication": "1"}})
    with pytest.raises(Exception, match="time column 'day' \\(STRING 1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd\\) is not"):
        reader(spark, cluster, "dated").collect()
