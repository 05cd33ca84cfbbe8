"""Segment maintenance on Spark (issue 11): rows/s of a MergeRollupTask run, and query latency on many small
segments before and after the merge.

A cluster with a process per role (controller, ``--servers`` servers, broker) serves an OFFLINE table of ``--rows``
rows in ``--segments`` hourly segments (built with the servers' builder and metadata-pushed, as an HOURLY ingest
would make them). Small queries are timed (p50/p90 over ``--runs``), the table's ``1day`` MergeRollupTask merges the hours into
days, the same queries are timed again. Figures are printed; nothing is asserted.

    .venv/bin/python bench/maintenance.py [--rows 10000000] [--segments 1000] [--runs 30] [--servers 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.maintenance.jobs import run_merge_rollup
from cuvee.pipeline.session import spark_session
from cuvee.testing.waiting import wait_until

H = 3_600_000
SCHEMA = {"schemaName": "sales",
          "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
          "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
          "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                                  "granularity": "1:MILLISECONDS"}]}
TABLE = {"tableName": "sales", "tableType": "OFFLINE",
         "segmentsConfig": {"timeColumnName": "ts", "replication": "1", "segmentPushFrequency": "HOURLY"},
         "tableIndexConfig": {"invertedIndexColumns": ["country"]},
         "task": {"taskTypeConfigsMap": {"MergeRollupTask": {
             "1day.bucketTimePeriod": "1d", "1day.bufferTimePeriod": "1d", "1day.maxNumParallelBuckets": "10000",
             "1day.maxNumRecordsPerSegment": "5000000"}}}}
QUERIES = ["SELECT COUNT(*) FROM sales",
           "SELECT SUM(amount) FROM sales WHERE country = 'c7'",
           "SELECT country, COUNT(*), SUM(amount) FROM sales GROUP BY country ORDER BY 2 DESC LIMIT 5",
           "SELECT MAX(ts) FROM sales WHERE ts < 360000000"]


def push_hours(controller: str, deep_store_uri: str, rows: int, hours: int, work: Path) -> int:
    """``hours`` small segments (one an hour, ``rows / hours`` rows each) built with the servers' builder, stored
    in the deep store and metadata-pushed in one call: fast to set up, the same segments an HOURLY ingest makes."""
    from cuvee.config import Schema, TableConfig
    from cuvee.pipeline.controller_client import ControllerClient
    from cuvee.pipeline.segments import BUCKET, PART, BuildSpec, build_groups

    rng = np.random.default_rng(7)
    per = rows // hours
    spec = BuildSpec(TableConfig.from_json(TABLE).to_json(), Schema.from_json(SCHEMA).to_json(), deep_store_uri,
                     "bench", rows_per_segment=per + 1, run_id="bench")
    built = []
    for hour in range(hours):
        ids = np.arange(hour * per, (hour + 1) * per, dtype=np.int64)
        batch = pa.record_batch({"id": ids, "country": pa.array([f"c{i}" for i in rng.integers(0, 40, per)]),
                                 "amount": rng.random(per) * 100, "ts": hour * H + rng.integers(0, H, per),
                                 BUCKET: np.full(per, hour, np.int64), PART: np.zeros(per, np.int32)})
        built += list(build_groups([batch], spec))
    with ControllerClient(controller) as client:
        client.push("sales", built)
    return len(built)


def timed(http: httpx.Client, broker: str, runs: int) -> list[tuple[str, float, float, Any]]:
    out = []
    for sql in QUERIES:
        for _ in range(3):
            http.post(f"{broker}/query/sql", json={"sql": sql})
        times = []
        answer = None
        for _ in range(runs):
            started = time.perf_counter()
            doc = http.post(f"{broker}/query/sql", json={"sql": sql}).json()
            times.append((time.perf_counter() - started) * 1000)
            answer = doc["resultTable"]["rows"] if not doc.get("exceptions") else doc["exceptions"]
        times.sort()
        out.append((sql, statistics.median(times), times[int(len(times) * 0.9) - 1], answer))
    return out


def _close(a: Any, b: Any) -> bool:
    """Equal answers, floats within 1e-9 relative (a sum's order changes with the segments' grouping)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return bool(a == b)


def segment_count(http: httpx.Client, controller: str) -> int:
    """Segments served: in the external view and not hidden by lineage (replaced ones linger until retention)."""
    view = http.get(f"{controller}/tables/sales/externalview").json()["OFFLINE"] or {}
    lineage = http.get(f"{controller}/segments/sales/lineage").json()["lineageEntries"]
    hidden = {s for e in lineage.values() for s in (e["segmentsFrom"] if e["state"] == "COMPLETED"
                                                    else e["segmentsTo"])}
    return len(set(view) - hidden)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--segments", type=int, default=1000, help="hours of data: one small segment each")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--servers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuvee-bench-maint-") as tmp:
        root = Path(tmp)
        info = up(LocalClusterSpec(dir=root / "cluster", servers=args.servers,
                                   overrides={"controller": {"tasks.mode": "external",
                                                             "lineage_end_timeout_seconds": 1800}}))
        spark = spark_session("local[2]", "cuvee-bench-maintenance", **{"spark.ui.enabled": "false",
                                                                         "spark.driver.memory": "4g"})
        spark.sparkContext.setLogLevel("ERROR")
        try:
            http = httpx.Client(timeout=600)
            controller, broker = info["controller"], info["broker"]
            assert http.post(f"{controller}/schemas", json=SCHEMA).status_code == 200
            assert http.post(f"{controller}/tables", json=TABLE).status_code == 200
            started = time.monotonic()
            pushed = push_hours(controller, info["deepStore"], args.rows, args.segments, root)
            print(f"setup: {args.rows:,} rows in {pushed} segments built and pushed in {time.monotonic() - started:.1f} s")
            wait_until(lambda: segment_count(http, controller) == pushed, 1800, interval=1)
            count = "SELECT COUNT(*) FROM sales"
            wait_until(lambda: (http.post(f"{broker}/query/sql", json={"sql": count}).json().get("resultTable") or {})
                       .get("rows") == [[args.rows // args.segments * args.segments]], 600, interval=1)
            before = timed(http, broker, args.runs)

            started = time.monotonic()
            merge = run_merge_rollup(spark, controller, "sales")
            merge_s = time.monotonic() - started
            print(f"merge-rollup: {merge.rows_in:,} rows from {merge.segments_in} segments into "
                  f"{merge.segments_out} in {merge_s:.1f} s ({merge.rows_in / max(merge_s, 1e-9):,.0f} rows/s; "
                  f"{merge.tasks} Spark tasks)")
            wait_until(lambda: segment_count(http, controller) == merge.segments_out, 1800, interval=1)
            after = timed(http, broker, args.runs)
            print(f"\n{'query':<92} {'p50 before':>11} {'p50 after':>10} {'p90 before':>11} {'p90 after':>10}")
            for (sql, p50_b, p90_b, ans_b), (_, p50_a, p90_a, ans_a) in zip(before, after):
                same = "" if _close(ans_b, ans_a) else f"  ANSWERS DIFFER: {ans_b} != {ans_a}"
                print(f"{sql[:92]:<92} {p50_b:>9.1f}ms {p50_a:>8.1f}ms {p90_b:>9.1f}ms {p90_a:>8.1f}ms{same}")
            http.close()
        finally:
            spark.stop()
            down(root / "cluster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
