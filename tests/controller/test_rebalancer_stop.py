"""A rebalance waiting for new replicas ends at once when its controller stops, leaving old and new replicas."""

from __future__ import annotations

import time
from pathlib import Path

from cuvee.cluster.rebalance import Move
from cuvee.cluster.records import ExternalView, RebalanceJob, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.rebalance import Rebalancer
from cuvee.controller.table_ops import delete_table
from cuvee.metastore import open_metastore
from cuvee.testing.waiting import wait_until

T, SEGMENT = "t_REALTIME", "t__0__0__20261125T1200Z"


def test_stop_ends_a_waiting_rebalance_with_both_replicas_kept(tmp_path: Path) -> None:
    store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    store.update_ideal_state(T, lambda i: i.with_segments_in(SEGMENT, ["a"], SegmentState.ONLINE))
    config = _config(tmp_path)
    Catalog(store).create_table_config(config)
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
    config = _config(tmp_path)
    Catalog(store).create_table_config(config)
    leader = ["http://old"]
    old = Rebalancer(store, lambda: True, timeout_seconds=600, pool=lambda c: ["b"], poll_seconds=60,
                     me=lambda: "http://old", leader=lambda: leader[0], clock_ms=lambda: 1000)
    other = Rebalancer(store, lambda: False, timeout_seconds=600, pool=lambda c: ["b"],
                       me=lambda: "http://new", leader=lambda: leader[0])
    assert other.status(T)["status"] == "NONE"
    old.start(config, [Move(SEGMENT, ("a",), ("b",))])
    wait_until(lambda: set(store.ideal_state(T).record.segments[SEGMENT]) == {"a", "b"}, 10)
    assert old.status(T)["status"] == "IN_PROGRESS"
    assert other.status(T)["status"] == "IN_PROGRESS"  # a standby asked while the leader runs it: as it is
    leader[0] = "http://new"  # the old leader is deposed (it has not noticed yet)
    seen = other.status(T)
    assert seen["status"] == "STOPPED" and seen["controller"] == "http://old" and seen["left"] == [SEGMENT]
    assert "run the rebalance again" in seen["error"]
    old.stop()
    wait_until(lambda: "not yet served" in other.status(T)["error"], 10)  # the old one wrote how it ended
    assert other.status(T)["status"] == "STOPPED"


def test_a_rebalance_whose_table_is_deleted_ends_without_bringing_back_its_state(tmp_path: Path) -> None:
    store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    store.update_ideal_state(T, lambda i: i.with_segments_in(SEGMENT, ["a"], SegmentState.ONLINE))
    config = _config(tmp_path)
    Catalog(store).create_table_config(config)
    served = {"a", "b"}
    store.put_external_view(ExternalView(T, {SEGMENT: {i: SegmentState.ONLINE for i in served}}))
    rebalancer = Rebalancer(store, lambda: True, timeout_seconds=600, pool=lambda c: ["b"], poll_seconds=0.05,
                            settle_seconds=60, me=lambda: "http://me", leader=lambda: "http://me")
    rebalancer.start(config, [Move(SEGMENT, ("a",), ("b",))])
    wait_until(lambda: set(store.ideal_state(T).record.segments[SEGMENT]) == {"a", "b"}, 10)
    delete_table(store, T, 0, 0)  # while it waits out the settle time
    rebalancer.stop()
    wait_until(lambda: rebalancer.jobs[T]["status"] != "IN_PROGRESS", 10)
    assert store.find(RebalanceJob, store.paths.rebalance(T)) is None
    assert store.ideal_state(T) is None


def _config(tmp_path: Path) -> TableConfig:
    return TableConfig.from_json({"tableName": "t", "tableType": "REALTIME", "segmentsConfig": {},
                                  "tableIndexConfig": {"streamConfigs": {"streamType": "log",
                                                                         "stream.log.topic.name": "t",
                                                                         "stream.log.dir": str(tmp_path)}}})
