"""A server's consuming-memory budget on a live cluster: with ``consuming_memory_bytes`` set, consuming segments end
early when they reach their share (stop reason memoryLimit, told in their story) instead of growing to their row
threshold, and every row is still there."""

from __future__ import annotations

from pathlib import Path

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "budget"
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"},
                                                       {"name": "tag", "dataType": "STRING"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
BUDGET = 64 * 1024


def test_consuming_segments_end_at_their_share_of_the_budget(tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=1, server={"consuming_memory_bytes": BUDGET}) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=2, replicas=1, flush_rows=1_000_000)
        rows = 20_000
        cluster.produce(configs, ({"id": i, "tag": f"tag-{i % 997}", "v": i} for i in range(rows)), key_field="id")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == rows, 60)
        assert cluster.scalar(f"SELECT COUNT(DISTINCT id) FROM {TABLE}") == rows
        records = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/metadata").json().values()
        done = [r for r in records if r["status"] == "DONE"]
        assert len(done) >= 2 and all(r["totalDocs"] < 1_000_000 for r in done)  # ended long before the rows
        info = cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/consumingSegmentsInfo").json()
        # a segment the ideal state has just made consuming may not be started yet (NOT_REPORTED: no figures;
        # CI once caught one mid-roll); every replica that reports says its memory
        reported = [r for replicas in info["_segmentToConsumingInfoMap"].values() for r in replicas
                    if r["consumerState"] not in ("NOT_REPORTED", "NOT_REACHABLE")]
        # its share, give a batch: half the budget while both partitions' segments are held, the whole budget while
        # the other partition's next segment is not started yet (a segment that ends leaves its share to the
        # others: ``Server._memory_share``), which a loaded machine made long enough to fill it; never more
        assert all(r["memoryBytes"] <= BUDGET + 32 * 1024 for r in reported), reported
        story = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/{done[0]['segmentName']}/story").json()
        assert any(e.get("reason") == "memoryLimit" for e in story["events"] if e["kind"] == "segmentConsumed")
