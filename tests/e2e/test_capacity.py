"""Capacity expansion by tagging on a live cluster: a server that joins untagged takes no segment; once an
operator tags it (``PUT /instances/{id}/updateTags``), the partitions' next consuming segments are placed on it at
their commits, a rebalance moves the committed segments after them with every query answering exactly meanwhile,
the tags outlive its restarts, and every count stays exact."""

from __future__ import annotations

import threading
from pathlib import Path

from cuvee.cluster.records import InstanceInfo
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "grow"
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


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
        answers: list[dict] = []
        stop = threading.Event()

        def query_loop() -> None:
            while not stop.is_set():
                answers.append(cluster.query(f"SELECT COUNT(*), COUNT(DISTINCT id) FROM {TABLE}"))

        loop = threading.Thread(target=query_loop)
        loop.start()
        try:
            started = cluster.http.post(rebalance, params={"dryRun": "false"}).json()
            assert started["status"] == "IN_PROGRESS"
            wait_until(lambda: cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/rebalanceStatus")
                       .json()["status"] == "DONE", 60, message="the rebalance did not finish")
        finally:
            stop.set()
            loop.join()
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
