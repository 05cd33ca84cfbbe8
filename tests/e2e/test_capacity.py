"""Capacity expansion by tagging on a live cluster: a server that joins untagged takes no segment; once an
operator tags it (``PUT /instances/{id}/updateTags``), the partitions' next consuming segments are placed on it at
their commits, the tags outlive its restarts, and every count stays exact."""

from __future__ import annotations

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

        # Its own config still says Spare_REALTIME: a restart keeps the tags the operator set.
        extra.stop()
        restarted = cluster.add_server(tags=["Spare_REALTIME"], port=extra.config.port or 0,
                                       instance_id=extra.instance_id)
        info = cluster.controller.store.find(InstanceInfo, cluster.controller.store.paths.instance(
            restarted.instance_id))
        assert info is not None and info.record.tags == ("DefaultTenant_REALTIME",) and info.record.tags_managed
        produce(400)
        assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == produced
