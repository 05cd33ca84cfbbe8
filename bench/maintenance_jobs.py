"""Rows/s of the stream-side maintenance jobs (issue 11) in local[2] Spark: RealtimeToOfflineSegmentsTask on a
hybrid table and UpsertCompactionTask on an upsert table, each fed ``--rows`` rows through the embedded log into
a cluster with a process per role. Figures are printed; nothing is asserted (MergeRollupTask: bench/maintenance.py).

    .venv/bin/python bench/maintenance_jobs.py [--job rto|compact|both] [--rows 10000000] [--keys N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.pipeline.session import spark_session
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until

D = 86_400_000
DAY0 = 1_704_067_200_000  # 2024-01-01
SCHEMA = {"dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
          "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
          "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                                  "granularity": "1:MILLISECONDS"}]}


def stream_configs(root: Path, topic: str, flush_rows: int) -> dict[str, str]:
    return {"streamType": "log", "stream.log.topic.name": topic, "stream.log.dir": str(root / "stream"),
            "stream.log.consumer.prop.auto.offset.reset": "smallest",
            "realtime.segment.flush.threshold.rows": str(flush_rows)}


def produce(configs: dict[str, str], rows: int, row: Any) -> float:
    """Messages keyed by the row's ``id``: an upsert table's stream must be partitioned by its primary key."""
    started = time.monotonic()
    with open_producer(configs) as producer:
        for start in range(0, rows, 100_000):
            batch = [row(i) for i in range(start, min(rows, start + 100_000))]
            producer.produce_many((str(r["id"]).encode(), orjson.dumps(r)) for r in batch)
        producer.flush()
    return time.monotonic() - started


def count(http: httpx.Client, broker: str, sql: str, options: str = "") -> Any:
    doc = http.post(f"{broker}/query/sql", json={"sql": sql, "queryOptions": options}).json()
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0][0]


def committed(http: httpx.Client, controller: str, table: str) -> int:
    docs = http.get(f"{controller}/segments/{table}/metadata", params={"type": "REALTIME"}).json()
    return sum(d["totalDocs"] for d in docs.values() if d["status"] == "DONE")


def bench_rto(spark: Any, http: httpx.Client, info: dict[str, Any], root: Path, rows: int, days: int) -> None:
    controller, broker = info["controller"], info["broker"]
    configs = stream_configs(root, "trips", max(10_000, rows // (days * 4)))
    with open_admin(configs) as admin:
        admin.create_topic("trips", 2)
    assert http.post(f"{controller}/schemas", json={**SCHEMA, "schemaName": "trips"}).status_code == 200
    assert http.post(f"{controller}/tables", json={
        "tableName": "trips", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "1"},
        "tableIndexConfig": {"streamConfigs": configs},
        "task": {"taskTypeConfigsMap": {"RealtimeToOfflineSegmentsTask": {"bucketTimePeriod": "1d",
                                                                           "bufferTimePeriod": "1d"}}}}).status_code == 200
    assert http.post(f"{controller}/tables", json={"tableName": "trips", "tableType": "OFFLINE",
                                                    "segmentsConfig": {"timeColumnName": "ts", "replication": "1"}}
                     ).status_code == 200
    step = days * D // rows
    seconds = produce(configs, rows, lambda i: {"id": i, "country": f"c{i % 40}", "amount": float(i % 97),
                                                "ts": DAY0 + i * step})
    print(f"produced {rows:,} rows in {seconds:.1f} s")
    started = time.monotonic()
    wait_until(lambda: count(http, broker, "SELECT COUNT(*) FROM trips") == rows, 3600, interval=2)
    print(f"consumed in {time.monotonic() - started:.1f} s; committed {committed(http, controller, 'trips'):,} rows")
    from cuvee.maintenance.rto_job import run_realtime_to_offline

    moved = total = 0.0
    for _ in range(days):
        started = time.monotonic()
        summary = run_realtime_to_offline(spark, controller, "trips")
        took = time.monotonic() - started
        if summary.status != "SUCCEEDED":
            break
        moved, total = moved + summary.rows_out, total + took
        print(f"realtime-to-offline run: {summary.rows_in:,} rows read, {summary.rows_out:,} moved in "
              f"{summary.segments_out} segment(s), {took:.1f} s")
    print(f"realtime-to-offline: {moved:,.0f} rows moved in {total:.1f} s ({moved / max(total, 1e-9):,.0f} rows/s)")
    print(f"hybrid COUNT(*) after: {count(http, broker, 'SELECT COUNT(*) FROM trips'):,} (expected {rows:,})")


def bench_compact(spark: Any, http: httpx.Client, info: dict[str, Any], root: Path, rows: int, keys: int) -> None:
    controller, broker = info["controller"], info["broker"]
    configs = stream_configs(root, "accts", max(10_000, rows // 40))
    with open_admin(configs) as admin:
        admin.create_topic("accts", 2)
    schema = {**SCHEMA, "schemaName": "accts", "primaryKeyColumns": ["id"]}
    assert http.post(f"{controller}/schemas", json=schema).status_code == 200
    assert http.post(f"{controller}/tables", json={
        "tableName": "accts", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "1"},
        "tableIndexConfig": {"streamConfigs": configs}, "routing": {"instanceSelectorType": "strictReplicaGroup"},
        "upsertConfig": {"mode": "FULL"},
        "task": {"taskTypeConfigsMap": {"UpsertCompactionTask": {"bufferTimePeriod": "1h",
                                                                 "invalidRecordsThresholdPercent": "10"}}}}
                     ).status_code == 200
    seconds = produce(configs, rows, lambda i: {"id": i % keys, "country": f"c{i % 40}", "amount": float(i % 97),
                                                "ts": i})
    print(f"produced {rows:,} rows over {keys:,} keys in {seconds:.1f} s")
    started = time.monotonic()
    wait_until(lambda: count(http, broker, "SELECT COUNT(*) FROM accts", "skipUpsert=true") == rows, 3600,
               interval=2)
    print(f"consumed in {time.monotonic() - started:.1f} s; committed {committed(http, controller, 'accts'):,} rows")
    from cuvee.maintenance.compaction_job import run_upsert_compaction

    print(f"COUNT(*) before: {count(http, broker, 'SELECT COUNT(*) FROM accts')} (expected {keys:,})")
    started = time.monotonic()
    summary = run_upsert_compaction(spark, controller, "accts")
    took = time.monotonic() - started
    print(f"compact-upsert: {summary.status}, {summary.segments_in} segment(s), {summary.rows_in:,} rows read, "
          f"{summary.rows_out:,} kept, in {took:.1f} s ({summary.rows_in / max(took, 1e-9):,.0f} rows/s) "
          f"{summary.message}")
    seen: list[Any] = []  # the replicas reload the compacted copies: every answer meanwhile should be exact

    def sampled() -> bool:
        seen.append(count(http, broker, "SELECT COUNT(*) FROM accts"))
        return len(seen) >= 5

    wait_until(sampled, 60, interval=1)
    print(f"COUNT(*) after, five answers a second apart: {seen} (expected {keys:,})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=("rto", "compact", "both"), default="both")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=0, help="compact: primary keys the rows overwrite (default rows/10)")
    parser.add_argument("--days", type=int, default=10, help="rto: days the rows span")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-jobs-") as tmp:
        root = Path(tmp)
        info = up(LocalClusterSpec(dir=root / "cluster", servers=1, overrides={
            "controller": {"tasks.mode": "external", "lineage_end_timeout_seconds": 1800}}))
        spark = spark_session("local[2]", "cuvee-bench-jobs", **{"spark.ui.enabled": "false",
                                                                 "spark.driver.memory": "4g"})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            with httpx.Client(timeout=600) as http:
                if args.job in ("rto", "both"):
                    bench_rto(spark, http, info, root, args.rows, args.days)
                if args.job in ("compact", "both"):
                    bench_compact(spark, http, info, root, args.rows, args.keys or max(1, args.rows // 10))
        finally:
            spark.stop()
            down(root / "cluster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
