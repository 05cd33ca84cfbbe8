"""Pauseless consumption end to end (in-process cluster): while a segment's commit is held between commitStart
and commitEnd, the rows produced meanwhile are consumed into the next segment and answered by queries, with no
row twice; once the commit ends, everything is exact and the next commits go on as usual."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.controller import faults
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "fresh"
THRESHOLD = 100
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    faults.reset()
    with InProcessCluster(tmp_path, servers=2) as running:
        running.create_topic(TABLE, 1)
        running.add_schema(SCHEMA)
        configs = running.log_stream_configs(TABLE, **{"realtime.segment.flush.threshold.rows": str(THRESHOLD)})
        running.add_table({"tableName": TABLE, "tableType": "REALTIME",
                           "segmentsConfig": {"replicasPerPartition": "2"},
                           "tableIndexConfig": {"streamConfigs": configs},
                           "ingestionConfig": {"streamIngestionConfig": {"pauselessConsumptionEnabled": True}}})
        running.configs = configs  # type: ignore[attr-defined]
        yield running
    faults.reset()


def produce(cluster: InProcessCluster, start: int, end: int) -> None:
    cluster.produce(cluster.configs, ({"id": i, "v": i} for i in range(start, end)), key_field="id")  # type: ignore[attr-defined]


def counts(cluster: InProcessCluster) -> tuple[int, int, int] | None:
    answer = cluster.query(f"SELECT COUNT(*), COUNT(DISTINCT id), SUM(v) FROM {TABLE}")
    if answer.get("exceptions"):
        return None
    count, distinct, total = answer["resultTable"]["rows"][0]
    return int(count), int(distinct), int(total or 0)


def exact(n: int) -> tuple[int, int, int]:
    return n, n, n * (n - 1) // 2


def test_rows_produced_during_a_commit_are_served_before_it_ends(cluster: InProcessCluster) -> None:
    reached, release = threading.Event(), threading.Event()

    def hold_commit() -> None:  # runs in the controller, after the next segment is placed, before commitStart's answer
        reached.set()
        assert release.wait(30), "the test never released the commit"

    faults.HOOKS[faults.COMMIT_START_AFTER_NEXT] = hold_commit
    try:
        produce(cluster, 0, THRESHOLD)
        assert reached.wait(30), "no commit started"
        ideal = cluster.ideal_state(TABLE)
        first, second = sorted(ideal, key=lambda name: int(name.split("__")[2]))
        assert set(ideal[first].values()) == set(ideal[second].values()) == {"CONSUMING"}
        assert cluster.segment_metadata(TABLE, first)["status"] == "COMMITTING"

        produce(cluster, THRESHOLD, THRESHOLD + 50)  # while the first segment's commit is held
        wait_until(lambda: counts(cluster) == exact(THRESHOLD + 50), 30,
                   message=lambda: f"served {counts(cluster)} while the commit was held")
        assert cluster.committed_segments(TABLE) == []  # really still mid-commit
        assert cluster.segment_metadata(TABLE, first)["status"] == "COMMITTING"
    finally:
        release.set()

    wait_until(lambda: cluster.committed_segments(TABLE) == [first], 30, message="the held commit never ended")
    assert cluster.segment_metadata(TABLE, first)["status"] == "DONE"
    assert cluster.segment_metadata(TABLE, first)["endOffset"] == THRESHOLD
    assert counts(cluster) == exact(THRESHOLD + 50)

    produce(cluster, THRESHOLD + 50, 3 * THRESHOLD + 10)  # two more commits, unhindered
    wait_until(lambda: len(cluster.committed_segments(TABLE)) == 3, 30, message="no further commits")
    wait_until(lambda: counts(cluster) == exact(3 * THRESHOLD + 10), 30, message=lambda: f"served {counts(cluster)}")
    cluster.check_invariants(TABLE, replicas=2)
