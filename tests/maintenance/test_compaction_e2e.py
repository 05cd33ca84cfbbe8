"""UpsertCompactionTask end to end on a multi-process cluster (controller, 2 servers, broker as processes; an
upsert table of 2 partitions over the embedded log, 2 replicas) with a real local[2] Spark session: keys
overwritten many times across committed segments; the job empties the all-invalid segments, rewrites the others
without their invalid docs under their own names, and the latest value of every key, COUNT, SUM and a selection
answer exactly the same before, during (queries run through the swap and the replicas' reloads) and after. A job
SIGKILLed between two swaps leaves the answers exact, and the rerun completes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cuvee.maintenance.compaction_job import run_upsert_compaction
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until
from tests.e2e.support import log_stream

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

TABLE = "accts"
FULL = f"{TABLE}_REALTIME"
KEYS = 60
SCHEMA = {"schemaName": TABLE,
          "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "gone", "dataType": "BOOLEAN"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
          "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                                  "granularity": "1:MILLISECONDS"}],
          "primaryKeyColumns": ["id"]}
QUERIES = (f"SELECT COUNT(*), SUM(v), COUNT(DISTINCT id) FROM {TABLE}",
           f"SELECT id, v FROM {TABLE} ORDER BY id LIMIT 1000")


class Stream:
    """What was produced: each key's latest row (ts grows with every row, so the last one wins)."""

    def __init__(self, configs: dict[str, str]):
        self.configs, self.ts, self.latest = configs, 0, {}  # type: dict[str, str], int, dict[int, tuple[int, bool]]

    def produce(self, keys: list[int], deletes: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        rows = []
        for key in keys:
            self.ts += 1
            value, gone = self.ts * 1000 + key, key in deletes
            rows.append((str(key).encode(), orjson.dumps({"id": key, "v": value, "ts": self.ts, "gone": gone})))
            self.latest[key] = (value, gone)
        with open_producer(self.configs) as producer:
            producer.produce_many(rows)
            producer.flush()

    def expected(self) -> list[Any]:
        live = sorted((k, v) for k, (v, gone) in self.latest.items() if not gone)
        return [[[len(live), sum(v for _, v in live), len(live)]], [[k, v] for k, v in live]]


def answers(cluster: dict[str, Any]) -> list[Any] | None:
    out = []
    for sql in QUERIES:
        doc = cluster["http"].post(f"{cluster['broker']}/query/sql", json={"sql": sql}).json()
        if doc.get("exceptions"):
            return [str(doc["exceptions"])[:300]]
        rows = doc["resultTable"]["rows"]
        out.append([[int(x) if isinstance(x, float) else x for x in row] for row in rows])
    return out


def records(cluster: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = cluster["http"].get(f"{cluster['controller']}/segments/{TABLE}/metadata", params={"type": "REALTIME"}).json()
    return {name: doc for name, doc in docs.items() if doc["status"] == "DONE"}


def reloaded(cluster: dict[str, Any]) -> bool:
    """Every replica serves exactly the committed segments on record, each with the CRC on record."""
    wanted = {name: int(doc["crc"]) for name, doc in records(cluster).items()}
    view = cluster["http"].get(f"{cluster['controller']}/tables/{TABLE}/externalview").json()["REALTIME"] or {}
    for url in cluster["servers"]:
        held = cluster["http"].get(f"{url}/tables/{FULL}/segments").json()["segments"]
        committed = {s["segmentName"]: s.get("crc") for s in held if not s["isConsuming"]}
        if committed != wanted:
            return False
    return set(wanted) <= set(view) and all(s in wanted or any(st == "CONSUMING" for st in view[s].values())
                                            for s in view)


def consuming_docs(cluster: dict[str, Any]) -> int:
    """Rows of the consuming segments, as the replica a query reads them from holds them (both have them all)."""
    held = cluster["http"].get(f"{cluster['servers'][0]}/tables/{FULL}/segments").json()["segments"]
    return sum(s["numDocs"] for s in held if s["isConsuming"])


class Watcher:
    """Queries over and over while a job runs; every answer must be the expected one."""

    def __init__(self, cluster: dict[str, Any], expected: list[Any]):
        self.cluster, self.expected = cluster, expected
        self.stop, self.count, self.wrong = threading.Event(), 0, []  # type: threading.Event, int, list[Any]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            got = answers(self.cluster)
            self.count += 1
            if got != self.expected:
                self.wrong.append(got)
            self.stop.wait(0.02)  # two cores: leave the job and the servers room

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def kill_job_at(cluster: dict[str, Any], point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUVEE_FAULTS": f"{point}=kill", "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "cuvee", "pipeline", "compact-upsert", "--controller",
                           cluster["controller"], "--table", TABLE, "--master", "local[1]"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])


def swap_refusals(cluster: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> None:
    """The controller's compare-and-set: a copy of a segment that changed since it was compacted, a copy whose
    archive is not what is claimed, a consuming segment, and a name that is not a stream segment's are refused."""
    http, controller = cluster["http"], cluster["controller"]
    name = sorted(after)[-1]
    copy = {"segmentName": name, "downloadUri": after[name]["downloadUri"], "crc": 1, "totalDocs": 1, "sizeBytes": 1}

    def post(segment: str, expected: int) -> httpx.Response:
        return http.post(f"{controller}/segments/{TABLE}/{segment}/compacted",
                         json={"expectedCrc": expected, "segment": {**copy, "segmentName": segment}})

    assert post(name, int(after[name]["crc"]) + 1).status_code == 409
    wrong = post(name, int(after[name]["crc"]))  # the archive is the served copy, but not the CRC or docs claimed
    assert wrong.status_code == 400 and "is not a compacted copy" in wrong.json()["error"], wrong.text
    ideal = http.get(f"{controller}/tables/{TABLE}/idealstate").json()["REALTIME"]
    consuming = next(s for s, replicas in ideal.items() if "CONSUMING" in replicas.values())
    assert post(consuming, 0).status_code == 409
    assert post("not_a_stream_segment", 0).status_code == 400
    assert records(cluster) == after


@pytest.mark.timeout(480)  # a Spark session, a cluster and a job in a subprocess on two shared cores
def test_compaction_keeps_every_answer_and_a_killed_job_reruns(spark: Any, cluster: dict[str, Any]) -> None:
    http, controller = cluster["http"], cluster["controller"]
    configs = log_stream(cluster["root"], TABLE, flush_rows=40)
    with open_admin(configs) as admin:
        admin.create_topic(TABLE, 2)
    assert http.post(f"{controller}/schemas", json=SCHEMA).status_code < 300
    created = http.post(f"{controller}/tables", json={
        "tableName": TABLE, "tableType": "REALTIME",
        "segmentsConfig": {"replicasPerPartition": "2", "timeColumnName": "ts"},
        "tableIndexConfig": {"streamConfigs": configs},
        "routing": {"instanceSelectorType": "strictReplicaGroup"},
        "upsertConfig": {"mode": "FULL", "deleteRecordColumn": "gone"},
        "task": {"taskTypeConfigsMap": {"UpsertCompactionTask": {
            "bufferTimePeriod": "1h", "invalidRecordsThresholdPercent": "5"}}}})
    assert created.status_code < 300, created.text
    stream, rng = Stream(configs), random.Random(11)
    for _ in range(3):
        stream.produce(list(range(KEYS)))  # the oldest segments end up all invalid
    stream.produce(rng.sample(range(KEYS), 35), deletes=set(range(6)))
    stream.produce(rng.sample(range(KEYS), 20))
    expected = stream.expected()
    wait_until(lambda: answers(cluster) == expected and len(records(cluster)) >= 4 and reloaded(cluster), 90,
               interval=0.2, message=lambda: f"{len(records(cluster))} committed")
    before = records(cluster)
    due = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"]["UpsertCompactionTask"]["due"]
    assert {d["segment"] for d in due} == set(before)  # ts are 1970 milliseconds: all past the buffer

    with Watcher(cluster, expected) as watcher:
        summary = run_upsert_compaction(spark, controller, TABLE)
        wait_until(lambda: reloaded(cluster), 60, interval=0.2)
    assert watcher.count > 0 and watcher.wrong == [], watcher.wrong[:2]
    assert answers(cluster) == expected
    after = records(cluster)
    assert set(after) == set(before)  # names, partitions, sequences and offsets stay on record
    changed = {n for n in after if after[n]["crc"] != before[n]["crc"]}
    emptied = {n for n in changed if after[n]["totalDocs"] == 0}
    assert summary.status == "SUCCEEDED", summary.message
    assert len(emptied) >= 2 and changed - emptied, (emptied, changed, summary.message)
    assert summary.segments_in == len(changed) and summary.segments_out == len(changed - emptied)
    for name in changed:
        old, new = before[name], after[name]
        assert new["totalDocs"] < old["totalDocs"] and new["sizeBytes"] < old["sizeBytes"]
        assert (new["startOffset"], new["endOffset"]) == (old["startOffset"], old["endOffset"])
    assert summary.rows_in == sum(before[n]["totalDocs"] for n in changed)
    assert summary.rows_out == sum(after[n]["totalDocs"] for n in changed)
    skip = http.post(f"{cluster['broker']}/query/sql",
                     json={"sql": f"SELECT COUNT(*) FROM {TABLE}", "queryOptions": "skipUpsert=true"}).json()
    stored = skip["resultTable"]["rows"][0][0]  # every version still stored: the old ones are gone for good
    assert stored == sum(d["totalDocs"] for d in after.values()) + consuming_docs(cluster)
    rerun = run_upsert_compaction(spark, controller, TABLE)
    assert rerun.status == "NOTHING_TO_DO", rerun.message
    swap_refusals(cluster, before, after)

    # more overwrites commit more segments; a job killed after its first swap leaves every answer exact
    stream.produce(list(range(KEYS)))
    stream.produce(rng.sample(range(KEYS), 40))
    expected = stream.expected()
    wait_until(lambda: answers(cluster) == expected and len(records(cluster)) > len(after) + 1
               and reloaded(cluster), 90, interval=0.2)
    job = kill_job_at(cluster, "maintenance.after_push")
    assert job.returncode == -9, job.stderr[-3000:]
    for _ in range(5):
        assert answers(cluster) == expected
    wait_until(lambda: reloaded(cluster), 60, interval=0.2)
    assert answers(cluster) == expected
    state = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"]["UpsertCompactionTask"]
    assert state["running"] is not None  # the killed run never finished
    with Watcher(cluster, expected) as watcher:
        rerun = run_upsert_compaction(spark, controller, TABLE)
        wait_until(lambda: reloaded(cluster), 60, interval=0.2)
    assert watcher.wrong == [], watcher.wrong[:2]
    assert rerun.status == "SUCCEEDED" and rerun.segments_in > 0, rerun.message
    assert answers(cluster) == expected
    state = http.get(f"{controller}/tasks/{TABLE}").json()["tasks"]["UpsertCompactionTask"]
    assert state["running"] is None and state["lastRun"]["status"] == "SUCCEEDED"
