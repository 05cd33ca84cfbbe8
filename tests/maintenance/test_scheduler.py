"""The lead controller's scheduler launches a due MergeRollupTask as a `cuvee pipeline` child process (a real
local[1] Spark job) and the table's segments get merged with exact answers; a second launch while one runs is
refused (409); a job that dies without reporting is recorded as FAILED with its exit status; the runs are counted
in the controller's metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.cli.main import main
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA, metadata_push, offline_table, rows

pytestmark = [pytest.mark.spark]

H = 3_600_000
SQL = "SELECT COUNT(*), SUM(amount), DISTINCTCOUNT(id), MAX(ts) FROM {t}"


def merge_table(name: str) -> dict[str, Any]:
    table = offline_table(name, replication=1)
    table["task"] = {"taskTypeConfigsMap": {"MergeRollupTask": {
        "1hour.bucketTimePeriod": "1h", "1hour.bufferTimePeriod": "1h", "1hour.maxNumParallelBuckets": "10"}}}
    return table


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    root = tmp_path_factory.mktemp("scheduler")
    tasks = {"mode": "local", "interval_seconds": 0.5, "spark_master": "local[1]", "max_concurrent_jobs": 1,
             "log_dir": str(root / "task-logs")}
    with InProcessCluster(root, servers=1, controller={"tasks": tasks, "lineage_end_timeout_seconds": 60}) as c:
        yield c


def tasks_of(cluster: InProcessCluster, table: str) -> dict[str, Any]:
    return cluster.http.get(f"{cluster.controller_url}/tasks/{table}").json()["tasks"]["MergeRollupTask"]


def test_a_due_merge_is_launched_and_runs_to_the_end(cluster: InProcessCluster, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.add_schema({**SCHEMA, "schemaName": "sched"})
    # the task is configured once every segment is in: a scheduler pass between two pushes would see a window of
    # one segment, needing no merge, and move the watermark past the rows still to come (CI, stop 21)
    config = merge_table("sched")
    cluster.add_table({k: v for k, v in config.items() if k != "task"})
    for i in range(6):
        response = metadata_push(cluster.http, cluster.controller_url, cluster.deep_store, tmp_path,
                                 f"sched_small_{i}", rows(range(i * 50, i * 50 + 50), (i // 3) * H), table="sched")
        assert response.status_code == 200, response.text
    updated = cluster.http.put(f"{cluster.controller_url}/tables/sched", json=config)
    assert updated.status_code == 200, updated.text
    sql = SQL.format(t="sched")
    wait_until(lambda: cluster.query(sql)["resultTable"]["rows"][0][0] == 300, 30)
    before = cluster.query(sql)["resultTable"]["rows"]

    # the scheduler sees the due windows and launches the job by itself
    wait_until(lambda: (tasks_of(cluster, "sched")["lastRun"] or {}).get("status") == "SUCCEEDED", 180,
               interval=0.5, message=lambda: f"{tasks_of(cluster, 'sched')}")
    state = tasks_of(cluster, "sched")
    assert state["lastRun"]["segmentsIn"] == 6 and state["lastRun"]["segmentsOut"] == 2
    assert state["due"] == [] and state["watermarks"]["1hour"] >= 2 * H and state["scheduler"] == "local"
    wait_until(lambda: cluster.query(sql)["resultTable"]["rows"] == before, 30)
    segments = cluster.http.get(f"{cluster.controller_url}/segments/sched", params={"type": "OFFLINE"}).json()
    metrics = cluster.http.get(f"{cluster.controller_url}/metrics").text
    assert 'cuvee_controller_task_runs_total{status="SUCCEEDED",table="sched_OFFLINE",task_type="MergeRollupTask"}' \
        in metrics
    assert segments  # the merged ones (and the replaced ones until retention deletes them)

    capsys.readouterr()
    assert main(["status", "--controller", cluster.controller_url, "--json"]) == 0
    listed = {entry["table"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listed["sched"]["tasks"]["MergeRollupTask"]["lastRun"]["status"] == "SUCCEEDED"
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells at 80 columns
    assert main(["status", "--controller", cluster.controller_url, "--table", "sched"]) == 0
    printed = capsys.readouterr().out
    assert "maintenance tasks" in printed and "MergeRollupTask" in printed and "6→2" in printed


def test_run_now_is_refused_while_running_and_a_dead_job_is_recorded(cluster: InProcessCluster) -> None:
    cluster.add_schema({**SCHEMA, "schemaName": "broken"})
    cluster.add_table(merge_table("broken"))
    scheduler = cluster.controller.task_scheduler

    def none_running() -> bool:
        scheduler.reap()
        return not scheduler.launches

    wait_until(none_running, 120, interval=0.5)  # the last test's job reported, then still stopped its Spark
    first = cluster.http.post(f"{cluster.controller_url}/tasks/broken/MergeRollupTask/run")
    assert first.status_code == 200, first.text
    again = cluster.http.post(f"{cluster.controller_url}/tasks/broken/MergeRollupTask/run")
    if scheduler.running("broken", "MergeRollupTask") is not None:
        assert again.status_code == 409 and "is running" in again.json()["error"]
    wait_until(lambda: scheduler.running("broken", "MergeRollupTask") is None, 120, interval=0.5)
    # nothing due and nothing to merge: the job itself reported
    assert (tasks_of(cluster, "broken")["lastRun"] or {}).get("status") == "NOTHING_TO_DO"

    pid = first.json()["pid"]
    assert pid > 0
    wait_until(none_running, 120, interval=0.5)
    scheduler.config = type(scheduler.config)(**{**scheduler.config.__dict__, "spark_master": "no-such-master://x"})
    try:
        launched = cluster.http.post(f"{cluster.controller_url}/tasks/broken/MergeRollupTask/run")
        assert launched.status_code == 200
        wait_until(lambda: scheduler.running("broken", "MergeRollupTask") is None, 120, interval=0.5)
    finally:
        scheduler.config = type(scheduler.config)(**{**scheduler.config.__dict__, "spark_master": "local[1]"})
    last = tasks_of(cluster, "broken")["lastRun"]
    assert last["status"] == "FAILED" and "exited with status" in last["message"], last
    assert tasks_of(cluster, "broken")["running"] is None


def test_a_report_without_a_recorded_start_is_refused(cluster: InProcessCluster) -> None:
    """A run whose task state was deleted with its table half since it started must not write its old watermarks
    into a new state: its report is refused (409); a run that is not the one recorded as running (presumed dead,
    or of a half made anew) is heard but moves no watermark; the running one's do."""
    cluster.add_schema({**SCHEMA, "schemaName": "orphan"})
    cluster.add_table(merge_table("orphan"))
    url = f"{cluster.controller_url}/tasks/orphan/MergeRollupTask"
    report = {"runId": "r1", "status": "SUCCEEDED", "watermarks": {"1hour": 3 * H}}
    refused = cluster.http.post(f"{url}/finish", json=report)
    assert refused.status_code == 409 and "not kept" in refused.json()["error"]
    assert tasks_of(cluster, "orphan").get("watermarks") in (None, {}, [])
    assert cluster.http.post(f"{url}/start", json={"runId": "r1"}).status_code == 200
    assert cluster.http.post(f"{url}/start", json={"runId": "r2"}).status_code == 200  # r1 presumed dead
    assert cluster.http.post(f"{url}/finish", json=report).status_code == 200  # heard, but not the running one
    assert tasks_of(cluster, "orphan").get("watermarks") in (None, {}, [])
    assert cluster.http.post(f"{url}/finish", json={**report, "runId": "r2"}).status_code == 200
    assert tasks_of(cluster, "orphan")["watermarks"] == {"1hour": 3 * H}
