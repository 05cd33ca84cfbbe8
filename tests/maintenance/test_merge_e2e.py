"""MergeRollupTask end to end on a multi-process cluster (controller, 2 servers, broker as processes) with a real
local[2] Spark session: small segments merged per hour into segments of the configured size while queries run
(every answer exact, before, during and after the swap); a rollup level keeps sums per dimension; a job
SIGKILLed after its push, or failing after its replace but before its watermarks, leaves the table answering as before
and the rerun completes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from cuvee.controller import faults
from cuvee.maintenance.jobs import run_merge_rollup
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA, metadata_push, offline_table, rows

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

H = 3_600_000
QUERIES = ("SELECT COUNT(*), SUM(amount), DISTINCTCOUNT(id), MIN(ts), MAX(ts) FROM {t}",
           "SELECT country, COUNT(*), SUM(amount) FROM {t} GROUP BY country ORDER BY country",
           "SELECT id, country, ts FROM {t} ORDER BY id LIMIT 5000")


def merge_table(name: str, **level: str) -> dict[str, Any]:
    table = offline_table(name, replication=2)
    settings = {"bucketTimePeriod": "1h", "bufferTimePeriod": "1h", "maxNumParallelBuckets": "100", **level}
    table["task"] = {"taskTypeConfigsMap": {"MergeRollupTask": {f"1hour.{k}": v for k, v in settings.items()}}}
    return table


def create(cluster: dict[str, Any], table: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    schema = http.post(f"{controller}/schemas", json={**SCHEMA, "schemaName": table["tableName"]})
    assert schema.status_code == 200, schema.text
    created = http.post(f"{controller}/tables", json=table)
    assert created.status_code == 200, created.text


def answers(cluster: dict[str, Any], table: str) -> list[Any] | None:
    out = []
    for sql in QUERIES:
        doc = cluster["http"].post(f"{cluster['broker']}/query/sql", json={"sql": sql.format(t=table)}).json()
        if doc.get("exceptions"):
            return None
        out.append(doc["resultTable"]["rows"])
    return out


def served(cluster: dict[str, Any], table: str) -> list[str]:
    view = cluster["http"].get(f"{cluster['controller']}/tables/{table}/externalview").json()["OFFLINE"] or {}
    lineage = cluster["http"].get(f"{cluster['controller']}/segments/{table}/lineage").json()["lineageEntries"]
    hidden = {s for e in lineage.values()
              for s in (e["segmentsFrom"] if e["state"] == "COMPLETED" else e["segmentsTo"])}
    return sorted(s for s in view if s not in hidden)


def push_small(cluster: dict[str, Any], table: str, hours: range, per_hour: int, rows_each: int,
               first_id: int = 0) -> None:
    tmp = cluster["root"] / f"build-{table}-{first_id}"
    tmp.mkdir()
    n = first_id
    for hour in hours:
        for k in range(per_hour):
            data = rows(range(n, n + rows_each), hour * H)
            response = metadata_push(cluster["http"], cluster["controller"], cluster["deepStore"], tmp,
                                     f"{table}_small_{hour}_{k}", data, table=table)
            assert response.status_code == 200, response.text
            n += rows_each


def settled(cluster: dict[str, Any], table: str, segments: int) -> list[Any]:
    wait_until(lambda: len(served(cluster, table)) == segments and answers(cluster, table) is not None, 60,
               interval=0.2, message=lambda: f"{served(cluster, table)}")
    found = answers(cluster, table)
    assert found is not None
    return found


class Watcher:
    """Queries the table over and over while a job runs; every answer must be the expected one."""

    def __init__(self, cluster: dict[str, Any], table: str, expected: list[Any]):
        self.cluster, self.table, self.expected = cluster, table, expected
        self.stop, self.count, self.wrong = threading.Event(), 0, []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            got = answers(self.cluster, self.table)
            self.count += 1
            if got != self.expected:
                self.wrong.append(got)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_small_segments_merge_per_hour_while_queries_run(spark: Any, cluster: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    create(cluster, merge_table("hits", maxNumRecordsPerSegment="250"))
    push_small(cluster, "hits", range(0, 3), per_hour=4, rows_each=100)  # 12 segments, 400 rows an hour
    before = settled(cluster, "hits", 12)
    due = http.get(f"{controller}/tasks/hits").json()["tasks"]["MergeRollupTask"]["due"]
    assert [(d["windowStartMs"], d["segments"], d["rows"]) for d in due] == [(0, 4, 400), (H, 4, 400), (2 * H, 4, 400)]

    with Watcher(cluster, "hits", before) as watcher:
        summary = run_merge_rollup(spark, controller, "hits")
        after = settled(cluster, "hits", 6)  # 400 rows an hour in segments of at most 250
    assert watcher.count > 0 and watcher.wrong == []
    assert (summary.status, summary.segments_in, summary.segments_out, summary.rows_in, summary.rows_out) == (
        "SUCCEEDED", 12, 6, 1200, 1200)
    assert after == before
    assert all(name.startswith("merged_1hour_") for name in served(cluster, "hits"))
    state = http.get(f"{controller}/tasks/hits").json()["tasks"]["MergeRollupTask"]
    assert state["due"] == [] and state["watermarks"]["1hour"] >= 3 * H and state["lastRun"]["status"] == "SUCCEEDED"
    assert run_merge_rollup(spark, controller, "hits").status == "NOTHING_TO_DO"  # merged segments stay merged


def test_a_rollup_keeps_sums_per_dimension(spark: Any, cluster: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    table = merge_table("rolled", mergeType="rollup", roundBucketTimePeriod="1h")
    create(cluster, table)
    push_small(cluster, "rolled", range(0, 2), per_hour=3, rows_each=50)
    sums = "SELECT country, SUM(amount) FROM rolled GROUP BY country ORDER BY country"
    settled(cluster, "rolled", 6)
    before = http.post(f"{cluster['broker']}/query/sql", json={"sql": sums}).json()["resultTable"]["rows"]
    summary = run_merge_rollup(spark, controller, "rolled")
    assert (summary.rows_in, summary.segments_out) == (300, 2)
    settled(cluster, "rolled", 2)
    after = http.post(f"{cluster['broker']}/query/sql", json={"sql": sums}).json()["resultTable"]["rows"]
    assert after == before
    # ids are dimensions: every (id, country, hour) row was distinct, so rollup keeps 300 rows, times rounded
    count = http.post(f"{cluster['broker']}/query/sql",
                      json={"sql": "SELECT COUNT(*), COUNT(DISTINCT ts) FROM rolled"}).json()["resultTable"]["rows"]
    assert count == [[300, 2]]


def kill_job_at(cluster: dict[str, Any], table: str, point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUVEE_FAULTS": f"{point}=kill", "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "cuvee", "pipeline", "merge-rollup", "--controller",
                           cluster["controller"], "--table", table, "--master", "local[1]"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])


def test_a_job_killed_at_each_step_leaves_the_table_answering_and_the_rerun_completes(
        spark: Any, cluster: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    create(cluster, merge_table("killed"))
    push_small(cluster, "killed", range(0, 2), per_hour=3, rows_each=40)
    before = settled(cluster, "killed", 6)

    job = kill_job_at(cluster, "killed", "maintenance.after_push")
    assert job.returncode == -9, job.stderr[-2000:]
    lineage = http.get(f"{controller}/segments/killed/lineage").json()["lineageEntries"]
    assert [e["state"] for e in lineage.values()] == ["IN_PROGRESS"]
    assert len(served(cluster, "killed")) == 6
    for _ in range(5):  # pushed, never switched to: exactly the old rows
        assert answers(cluster, "killed") == before
    state = http.get(f"{controller}/tasks/killed").json()["tasks"]["MergeRollupTask"]
    assert state["running"] is not None and state["watermarks"] == {}

    faults.FAULTS.add(faults.MAINTENANCE_AFTER_REPLACE)  # in this process: a second Spark JVM start saved
    try:
        with pytest.raises(faults.FaultInjected):  # reverts the dead entry, replaces, dies before the watermarks
            run_merge_rollup(spark, controller, "killed")
    finally:
        faults.FAULTS.discard(faults.MAINTENANCE_AFTER_REPLACE)
    assert settled(cluster, "killed", 2) == before
    assert http.get(f"{controller}/tasks/killed").json()["tasks"]["MergeRollupTask"]["watermarks"] == {}

    rerun = run_merge_rollup(spark, controller, "killed")  # nothing left to merge: the watermarks catch up
    assert rerun.status == "NOTHING_TO_DO" and rerun.watermarks.get("1hour", 0) >= 2 * H
    assert settled(cluster, "killed", 2) == before
    states = [e["state"] for e in http.get(f"{controller}/segments/killed/lineage").json()["lineageEntries"].values()]
    assert sorted(states) == ["COMPLETED", "REVERTED"]
    state = http.get(f"{controller}/tasks/killed").json()["tasks"]["MergeRollupTask"]
    assert state["running"] is None and state["watermarks"]["1hour"] >= 2 * H


def test_a_realtime_tables_committed_segments_merge_while_it_consumes(spark: Any, cluster: dict[str, Any]) -> None:
    """The seed's wish: slow partitions leave many small committed segments; merged, with consumption going on
    before, during and after, and every count exact. Consuming segments and each partition's latest stream
    segment are never touched."""
    from cuvee.stream import open_admin, open_producer
    from tests.e2e.support import log_stream

    http, controller = cluster["http"], cluster["controller"]
    stream = log_stream(cluster["root"], "slow", flush_rows=100)
    with open_admin(stream) as admin:
        admin.create_topic("slow", 2)
    table = {"tableName": "slow", "tableType": "REALTIME",
             "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "2"},
             "tableIndexConfig": {"streamConfigs": stream},
             "task": {"taskTypeConfigsMap": {"MergeRollupTask": {
                 "1hour.bucketTimePeriod": "1h", "1hour.bufferTimePeriod": "1h", "1hour.maxNumParallelBuckets": "100"}}}}
    create(cluster, table)

    def produce(ids: range) -> None:
        with open_producer(stream) as producer:
            producer.produce_many((str(i).encode(), orjson.dumps(
                {"id": i, "country": ("us", "fr", "de")[i % 3], "amount": float(i % 7), "ts": (i // 200) * H + i}))
                for i in ids)
            producer.flush()

    produce(range(0, 900))  # hours 0..4, ~4 committed segments a partition
    count = "SELECT COUNT(*) FROM slow"

    def rows_now() -> Any:
        doc = http.post(f"{cluster['broker']}/query/sql", json={"sql": count}).json()
        return None if doc.get("exceptions") else doc["resultTable"]["rows"][0][0]

    wait_until(lambda: rows_now() == 900, 60, interval=0.2, message=lambda: f"{rows_now()}")
    before = answers(cluster, "slow")
    ideal = http.get(f"{controller}/tables/slow/idealstate").json()["REALTIME"]
    consuming = {s for s, replicas in ideal.items() if "CONSUMING" in replicas.values()}

    fake = {"segmentName": "slow_pushed", "downloadUri": "file:///nowhere", "crc": 1, "totalDocs": 1, "sizeBytes": 1}
    pushed = http.post(f"{controller}/v2/segments", params={"tableName": "slow", "tableType": "REALTIME"},
                       json={"segments": [fake]})
    assert pushed.status_code == 400 and "fed by its stream" in pushed.json()["error"]
    for wrong in sorted(consuming)[:1]:  # a consuming segment (a partition's latest) is never replaced
        refused = http.post(f"{controller}/segments/slow/startReplaceSegments", params={"type": "REALTIME"},
                            json={"segmentsFrom": [wrong], "segmentsTo": ["slow_m"]})
        assert refused.status_code == 400 and "not committed" in refused.json()["error"], refused.text

    with Watcher(cluster, "slow", before) as watcher:
        summary = run_merge_rollup(spark, controller, "slow")
    assert watcher.count > 0 and watcher.wrong == []
    assert summary.status == "SUCCEEDED" and summary.segments_in >= 2 and summary.rows_in == summary.rows_out
    lineage = http.get(f"{controller}/segments/slow/lineage", params={"type": "REALTIME"}).json()["lineageEntries"]
    [entry] = lineage.values()
    assert entry["state"] == "COMPLETED" and not set(entry["segmentsFrom"]) & consuming
    assert all(name.startswith("merged_1hour_") for name in entry["segmentsTo"])
    assert answers(cluster, "slow") == before

    produce(range(900, 1200))  # consumption goes on: the next segments commit and count exactly
    wait_until(lambda: rows_now() == 1200, 60, interval=0.2, message=lambda: f"{rows_now()}")
    distinct = http.post(f"{cluster['broker']}/query/sql",
                         json={"sql": "SELECT DISTINCTCOUNT(id), SUM(amount) FROM slow"}).json()["resultTable"]["rows"]
    assert distinct == [[1200, float(sum(i % 7 for i in range(1200)))]]
