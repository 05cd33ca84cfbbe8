"""A controller whose metadata-store session expires (LOST) opens a new one, registers again and leads again.

Scenario (sqlite, one controller, one server, one broker): the controller's heartbeats are blocked with the
``sqlite.heartbeat`` fault point for longer than the session timeout, so the other clients expire its session
(live node and leader node gone); when the fault is cleared the controller learns the session is LOST. It must then
lead again on a new session, on the same URL, and answer the completion protocol (a segment commits).

The helpers here are shared by the server's and the broker's LOST tests.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.controller import Controller
from cuvee.metastore.sqlite import FAULT_STOP_HEARTBEATS, SqliteMetadataStore
from cuvee.node.liveness import InstanceIdTaken
from cuvee.spi.metastore import SessionState
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.controller.test_controller_support import CLUSTER, controller_config
from tests.metastore.helpers import hold_live_node

if TYPE_CHECKING:
    from cuvee.node.session import SessionHolder

RAW = "lost"
TABLE = f"{RAW}_REALTIME"
SCHEMA = {
    "schemaName": RAW,
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
}
THRESHOLD = 100
SHORT_SESSION = "session_timeout=1.5&heartbeat_interval=0.1"
FAST_RENEWAL = {"session_retry_initial_seconds": 0.05, "session_retry_max_seconds": 0.5}


def _with_renewal(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**FAST_RENEWAL, **(extra or {})}


@contextmanager
def lost_cluster(tmp_path: Path, *, metadata: str = "", server: Mapping[str, Any] | None = None,
                 broker: Mapping[str, Any] | None = None) -> Iterator[tuple[InProcessCluster, ClusterStore]]:
    """One controller, one server, one broker on a short-session store; a 1-partition table committing every
    THRESHOLD rows; and an observer session of our own (which also sweeps expired sessions)."""
    metadata = metadata or f"sqlite://{tmp_path / 'meta.db'}?{SHORT_SESSION}"
    with InProcessCluster(tmp_path, servers=1, metadata=metadata, controller=_with_renewal(None),
                          server=_with_renewal(server), broker=_with_renewal(broker)) as cluster:
        observer = open_metastore(metadata)
        try:
            cluster.create_topic(RAW, 1)
            cluster.add_schema(SCHEMA)
            configs = cluster.log_stream_configs(RAW, **{"realtime.segment.flush.threshold.rows": str(THRESHOLD)})
            cluster.add_table({"tableName": RAW, "tableType": "REALTIME",
                               "segmentsConfig": {"replicasPerPartition": "1"},
                               "tableIndexConfig": {"streamConfigs": configs}})
            cluster.configs = configs  # type: ignore[attr-defined]
            yield cluster, ClusterStore(observer, "cuvee")
        finally:
            observer.close()


def produce(cluster: InProcessCluster, start: int, end: int) -> None:
    cluster.produce(cluster.configs, ({"id": i, "v": 1} for i in range(start, end)), key_field="id")  # type: ignore[attr-defined]


def count(cluster: InProcessCluster) -> int:
    try:
        answer = cluster.query(f"SELECT COUNT(*) FROM {RAW}")
    except AssertionError:
        return -1
    return -1 if answer.get("exceptions") else int(answer["resultTable"]["rows"][0][0])


def is_live(observer: ClusterStore, instance_id: str) -> bool:
    return observer.metastore.exists(observer.paths.live(instance_id)) is not None


def online_in_view(observer: ClusterStore, instance_id: str) -> list[str]:
    view = observer.external_view(TABLE)
    if view is None:
        return []
    return sorted(s for s in view.segments if instance_id in view.instances_in(s, SegmentState.ONLINE))


def expire_session(holder: SessionHolder, observer: ClusterStore, instance_id: str) -> SqliteMetadataStore:
    """Block the role's heartbeats until the observer has expired its session (its live node is gone), then let
    them through again: the role's client finds its session gone (LOST). Returns the dead client."""
    dead = getattr(holder, "current", holder)  # (a role without a holder has the raw client)
    assert isinstance(dead, SqliteMetadataStore)
    dead.inject_fault(FAULT_STOP_HEARTBEATS)
    try:
        wait_until(lambda: not is_live(observer, instance_id), 15, message=f"{instance_id}'s session never expired")
    finally:
        dead.clear_fault(FAULT_STOP_HEARTBEATS)
    wait_until(lambda: dead.state is SessionState.LOST, 10, message="the role's client never noticed LOST")
    return dead


