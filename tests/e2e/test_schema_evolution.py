"""Schema evolution on an in-process cluster of two servers: columns added to the schemas of a REALTIME and an
OFFLINE table (``PUT /schemas/{name}``, the OFFLINE one with ``reload=true``) are not served until a reload (a query naming one says so, never a Python or DuckDB text); after
``POST /segments/{t}/reload`` every old segment (REALTIME committed and consuming, OFFLINE) on every server answers
the columns' default null values, the consuming segments started under the old schema are committed so their
successors ingest the new values, and a restarted server serves the same without another reload."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA as SALES_SCHEMA
from tests.offline.support import metadata_push, offline_table, rows

TABLE = "evo"
SCHEMA: dict[str, Any] = {
    "schemaName": TABLE,
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
    "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}],
}
DAY = 86_400_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path, servers=2) as cluster:
        yield cluster


def _answer(cluster: InProcessCluster, sql: str) -> dict[str, Any]:
    return cluster.query(sql)


def _rows(cluster: InProcessCluster, sql: str) -> list[list[Any]] | None:
    answer = cluster.query(sql)
    return None if answer.get("exceptions") else answer["resultTable"]["rows"]


def _on_every_replica(cluster: InProcessCluster, sql: str, expected: list[list[Any]], times: int = 6) -> bool:
    """The broker picks a replica per segment and query: the same answer ``times`` in a row means every server
    gives it."""
    return all(_rows(cluster, sql) == expected for _ in range(times))


def test_reload_serves_added_columns_on_every_server_and_after_a_restart(
        cluster: InProcessCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    http, ctl = cluster.http, cluster.controller_url
    configs = cluster.realtime_table(SCHEMA, partitions=2, replicas=2, flush_rows=40)
    cluster.produce(configs, ({"id": i, "v": 1} for i in range(130)), key_field="id")
    wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == 130, 30)
    wait_until(lambda: len(cluster.committed_segments(TABLE)) >= 2, 30, message="no segment committed")
    consuming = {s for s, r in cluster.ideal_state(f"{TABLE}_REALTIME").items() if "CONSUMING" in r.values()}
    assert len(consuming) == 2
    cluster.add_schema(SALES_SCHEMA)
    cluster.add_table(offline_table(replication=2))
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_0", rows(range(60), DAY)).status_code == 200
    wait_until(lambda: _rows(cluster, "SELECT COUNT(*) FROM sales") == [[60]], 30)

    evolved = copy.deepcopy(SCHEMA)
    evolved["dimensionFieldSpecs"].append({"name": "color", "dataType": "STRING", "defaultNullValue": "none"})
    evolved["metricFieldSpecs"].append({"name": "w", "dataType": "INT"})
    assert http.put(f"{ctl}/schemas/{TABLE}", json=evolved).json()["addedColumns"] == ["color", "w"]
    sales = copy.deepcopy(SALES_SCHEMA)
    sales["dimensionFieldSpecs"].append({"name": "channel", "dataType": "STRING", "defaultNullValue": "web"})
    updated = http.put(f"{ctl}/schemas/sales", json=sales, params={"reload": "true"})  # update and reload at once
    assert updated.status_code == 200, updated.text
    assert updated.json()["reloadJobs"]["sales_OFFLINE"]["numMessagesSent"] == "2"
    assert wait_until(lambda: _on_every_replica(cluster, "SELECT channel, COUNT(*) FROM sales GROUP BY channel",
                                                [["web", 60]]), 30)

    # before the reload: the broker knows the column, the servers do not serve it yet, and say so
    def refused() -> dict[str, Any] | None:
        answer = _answer(cluster, f"SELECT color, COUNT(*) FROM {TABLE} GROUP BY color")
        planned = answer["exceptions"] and all(e["errorCode"] != 710 for e in answer["exceptions"])
        return answer if planned else None  # 710: the broker's view has not seen the update yet

    answer = wait_until(refused, 30, message="the broker never planned the new column")
    for error in answer["exceptions"]:
        assert "'color' is not served by this server" in error["message"], error
        assert f"POST /segments/{TABLE}/reload" in error["message"], error
        assert "Binder" not in error["message"] and "Traceback" not in error["message"]

    reloaded = http.post(f"{ctl}/segments/{TABLE}/reload")
    assert reloaded.status_code == 200, reloaded.text
    job = reloaded.json()["reloadJobs"][f"{TABLE}_REALTIME"]
    assert job["numMessagesSent"] == "2" and job["reloadJobMetaZKStorageStatus"] == "SUCCESS"
    assert reloaded.json()["status"].startswith("Segment reload details: ")
    for server in job["servers"].values():  # each replica force-committed the consuming segments of the old schema
        # (the route, or the follower's pass that saw the served version first: the route reports both)
        assert set(server["forceCommitted"]) == consuming
    status = http.get(f"{ctl}/segments/segmentReloadStatus/{job['reloadJobId']}").json()
    assert status["totalServersQueried"] == 2 and status["totalServerCallsFailed"] == 0
    assert status["successCount"] == status["totalSegmentCount"] > 0
    assert status["metadata"]["jobType"] == "RELOAD_SEGMENT"
    one = http.post(f"{ctl}/segments/{TABLE}/{sorted(consuming)[0]}/reload")  # LLC name: the REALTIME half
    assert one.status_code == 200 and one.json()["status"].startswith("Submitted reload job id: "), one.text
    assert http.post(f"{ctl}/segments/{TABLE}/nope/reload").status_code == 404
    assert http.get(f"{ctl}/segments/segmentReloadStatus/0000").status_code == 404

    # every old segment on every server answers the defaults; the consuming ones too (committed meanwhile)
    grouped = f"SELECT color, COUNT(*), SUM(w) FROM {TABLE} GROUP BY color ORDER BY color"
    assert wait_until(lambda: _on_every_replica(cluster, grouped, [["none", 130, 0.0]]), 30,
                      message=lambda: str(cluster.query(grouped)))
    assert http.post(f"{ctl}/segments/sales/reload?type=REALTIME").status_code == 404  # no such half
    assert http.post(f"{ctl}/segments/sales/reload?forceDownload=true").status_code == 400

    # the consuming segments' successors consume under the new schema: new rows bring their own values
    wait_until(lambda: consuming <= set(cluster.committed_segments(TABLE)), 30, message="not committed")
    cluster.produce(configs, ({"id": i, "v": 1, "color": "red", "w": 2} for i in range(130, 180)), key_field="id")
    after = [["none", 130, 0.0], ["red", 50, 100.0]]
    assert wait_until(lambda: _on_every_replica(cluster, grouped, after), 30)

    # a server restarted on its own data directory serves the added columns without another reload
    victim = cluster.servers[0]
    instance, index = victim.instance_id, cluster._started.index(victim)
    victim.stop()
    restarted = cluster._new_server(0, instance_id=instance).start()
    cluster.servers[0] = cluster._started[index] = restarted
    wait_until(lambda: restarted.registry.names(f"{TABLE}_REALTIME") and restarted.registry.names("sales_OFFLINE"),
               30, message="the restarted server serves nothing")
    assert wait_until(lambda: _on_every_replica(cluster, grouped, after, times=8), 30)
    assert wait_until(lambda: _on_every_replica(cluster, "SELECT channel, COUNT(*) FROM sales GROUP BY channel",
                                                [["web", 60]], times=8), 30)
    cluster.servers[1].stop()  # every answer from the restarted server alone now
    assert wait_until(lambda: _on_every_replica(cluster, grouped, after, times=3), 30,
                      message=lambda: str(cluster.query(grouped)))
    old = sorted(consuming)[0]
    served = http.get(f"{restarted.url}/tables/{TABLE}_REALTIME/segments/{old}/metadata").json()
    columns = {c["name"]: c for c in served["servedColumns"]}
    assert columns["color"]["source"] == "default" and columns["color"]["defaultNullValue"] == "none"
    assert columns["id"]["source"] == "segment" and served["crc"] == cluster.segment_metadata(TABLE, old)["crc"]
    # cuvee segment inspect --server shows the same
    from cuvee.cli.main import main

    assert main(["segment", "inspect", old, "--server", restarted.url, "--table", f"{TABLE}_REALTIME"]) == 0
    printed = orjson.loads(capsys.readouterr().out)
    assert {c["name"]: c["source"] for c in printed["servedColumns"]} == {"id": "segment", "color": "default",
                                                                          "v": "segment", "w": "default"}
