"""A rebalance waiting for new replicas ends at once when its controller stops, leaving old and new replicas."""

from __future__ import annotations

import time
from pathlib import Path

from cuvee.cluster.rebalance import Move
from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.rebalance import Rebalancer
from cuvee.metastore import open_metastore
from cuvee.testing.waiting import wait_until

T, SEGMENT = "t_REALTIME", "t__0__0__20261125T1200Z"


def test_stop_ends_a_waiting_rebalance_with_both_replicas_kept(tmp_path: Path) -> None:
    store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    store.update_ideal_state(T, lambda i: i.with_segments_in(SEGMENT, ["a"], SegmentState.ONLINE))
    config = TableConfig.from_json({"tableName": "t", "tableType": "REALTIME", "segmentsConfig": {},
                                    "tableIndexConfig": {"streamConfigs": {"streamType": "log",
                                                                           "stream.log.topic.name": "t",
                                                                           "stream.log.dir": str(tmp_path)}}})
    rebalancer = Rebalancer(store, lambda: True, timeout_seconds=600, pool=lambda c: ["b"], poll_seconds=60)
    rebalancer.start(config, [Move(SEGMENT, ("a",), ("b",))])
    wait_until(lambda: set(store.ideal_state(T).record.segments[SEGMENT]) == {"a", "b"}, 10)  # phase 1
    started = time.monotonic()
    rebalancer.stop()  # b never serves it: without stop the job would wait out its poll and timeout
    wait_until(lambda: rebalancer.jobs[T]["status"] == "STOPPED", 10)
    assert time.monotonic() - started < 5
    assert set(store.ideal_state(T).record.segments[SEGMENT]) == {"a", "b"}


def test_the_jobs_status_is_kept_in_the_store_and_a_new_leader_reports_a_job_its_predecessor_left_as_stopped(
        tmp_path: Path) -> None:
    store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    store.update_ideal_state(T, lambda i: i.with_segments_in(SEGMENT, ["a"], SegmentState.ONLINE))
    config = TableConfig.from_json({"tableName": "t", "tableType": "REALTIME", "segmentsConfig": {},
                                    "tableIndexConfig": {"streamConfigs": {"streamType": "log",
                                                                           "stream.log.topic.name": "t",
                                                                           "stream.log.dir": str(tmp_path)}}})
    old = Rebalancer(store, lambda: True, timeout_seconds=600, pool=lambda c: ["b"], poll_seconds=60,
                     instance_id=lambda: "Controller_old", clock_ms=lambda: 1000)
    successor = Rebalancer(store, lambda: True, timeout_seconds=600, pool=lambda c: ["b"],
                           instance_id=lambda: "Controller_new")
    assert successor.status(T)["status"] == "NONE"
    old.start(config, [Move(SEGMENT, ("a",), ("b",))])
    wait_until(lambda: set(store.ideal_state(T).record.segments[SEGMENT]) == {"a", "b"}, 10)
    assert old.status(T)["status"] == "IN_PROGRESS"
    seen = successor.status(T)  # the old leader is gone as far as this one knows: it runs nothing
    assert seen["status"] == "STOPPED" and seen["controller"] == "Controller_old" and seen["left"] == [SEGMENT]
    assert "run the rebalance again" in seen["error"]
    old.stop()
    wait_until(lambda: "not yet served" in successor.status(T)["error"], 10)  # the old one wrote how it ended
    assert successor.status(T)["status"] == "STOPPED"
