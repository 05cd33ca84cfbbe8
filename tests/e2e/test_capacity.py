"""Capacity expansion by tagging on a live cluster: a server that joins untagged takes no segment; once an
operator tags it (``PUT /instances/{id}/updateTags``), the partitions' next consuming segments are placed on it at
their commits, a rebalance moves the committed segments after them with every query answering exactly meanwhile,
the tags outlive its restarts, and every count stays exact."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuvee.cluster.records import InstanceInfo
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA as SALES_SCHEMA
from tests.offline.support import metadata_push, offline_table, rows

TABLE = "grow"
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


@contextmanager
def queries_meanwhile(cluster: InProcessCluster, sql: str) -> Iterator[list[dict]]:
    """Runs ``sql`` through the broker over and over in a thread while the block runs; yields the answers."""
    answers: list[dict] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            answers.append(cluster.query(sql))

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        yield answers
    finally:
        stop.set()
        thread.join()


def _consuming_on(cluster: InProcessCluster, instance: str) -> list[str]:
    return [s for s, replicas in cluster.ideal_state(TABLE).items() if replicas.get(instance) == "CONSUMING"]


def test_a_tagged_server_takes_new_consuming_segments_at_their_commits(tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=2) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=4, replicas=1, flush_rows=100)
        extra = cluster.add_server(tags=["Spare_REALTIME"])
        produced = 0

        def produce(n: int) -> None:
            nonlocal produced
            cluster.produce(configs, ({"id": i, "v": 1} for i in range(produced, produced + n)), key_field="id")
            produced += n
            wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == produced, 60)

        produce(800)
        assert not any(extra.instance_id in replicas for replicas in cluster.ideal_state(TABLE).values())

        url = f"{cluster.controller_url}/instances/{extra.instance_id}/updateTags"
        assert cluster.http.put(url, params={"tags": "bad tag!"}).status_code == 400
        assert cluster.http.put(f"{cluster.controller_url}/instances/Server_nope/updateTags",
                                params={"tags": "DefaultTenant_REALTIME"}).status_code == 404
        tagged = cluster.http.put(url, params={"tags": "DefaultTenant_REALTIME"})
        assert tagged.status_code == 200 and tagged.json()["tags"] == ["DefaultTenant_REALTIME"]

        produce(800)  # every partition commits twice more
        wait_until(lambda: _consuming_on(cluster, extra.instance_id), 30,
                   message="no consuming segment moved to the newly tagged server")
        assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == produced

        # Rebalance: a dry run lists the moves, the run makes them while queries go on, all exact.
        rebalance = f"{cluster.controller_url}/tables/{TABLE}/rebalance"
        planned = cluster.http.post(rebalance).json()
        assert planned["status"] == "DRY_RUN" and planned["moves"], planned
        assert any(extra.instance_id in m["to"] for m in planned["moves"])  # round-robin over three servers now
        with queries_meanwhile(cluster, f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {TABLE}") as answers:
            started = cluster.http.post(rebalance, params={"dryRun": "false"}).json()
            assert started["status"] == "IN_PROGRESS"
            wait_until(lambda: cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/rebalanceStatus")
                       .json()["status"] == "DONE", 60, message="the rebalance did not finish")
        assert answers and all(not a["exceptions"] and a["resultTable"]["rows"] == [[produced, produced]]
                               for a in answers), [a for a in answers if a["exceptions"]][:3]
        assert cluster.http.post(rebalance).json()["status"] == "NO_OP"
        assert all(set(cluster.ideal_state(TABLE)[m["segment"]]) == set(m["to"]) for m in planned["moves"])

        # Its own config still says Spare_REALTIME: a restart keeps the tags the operator set.
        extra.stop()
        restarted = cluster.add_server(tags=["Spare_REALTIME"], port=extra.config.port or 0,
                                       instance_id=extra.instance_id)
        info = cluster.controller.store.find(InstanceInfo, cluster.controller.store.paths.instance(
            restarted.instance_id))
        assert info is not None and info.record.tags == ("DefaultTenant_REALTIME",) and info.record.tags_managed
        produce(400)
        assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == produced


def test_a_segment_a_server_dropped_before_the_brokers_view_moved_is_read_from_another_replica(
        tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=2) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=2, flush_rows=100)
        cluster.produce(configs, ({"id": i, "v": 1} for i in range(250)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 250, 60)
        segment = cluster.committed_segments(TABLE)[0]
        gone = cluster.servers[0]
        gone.registry.remove(f"{TABLE}_REALTIME", segment)  # dropped here; the external view still says ONLINE
        for _ in range(6):  # the broker alternates replicas: some queries ask the server that dropped it first
            answer = cluster.query(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {TABLE}")
            assert not answer["exceptions"] and answer["resultTable"]["rows"] == [[250, 250]], answer


def test_an_offline_tables_segments_spread_onto_an_added_server_with_every_query_exact_meanwhile(
        tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=1) as cluster:
        cluster.add_schema(SALES_SCHEMA)
        cluster.add_table(offline_table(replication=1))
        for day in range(4):
            pushed = metadata_push(cluster.http, cluster.controller_url, cluster.deep_store, tmp_path / "build",
                                   f"sales_{day}", rows(range(day * 100, day * 100 + 100), day * 86_400_000))
            assert pushed.status_code == 200, pushed.text
        wait_until(lambda: cluster.scalar("SELECT COUNT(*) FROM sales") == 400, 60)
        extra = cluster.add_server()  # the default tags: DefaultTenant_OFFLINE among them
        rebalance = f"{cluster.controller_url}/tables/sales/rebalance"
        assert cluster.http.post(rebalance, params={"type": "REALTIME"}).status_code == 404
        assert cluster.http.post(rebalance, params={"type": "sideways"}).status_code == 400
        planned = cluster.http.post(rebalance).json()
        assert planned["status"] == "DRY_RUN" and len(planned["moves"]) == 2, planned  # 4 segments over 2 servers
        assert all(m["to"] == [extra.instance_id] for m in planned["moves"])
        with queries_meanwhile(cluster, "SELECT COUNT(*), COUNT(DISTINCT id) FROM sales") as answers:
            assert cluster.http.post(rebalance, params={"dryRun": "false"}).json()["status"] == "IN_PROGRESS"
            wait_until(lambda: cluster.http.get(f"{cluster.controller_url}/tables/sales/rebalanceStatus")
                       .json()["status"] == "DONE", 60, message="the rebalance did not finish")
        assert answers and all(not a["exceptions"] and a["resultTable"]["rows"] == [[400, 400]] for a in answers), \
            [a for a in answers if a["exceptions"]][:3]
        ideal = cluster.http.get(f"{cluster.controller_url}/tables/sales/idealstate").json()["OFFLINE"]
        assert sum(extra.instance_id in replicas for replicas in ideal.values()) == 2
        assert all(len(replicas) == 1 for replicas in ideal.values())
        assert cluster.http.post(rebalance).json()["status"] == "NO_OP"
