"""The retention task on an in-process cluster (passes run by the test, not the timer): expired offline segments
leave the ideal state, the metadata and the deep store while fresh ones and segments without a retention stay;
a realtime table's consuming segment is never deleted, its committed expired ones are; a completed replace's old
segments are deleted after the lineage grace; a replace nobody ended is reverted after its timeout."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from cuvee.deepstore import open_deepstore
from cuvee.segment.archive import ARCHIVE_SUFFIX
from tests.offline.support import SCHEMA, build_archive, describe, metadata_push, offline_table, rows

DAY = 86_400_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with InProcessCluster(tmp_path_factory.mktemp("retention"), servers=1, controller={
            "retention_interval_seconds": 3600, "deletion_grace_seconds": 0, "lineage_grace_seconds": 0,
            "lineage_in_progress_timeout_seconds": 0.5, "lineage_end_timeout_seconds": 10}) as c:
        yield c


def count(cluster: InProcessCluster, table: str) -> int | None:
    doc = cluster.query(f"SELECT COUNT(*) FROM {table}")
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0][0]


def deep_objects(cluster: InProcessCluster, table: str) -> set[str]:
    folder = Path(cluster.deep_store.removeprefix("file://")) / table
    return {p.name.removesuffix(".tar.zst") for p in folder.glob("*.tar.zst")}


def status(cluster: InProcessCluster, table: str) -> dict[str, Any]:
    doc = cluster.http.get(f"{cluster.controller_url}/tables/{table}/retentionStatus").json()
    return doc["tables"][0]


def test_offline_retention_and_lineage_clean_up(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    cluster.add_schema(SCHEMA)
    cluster.add_table(offline_table(replication=1, retentionTimeUnit="DAYS", retentionTimeValue="30"))
    now = int(time.time() * 1000)
    for name, ts in (("sales_old", now - 40 * DAY), ("sales_edge", now - 29 * DAY), ("sales_new", now - DAY)):
        assert metadata_push(http, ctl, cluster.deep_store, tmp_path, name, rows(range(100), ts)).status_code == 200
    wait_until(lambda: count(cluster, "sales") == 300, 20)

    cluster.controller.retention.run_pass()
    wait_until(lambda: count(cluster, "sales") == 200, 20)
    segments = http.get(f"{ctl}/segments/sales", params={"type": "OFFLINE"}).json()[0]["OFFLINE"]
    assert sorted(segments) == ["sales_edge", "sales_new"]
    assert http.get(f"{ctl}/segments/sales/sales_old/metadata").status_code == 404
    assert deep_objects(cluster, "sales_OFFLINE") == {"sales_edge", "sales_new"}  # grace 0: gone at once
    stats = status(cluster, "sales")
    assert (stats["expiredDeleted"], stats["failedPasses"], stats["purgedObjects"]) == (1, 0, 1)

    # a completed replace: the replaced segment goes at the next pass (lineage grace 0); the entry stays while its
    # new segments exist (an APPEND re-run finds the previous run by it)
    start = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": ["sales_edge"], "segmentsTo": ["sales_edge2"]}).json()
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_edge2", rows(range(10), now)).status_code == 200
    assert http.post(f"{ctl}/segments/sales/endReplaceSegments", params={
        "type": "OFFLINE", "segmentLineageEntryId": start["segmentLineageEntryId"]}).status_code == 200
    wait_until(lambda: count(cluster, "sales") == 110, 20)
    cluster.controller.retention.run_pass()
    assert "sales_edge" not in deep_objects(cluster, "sales_OFFLINE")
    assert http.get(f"{ctl}/segments/sales/sales_edge/metadata").status_code == 404
    entries = http.get(f"{ctl}/segments/sales/lineage", params={"type": "OFFLINE"}).json()["lineageEntries"]
    assert [e["state"] for e in entries.values()] == ["COMPLETED"]
    assert status(cluster, "sales")["replacedDeleted"] == 1

    # a push that never ended: hidden while it lasts, reverted (and its segment deleted) once stale
    stuck = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": [], "segmentsTo": ["sales_stuck"]}).json()["segmentLineageEntryId"]
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_stuck", rows(range(5), now)).status_code == 200

    def reverted() -> bool:
        cluster.controller.retention.run_pass()
        return "sales_stuck" not in deep_objects(cluster, "sales_OFFLINE")

    wait_until(reverted, 20, interval=0.2)
    assert count(cluster, "sales") == 110
    entries = http.get(f"{ctl}/segments/sales/lineage", params={"type": "OFFLINE"}).json()["lineageEntries"]
    assert stuck not in entries or entries[stuck]["state"] == "REVERTED"
    assert status(cluster, "sales")["entriesReverted"] == 1


def test_an_archive_replaced_by_name_is_purged_after_the_grace(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    cluster.add_schema({**SCHEMA, "schemaName": "byname"})
    cluster.add_table(offline_table("byname", replication=1))
    deep = open_deepstore(cluster.deep_store)
    first = build_archive(tmp_path / "a", "byname_x", rows(range(20), 10 * DAY))
    uri_a = deep.put(first, f"byname_OFFLINE/byname_x.run1{ARCHIVE_SUFFIX}")
    push = {"tableName": "byname", "tableType": "OFFLINE"}
    assert http.post(f"{ctl}/v2/segments", params=push, json={"segments": [describe(first, uri_a)]}).status_code == 200
    wait_until(lambda: count(cluster, "byname") == 20, 20)
    second = build_archive(tmp_path / "b", "byname_x", rows(range(5), 10 * DAY))
    uri_b = deep.put(second, f"byname_OFFLINE/byname_x.run2{ARCHIVE_SUFFIX}")
    assert http.post(f"{ctl}/v2/segments", params=push, json={"segments": [describe(second, uri_b)]}).status_code == 200
    wait_until(lambda: count(cluster, "byname") == 5, 20)
    cluster.controller.retention.run_pass()  # deletion grace 0 here: the replaced archive is due at once
    assert deep_objects(cluster, "byname_OFFLINE") == {"byname_x.run2"}
    assert count(cluster, "byname") == 5

    # back and forth: run2 is replaced by run3, then pushed again before any purge: its deletion is called off
    third = build_archive(tmp_path / "c", "byname_x", rows(range(7), 10 * DAY))
    uri_c = deep.put(third, f"byname_OFFLINE/byname_x.run3{ARCHIVE_SUFFIX}")
    for archive, uri in ((third, uri_c), (second, uri_b)):
        assert http.post(f"{ctl}/v2/segments", params=push,
                         json={"segments": [describe(archive, uri)]}).status_code == 200
    pending = [p.download_uri for _, p in cluster.controller.store.pending_deletions()]
    assert uri_c in pending and uri_b not in pending  # pushing run2 again called its deletion off
    cluster.controller.retention.run_pass()
    assert deep_objects(cluster, "byname_OFFLINE") == {"byname_x.run2"}  # run3 purged, run2 served and kept
    wait_until(lambda: count(cluster, "byname") == 5, 20)


def test_realtime_retention_never_deletes_a_consuming_segment(cluster: InProcessCluster) -> None:
    http, ctl = cluster.http, cluster.controller_url
    schema = {**SCHEMA, "schemaName": "clicks"}
    cluster.add_schema(schema)
    cluster.create_topic("clicks", 1)
    configs = cluster.log_stream_configs("clicks")
    cluster.add_table({"tableName": "clicks", "tableType": "REALTIME",
                       "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "1",
                                          "retentionTimeUnit": "DAYS", "retentionTimeValue": "1"},
                       "tableIndexConfig": {"streamConfigs": configs}})
    old = [{"id": i, "country": "us", "amount": 1.0, "ts": i} for i in range(300)]  # 1970: long expired
    cluster.produce(configs, old, "id")
    wait_until(lambda: count(cluster, "clicks") == 300, 20)
    cluster.controller.retention.run_pass()
    assert count(cluster, "clicks") == 300  # still consuming: kept, however old its rows

    assert http.post(f"{ctl}/tables/clicks/forceCommit").status_code == 200
    wait_until(lambda: len(cluster.committed_segments("clicks_REALTIME")) == 1, 30)
    cluster.controller.retention.run_pass()
    wait_until(lambda: count(cluster, "clicks") == 0, 20)
    ideal = cluster.ideal_state("clicks_REALTIME")
    assert len(ideal) == 1 and "CONSUMING" in next(iter(ideal.values())).values()  # the new consuming segment
    fresh = [{"id": i, "country": "fr", "amount": 2.0, "ts": int(time.time() * 1000)} for i in range(50)]
    cluster.produce(configs, fresh, "id")
    wait_until(lambda: count(cluster, "clicks") == 50, 20)
    assert status(cluster, "clicks")["expiredDeleted"] == 1
