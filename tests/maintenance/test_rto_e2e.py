"""RealtimeToOfflineSegmentsTask end to end on a multi-process cluster (controller, 2 servers, broker as
processes) with a real local[2] Spark session: a hybrid table's realtime rows, streamed over several (old) days
and committed in small segments, move day by day into its offline half while queries run; every answer (COUNT,
SUM, DISTINCTCOUNT, MIN/MAX, GROUP BY, a selection) is exactly the same before, during and after, the time
boundary follows the moved days, a second run moves nothing twice, and a run SIGKILLed after its push leaves the
table answering exactly while the rerun completes; a run failing after a window's replace but before its
watermark leaves that window moved once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from cuvee.controller import faults
from cuvee.maintenance.rto_job import run_realtime_to_offline
from cuvee.pipeline.controller_client import PipelineError
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until
from tests.e2e.support import log_stream
from tests.maintenance.test_merge_e2e import Watcher, answers, served
from tests.offline.support import SCHEMA, offline_table

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

D = 86_400_000
DAY0 = 1_704_067_200_000  # 2024-01-01: old days, due at once with a one-hour buffer
PER_DAY = 250
TABLE = "trips"
TASK = "RealtimeToOfflineSegmentsTask"


def day_rows(day: int) -> list[dict[str, Any]]:
    """The rows of one day, in time order (five minutes apart)."""
    return [{"id": day * PER_DAY + k, "country": ("us", "fr", "de")[(day * PER_DAY + k) % 3],
             "amount": float((day * PER_DAY + k) % 17), "ts": DAY0 + day * D + k * 300_000} for k in range(PER_DAY)]


def create_hybrid(cluster: dict[str, Any], table: str, *, with_offline: bool = True) -> dict[str, str]:
    http, controller = cluster["http"], cluster["controller"]
    configs = log_stream(cluster["root"], table, flush_rows=100)
    with open_admin(configs) as admin:
        admin.create_topic(table, 2)
    assert http.post(f"{controller}/schemas", json={**SCHEMA, "schemaName": table}).status_code == 200
    realtime = {"tableName": table, "tableType": "REALTIME",
                "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "2"},
                "tableIndexConfig": {"streamConfigs": configs},
                "task": {"taskTypeConfigsMap": {TASK: {"bucketTimePeriod": "1d", "bufferTimePeriod": "1h"}}}}
    created = http.post(f"{controller}/tables", json=realtime)
    assert created.status_code == 200, created.text
    if with_offline:
        created = http.post(f"{controller}/tables", json=offline_table(table, replication=2))
        assert created.status_code == 200, created.text
    return configs


def produce(configs: dict[str, str], items: list[dict[str, Any]]) -> None:
    with open_producer(configs) as producer:
        producer.produce_many((str(r["id"]).encode(), orjson.dumps(r)) for r in items)
        producer.flush()


def truth(items: list[dict[str, Any]]) -> list[Any]:
    """The answers to ``QUERIES`` over ``items``, computed here (the broker's must match exactly)."""
    countries = sorted({r["country"] for r in items})
    return [[[len(items), float(sum(r["amount"] for r in items)), len({r["id"] for r in items}),
              float(min(r["ts"] for r in items)), float(max(r["ts"] for r in items))]],
            [[c, len([r for r in items if r["country"] == c]),
              float(sum(r["amount"] for r in items if r["country"] == c))] for c in countries],
            [[r["id"], r["country"], r["ts"]] for r in sorted(items, key=lambda r: r["id"])]]


def due(cluster: dict[str, Any], table: str) -> list[int]:
    found = cluster["http"].get(f"{cluster['controller']}/tasks/{table}").json()["tasks"][TASK]["due"]
    return [(d["windowStartMs"] - DAY0) // D for d in found]


def boundary(cluster: dict[str, Any], table: str) -> int | None:
    response = cluster["http"].get(f"{cluster['controller']}/tables/{table}/timeBoundary")
    return int(response.json()["timeValue"]) if response.status_code == 200 else None


def offline_rows(cluster: dict[str, Any], table: str) -> list[Any] | None:
    doc = cluster["http"].post(f"{cluster['broker']}/query/sql", json={
        "sql": f"SELECT COUNT(*), MIN(ts), MAX(ts) FROM {table}_OFFLINE"}).json()
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0]


def settled(cluster: dict[str, Any], table: str, offline_count: int, expected: list[Any]) -> None:
    """The moved rows are served by the offline half and the hybrid answers are the expected ones."""
    wait_until(lambda: (offline_rows(cluster, table) or [None])[0] == offline_count
               and answers(cluster, table) == expected, 60, interval=0.2,
               message=lambda: f"offline {offline_rows(cluster, table)}; {served(cluster, table)}")


def states(cluster: dict[str, Any], table: str) -> list[str]:
    lineage = cluster["http"].get(f"{cluster['controller']}/segments/{table}/lineage").json()["lineageEntries"]
    return sorted(e["state"] for e in lineage.values())


def run_killed(cluster: dict[str, Any], table: str, point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUVEE_FAULTS": f"{point}=kill", "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "cuvee", "pipeline", "realtime-to-offline", "--controller",
                           cluster["controller"], "--table", table, "--master", "local[1]"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])