def wait_renewed(holder: SessionHolder, observer: ClusterStore, instance_id: str) -> None:
    """Wait until the role's holder has fully re-established its session (hooks ran, watches and elections moved:
    ``renewals`` counts only then) and its live node is back. Waiting on the live node alone races the count."""
    wait_until(lambda: holder.renewals >= 1 and is_live(observer, instance_id), 20,
               message=f"{instance_id} never re-established its session")


# ---- the controller -------------------------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[InProcessCluster, ClusterStore]]:
    with lost_cluster(tmp_path) as running:
        yield running


def test_controller_leads_again_after_its_session_expires(cluster: tuple[InProcessCluster, ClusterStore]) -> None:
    running, observer = cluster
    controller = running.controller
    url = controller.url
    produce(running, 0, 50)
    wait_until(lambda: count(running) == 50, 30, message="rows never served before the outage")

    expire_session(controller.metastore, observer, controller.instance_id)  # type: ignore[arg-type]

    wait_renewed(controller.metastore, observer, controller.instance_id)  # type: ignore[arg-type]
    wait_until(lambda: controller.is_leader, 20, message="the controller never led again after LOST")
    assert controller.url == url  # the HTTP service stayed up on its port
    wait_until(lambda: is_live(observer, controller.instance_id), 10, message="live node not re-created")
    health = httpx.get(url + "/health", timeout=10).json()
    assert health["leader"] is True and health["leaderUrl"] == url

    # The completion protocol works on the new session: the consuming segment reaches its threshold and commits.
    produce(running, 50, 150)
    wait_until(lambda: len(running.committed_segments(TABLE)) == 1, 30, message="no commit after the renewal")
    wait_until(lambda: count(running) == 150, 30, message=lambda: f"served {count(running)} rows, not 150")
    segment = running.committed_segments(TABLE)[0]
    assert running.segment_metadata(TABLE, segment)["status"] == "DONE"
    running.check_invariants(TABLE, replicas=1)


# ---- ZooKeeper ------------------------------------------------------------------------------------------------


@pytest.mark.zookeeper
def test_controller_leads_again_after_its_zookeeper_session_expires(tmp_path: Path, zookeeper: Any) -> None:
    from kazoo.client import KazooClient

    from cuvee.metastore.zookeeper import ZooKeeperMetadataStore

    metadata = zookeeper.zk_uri(f"/lost-{tmp_path.name}", session_timeout=4)
    with lost_cluster(tmp_path, metadata=metadata) as (running, observer):
        controller = running.controller
        dead = controller.metastore.current  # type: ignore[union-attr]
        assert isinstance(dead, ZooKeeperMetadataStore)
        # The classic way to expire a session: a second connection with its id and password closes it.
        intruder = KazooClient(hosts=zookeeper.connect_string, client_id=dead._client.client_id)
        intruder.start(timeout=10)
        intruder.stop()
        intruder.close()
        wait_until(lambda: dead.state is SessionState.LOST, 10, message="session expired -> LOST")
        wait_until(lambda: controller.is_leader and controller.metastore.current is not dead, 20,  # type: ignore[union-attr]
                   message="the controller never led again on a new ZooKeeper session")
        wait_until(lambda: is_live(observer, controller.instance_id), 10, message="live node not re-created")
        produce(running, 0, THRESHOLD + 10)
        wait_until(lambda: len(running.committed_segments(TABLE)) == 1, 30, message="no commit after the renewal")
        wait_until(lambda: count(running) == THRESHOLD + 10, 30, message=lambda: f"served {count(running)} rows")


def test_a_controller_killed_and_restarted_at_once_rejoins_and_a_live_twin_is_refused(tmp_path: Path) -> None:
    """Under a supervisor a SIGKILLed controller is started again at once, with its id: it waits for the dead
    session's live node to expire and takes its place; while the id's holder lives, it refuses to start."""
    # 3 s: with 1 s the holder's heartbeats lagged on a loaded CI machine (stop 19), its session expired, and the
    # twin it should have refused started instead
    uri = f"sqlite://{tmp_path / 'meta.db'}?session_timeout=3&heartbeat_interval=0.1&poll_interval=0.02"
    observer = ClusterStore(open_metastore(uri), CLUSTER)
    holder = hold_live_node(uri, observer.paths.live("Controller_fixed"))
    try:
        with pytest.raises(InstanceIdTaken):
            Controller(controller_config(uri, instance_id="Controller_fixed")).start()
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        controller = Controller(controller_config(uri, instance_id="Controller_fixed")).start()
        try:
            wait_until(lambda: controller.is_leader, message="the restarted controller never led")
            assert "Controller_fixed" in observer.live_instance_ids()
        finally:
            controller.stop()
    finally:
        if holder.poll() is None:
            holder.kill()
        observer.metastore.close()
