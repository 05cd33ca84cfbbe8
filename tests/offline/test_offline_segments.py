"""Offline tables on an in-process cluster: metadata push, tar push, replace by name (servers reload), deletes,
lineage endpoints, and every refusal a pusher can run into."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cuvee.deepstore import open_deepstore
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import SCHEMA, build_archive, describe, metadata_push, offline_table, rows

DAY = 86_400_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("offline")
    controller = {"max_upload_bytes": 200_000, "deletion_grace_seconds": 3600, "lineage_end_timeout_seconds": 2}
    with InProcessCluster(root, servers=2, controller=controller) as c:
        c.add_schema(SCHEMA)
        c.add_table(offline_table())
        yield c


def count(cluster: InProcessCluster) -> int | None:
    """COUNT(*), or None while the broker's view lags a change (a server already dropped a routed segment)."""
    answer = cluster.query("SELECT COUNT(*) FROM sales")
    return None if answer.get("exceptions") else int(answer["resultTable"]["rows"][0][0])


def wait_count(cluster: InProcessCluster, expected: int) -> None:
    wait_until(lambda: count(cluster) == expected, 15, message=f"COUNT(*) never became {expected}")


def test_push_replace_and_delete(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    pushed = metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_a", rows(range(100), 10 * DAY))
    assert pushed.status_code == 200, pushed.text
    ideal = http.get(f"{ctl}/tables/sales/idealstate").json()["OFFLINE"]
    assert set(ideal["sales_a"].values()) == {"ONLINE"} and len(ideal["sales_a"]) == 2  # replication 2
    meta = cluster.segment_metadata("sales", "sales_a")
    assert meta["status"] == "UPLOADED" and meta["totalDocs"] == 100 and meta["timeMax"] == 10 * DAY + 99
    wait_count(cluster, 100)
    assert cluster.scalar("SELECT SUM(amount) FROM sales") == 100.0

    # tar push: the controller stores the archive itself and counts the bytes it received
    archive = build_archive(tmp_path, "sales_b", rows(range(100, 150), 11 * DAY))
    with open(archive, "rb") as f:
        answer = http.post(f"{ctl}/segments", params={"tableName": "sales"},
                           files={"file": ("sales_b.tar.gz", f, "application/gzip")})
    assert answer.status_code == 200, answer.text
    assert http.get(f"{ctl}/health").json()["receivedSegmentBytes"] >= archive.stat().st_size
    wait_count(cluster, 150)

    # the same name pushed again with other rows: both servers reload it
    again = metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_a", rows(range(10), 10 * DAY, 2.0))
    assert again.status_code == 200, again.text
    def both_replicas_reloaded() -> bool:  # the broker rotates replicas per query: ask several times
        return all(count(cluster) == 60 and cluster.scalar("SELECT SUM(amount) FROM sales WHERE id < 10") == 20.0
                   for _ in range(4))

    wait_until(both_replicas_reloaded, 15, message="a replica kept serving the replaced copy")

    listed = http.get(f"{ctl}/segments/sales", params={"type": "OFFLINE"}).json()
    assert listed == [{"OFFLINE": ["sales_a", "sales_b"]}]

    uri_b = cluster.segment_metadata("sales", "sales_b")["downloadUri"]
    assert uri_b.endswith(".tar.zst") and "/sales_OFFLINE/sales_b." in uri_b  # a key of its own per tar push
    deleted = http.delete(f"{ctl}/segments/sales/sales_b", params={"type": "OFFLINE"})
    assert deleted.status_code == 200, deleted.text
    wait_count(cluster, 10)
    assert http.get(f"{ctl}/segments/sales/sales_b/metadata").status_code == 404
    deep = open_deepstore(cluster.deep_store)
    assert deep.exists(deep.key_of(uri_b))  # kept through the grace period

    assert http.delete(f"{ctl}/segments/sales").status_code == 400  # type is required to delete everything
    assert http.delete(f"{ctl}/segments/sales", params={"type": "OFFLINE"}).status_code == 200
    wait_count(cluster, 0)


def test_lineage_endpoints(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_old", rows(range(5), 20 * DAY)).status_code == 200
    start = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": ["sales_old"], "segmentsTo": ["sales_new"]})
    assert start.status_code == 200, start.text
    entry = start.json()["segmentLineageEntryId"]
    early = http.post(f"{ctl}/segments/sales/endReplaceSegments",
                      params={"type": "OFFLINE", "segmentLineageEntryId": entry})
    assert early.status_code == 400 and "not pushed" in early.json()["error"]
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_new", rows(range(7), 20 * DAY)).status_code == 200
    end = http.post(f"{ctl}/segments/sales/endReplaceSegments", params={"type": "OFFLINE", "segmentLineageEntryId": entry})
    assert end.status_code == 200, end.text
    lineage = http.get(f"{ctl}/segments/sales/lineage").json()
    assert lineage["lineageEntries"][entry]["state"] == "COMPLETED"
    # a replacement whose new segment no server can load is never switched to: the old data stays served
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not an archive")
    uri = open_deepstore(cluster.deep_store).put(junk, "sales_OFFLINE/sales_broken.tar.gz")
    entry2 = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                       json={"segmentsFrom": ["sales_new"], "segmentsTo": ["sales_broken"]}).json()["segmentLineageEntryId"]
    broken = {"segmentName": "sales_broken", "downloadUri": uri, "crc": 1, "totalDocs": 3, "sizeBytes": 14,
              "timeMin": 0, "timeMax": 1}
    assert http.post(f"{ctl}/v2/segments", params={"tableName": "sales"}, json={"segments": [broken]}).status_code == 200
    stuck = http.post(f"{ctl}/segments/sales/endReplaceSegments",
                      params={"type": "OFFLINE", "segmentLineageEntryId": entry2})
    assert stuck.status_code == 409 and "not ONLINE" in stuck.json()["error"]
    assert http.post(f"{ctl}/segments/sales/revertReplaceSegments",
                     params={"type": "OFFLINE", "segmentLineageEntryId": entry2}).status_code == 200
    assert http.get(f"{ctl}/segments/sales/sales_broken/metadata").status_code == 404  # never served: deleted
    assert http.get(f"{ctl}/segments/sales/lineage").json()["lineageEntries"][entry2]["state"] == "REVERTED"

    clash = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": ["nope"], "segmentsTo": ["x"]})
    assert clash.status_code == 400
    for bad in ({"segmentsFrom": [], "segmentsTo": ["../up"]}, {"segmentsFrom": ["a/b"], "segmentsTo": ["y"]},
                {"segmentsFrom": [], "segmentsTo": ["y" * 300]}, {"segmentsFrom": [], "segmentsTo": [7]},
                {"segmentsFrom": [], "segmentsTo": ["sales__0__1__20261121T1647Z"]}):
        refused = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"}, json=bad)
        assert refused.status_code == 400, (bad, refused.text)
    revert = http.post(f"{ctl}/segments/sales/revertReplaceSegments",
                       params={"type": "OFFLINE", "segmentLineageEntryId": "no-such-entry"})
    assert revert.status_code == 400


def test_refusals(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    archive = build_archive(tmp_path, "sales_r", rows(range(3), DAY))
    good = describe(archive, open_deepstore(cluster.deep_store).put(archive, "sales_OFFLINE/sales_r.tar.gz"))

    def push(**changes: Any) -> Any:
        return http.post(f"{ctl}/v2/segments", params={"tableName": "sales"}, json={"segments": [{**good, **changes}]})

    outside = push(downloadUri=(tmp_path / "elsewhere.tar.gz").resolve().as_uri())
    assert outside.status_code == 400 and "not in this controller's deep store" in outside.json()["error"]
    missing = push(downloadUri=good["downloadUri"].replace("sales_r", "sales_gone"))
    assert missing.status_code == 400 and "upload it first" in missing.json()["error"]
    assert push(segmentName="sales__0__1__20261121T1647Z").status_code == 400  # a stream segment's shape
    assert push(segmentName="../escape").status_code == 400
    assert push(segmentName="x" * 300).status_code == 400
    assert push(totalDocs=-1).status_code == 400
    assert http.post(f"{ctl}/v2/segments", params={"tableName": "nope"}, json={"segments": [good]}).status_code == 404
    no_half = http.post(f"{ctl}/v2/segments", params={"tableName": "sales", "tableType": "REALTIME"},
                        json={"segments": [good]})  # a REALTIME half takes only a maintenance job's replace outputs
    assert no_half.status_code == 404 and "no REALTIME part" in no_half.json()["error"]
    assert http.post(f"{ctl}/v2/segments", params={"tableName": "sales"}, content=b"not json").status_code == 400
    big = tmp_path / "big.tar.gz"
    big.write_bytes(b"\0" * 300_000)
    with open(big, "rb") as f:
        refused = http.post(f"{ctl}/segments", params={"tableName": "sales"}, files={"file": ("big.tar.gz", f)})
    assert refused.status_code == 413
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"junk")
    with open(junk, "rb") as f:
        bad = http.post(f"{ctl}/segments", params={"tableName": "sales"}, files={"file": ("junk.tar.gz", f)})
    assert bad.status_code == 400 and "not a valid segment archive" in bad.json()["error"]
    assert "Traceback" not in bad.text
    assert "/tmp" not in bad.text and "cuvee-upload" not in bad.text  # no controller paths in the answer

    # another table's archive (deleting this segment would delete it), an inverted time range
    other = open_deepstore(cluster.deep_store).put(archive, "other_OFFLINE/sales_r.tar.gz")
    foreign = push(downloadUri=other)
    assert foreign.status_code == 400 and "must lie under sales_OFFLINE/" in foreign.json()["error"]
    assert push(timeMin=10, timeMax=5).status_code == 400

    # a tar bomb: a small archive that unpacks to far more than the upload's size is refused before filling disk
    import io
    import tarfile
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("sales_bomb/columns.bin")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(b"\0" * info.size))
    with open(bomb, "rb") as f:
        refused_bomb = http.post(f"{ctl}/segments", params={"tableName": "sales"}, files={"file": ("b.tar.gz", f)})
    assert refused_bomb.status_code == 400 and "unpacks to more than" in refused_bomb.json()["error"]


def test_a_plain_push_of_a_name_lineage_replaced_is_refused(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    deep = open_deepstore(cluster.deep_store)
    for name in ("sales_l1", "sales_l2"):
        archive = build_archive(tmp_path, name, rows(range(4), DAY))
        described = describe(archive, deep.put(archive, f"sales_OFFLINE/{name}.tar.gz"))
        if name == "sales_l1":
            assert http.post(f"{ctl}/v2/segments", params={"tableName": "sales"},
                             json={"segments": [described]}).status_code == 200
            first = described
    entry = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": ["sales_l1"], "segmentsTo": ["sales_l2"]}).json()["segmentLineageEntryId"]
    assert http.post(f"{ctl}/v2/segments", params={"tableName": "sales"},
                     json={"segments": [described]}).status_code == 200  # the entry's own push
    assert http.post(f"{ctl}/segments/sales/endReplaceSegments",
                     params={"type": "OFFLINE", "segmentLineageEntryId": entry}).status_code == 200
    again = http.post(f"{ctl}/v2/segments", params={"tableName": "sales"}, json={"segments": [first]})
    assert again.status_code == 409 and "lineage" in again.json()["error"]  # it would be hidden, then deleted