def test_a_table_without_an_offline_half_is_refused(spark: Any, cluster: dict[str, Any]) -> None:
    create_hybrid(cluster, "solo", with_offline=False)
    with pytest.raises(PipelineError, match="create the OFFLINE half first"):
        run_realtime_to_offline(spark, cluster["controller"], "solo")
    assert due(cluster, "solo") == []


def test_realtime_days_move_to_the_offline_half_and_every_answer_stays_exact(
        spark: Any, cluster: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    configs = create_hybrid(cluster, TABLE)
    rows = [r for day in range(4) for r in day_rows(day)]
    produce(configs, rows)
    # days 0..2 are due once each partition's committed segments reach day 3 (day 3's tail still consumes)
    # ... and every row consumed (a partition's consuming tail may lag behind the other's commits)
    wait_until(lambda: due(cluster, TABLE) == [0, 1, 2] and answers(cluster, TABLE) == truth(rows), 60,
               interval=0.2, message=lambda: f"due {due(cluster, TABLE)}")
    before = answers(cluster, TABLE)
    assert before == truth(rows) and boundary(cluster, TABLE) is None  # no offline rows yet: realtime alone

    with Watcher(cluster, TABLE, before) as watcher:
        summary = run_realtime_to_offline(spark, controller, TABLE)
        settled(cluster, TABLE, 3 * PER_DAY, before)
    assert watcher.count > 0 and watcher.wrong == []
    assert (summary.status, summary.tasks, summary.rows_in, summary.rows_out) == (
        "SUCCEEDED", 3, 3 * PER_DAY, 3 * PER_DAY), summary
    moved = [r for r in rows if r["ts"] < DAY0 + 3 * D]
    assert offline_rows(cluster, TABLE) == [3 * PER_DAY, float(min(r["ts"] for r in moved)),
                                            float(max(r["ts"] for r in moved))]
    assert all(s.startswith("rto_") for s in served(cluster, TABLE))
    assert boundary(cluster, TABLE) == max(r["ts"] for r in moved) - D  # Pinot's rule over the moved day 2
    state = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"][TASK]
    assert state["watermarks"] == {"": DAY0 + 3 * D} and state["due"] == [] and state["running"] is None

    again = run_realtime_to_offline(spark, controller, TABLE)  # nothing moves twice
    assert again.status == "NOTHING_TO_DO" and again.watermarks == {"": DAY0 + 3 * D}
    assert answers(cluster, TABLE) == before and offline_rows(cluster, TABLE)[0] == 3 * PER_DAY  # type: ignore[index]

    # two more days: day 3 and 4 become due; a run killed after its first push changes nothing
    more = [r for day in (4, 5) for r in day_rows(day)]
    produce(configs, more)
    wait_until(lambda: due(cluster, TABLE) == [3, 4] and answers(cluster, TABLE) == truth(rows + more), 60,
               interval=0.2, message=lambda: f"due {due(cluster, TABLE)}")
    expected = truth(rows + more)
    job = run_killed(cluster, TABLE, "maintenance.after_push")
    assert job.returncode == -9, job.stderr[-2000:]
    assert "IN_PROGRESS" in states(cluster, TABLE)
    for _ in range(5):  # pushed, never switched to: the boundary and the answers are as before
        assert answers(cluster, TABLE) == expected
    assert boundary(cluster, TABLE) == max(r["ts"] for r in moved) - D
    state = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"][TASK]
    assert state["running"] is not None and state["watermarks"] == {"": DAY0 + 3 * D}

    # the rerun reverts the dead entry and moves day 3, then fails after that replace (before the watermark)
    faults.FAULTS.add(faults.MAINTENANCE_AFTER_REPLACE)
    try:
        with Watcher(cluster, TABLE, expected) as watcher, pytest.raises(faults.FaultInjected):
            run_realtime_to_offline(spark, controller, TABLE)
    finally:
        faults.reset()
    settled(cluster, TABLE, 4 * PER_DAY, expected)
    assert watcher.wrong == [] and boundary(cluster, TABLE) == max(r["ts"] for r in day_rows(3)) - D
    state = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"][TASK]
    assert state["lastRun"]["status"] == "FAILED" and state["watermarks"] == {"": DAY0 + 3 * D}
    assert due(cluster, TABLE) == [4]  # day 3 is in: only day 4 is left

    last = run_realtime_to_offline(spark, controller, TABLE)  # day 3 is not moved twice
    assert (last.status, last.tasks, last.rows_out, last.watermarks) == ("SUCCEEDED", 1, PER_DAY, {"": DAY0 + 5 * D})
    settled(cluster, TABLE, 5 * PER_DAY, expected)
    assert boundary(cluster, TABLE) == max(r["ts"] for r in day_rows(4)) - D
    found = states(cluster, TABLE)  # the dead run's entry was reverted (the rerun took its names over)
    assert found.count("COMPLETED") == 5 and "IN_PROGRESS" not in found
