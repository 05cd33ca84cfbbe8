"""A hybrid table through the broker on an in-process cluster: ``sales`` is one table to clients, its halves split
at Pinot's time boundary so rows present in both halves (one day of overlap) are counted exactly once; naming a
half reads that half alone; lineage written to the metadata store switches the offline set in one step.

The offline half is loaded the way a batch job's metadata push leaves it (segment built and packed, archive in the
deep store, UPLOADED metadata, ideal state ONLINE), written directly, so this tests the broker and not the push API.
The time column is a TIMESTAMP (the boundary compares epoch milliseconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cuvee.cluster.records import SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.lineage.model import LineageEntry, LineageState
from cuvee.metastore import open_metastore
from cuvee.segment.archive import pack
from cuvee.segment.builder import build_segment
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import add_hybrid_sales

DAY = 86_400_000
BASE = (int(time.time() * 1000) // DAY - 4) * DAY  # four days ago, midnight UTC: nothing is old enough to expire
SCHEMA = {
    "schemaName": "sales",
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"}],
    "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
}
OFFLINE_CONFIG = {"tableName": "sales", "tableType": "OFFLINE",
                  "segmentsConfig": {"timeColumnName": "ts", "replication": "1"}}
SQL = "SELECT COUNT(*), SUM(amount), DISTINCTCOUNT(id) FROM sales"


def day_rows(day: int, ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "country": ("us", "fr")[i % 2], "amount": float(i % 7), "ts": BASE + day * DAY + (i % 1000) * 60_000}
            for i in ids]


OFFLINE = {day: day_rows(day, range(day * 1000, day * 1000 + 1000)) for day in range(3)}  # days 0, 1, 2
REALTIME = day_rows(2, range(2000, 3000)) + day_rows(3, range(3000, 3400))  # day 2 is in both halves
BOUNDARY = max(r["ts"] for r in OFFLINE[2]) - DAY  # Pinot's rule: max offline end time − 1 day (DAILY)


def expected(offline: dict[int, list[dict[str, Any]]], boundary: int) -> list[Any]:
    rows = [r for items in offline.values() for r in items if r["ts"] <= boundary]
    rows += [r for r in REALTIME if r["ts"] > boundary]
    return [len(rows), float(sum(r["amount"] for r in rows)), len({r["id"] for r in rows})]


def answer(cluster: InProcessCluster, sql: str) -> list[Any] | None:
    doc = cluster.query(sql)
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    with InProcessCluster(tmp_path_factory.mktemp("hybrid"), servers=2) as c:
        yield c


@pytest.fixture(scope="module")
def store(cluster: InProcessCluster) -> Iterator[ClusterStore]:
    meta = open_metastore(cluster.metadata)
    try:
        yield ClusterStore(meta, "cuvee")
    finally:
        meta.close()


def push_offline(cluster: InProcessCluster, store: ClusterStore, work: Path, name: str,
                 rows: list[dict[str, Any]], server: str) -> None:
    """What a metadata push leaves behind: the archive in the deep store, UPLOADED metadata, the segment ONLINE."""
    data = pa.table({"id": pa.array([r["id"] for r in rows], pa.int64()), "country": [r["country"] for r in rows],
                     "amount": pa.array([r["amount"] for r in rows], pa.float64()),
                     "ts": pa.array([r["ts"] for r in rows], pa.timestamp("ms"))})
    config = TableConfig.from_json(OFFLINE_CONFIG)
    segment = build_segment(data, Schema.from_json(SCHEMA), config.indexing, work / "built", name,
                            table_name="sales_OFFLINE", time_column="ts", overwrite=True)
    uri = open_deepstore(cluster.deep_store).put(pack(segment.path, work / f"{name}.tar.gz"),
                                                 f"sales_OFFLINE/{name}.tar.gz")
    store.create_segment("sales_OFFLINE", SegmentRecord(
        name, SegmentStatus.UPLOADED, int(time.time() * 1000), total_docs=len(rows), size_bytes=segment.size_bytes,
        crc=segment.crc, time_min=min(r["ts"] for r in rows), time_max=max(r["ts"] for r in rows),
        download_uri=uri))
    store.update_ideal_state("sales_OFFLINE", lambda ideal: ideal.with_segment(name, {server: SegmentState.ONLINE})
                             .with_crcs({name: segment.crc}))


def test_hybrid_table_counts_every_row_exactly_once(cluster: InProcessCluster, store: ClusterStore,
                                                    tmp_path: Path) -> None:
    configs = add_hybrid_sales(cluster, OFFLINE_CONFIG, SCHEMA)
    cluster.produce(configs, REALTIME, "id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales_REALTIME") == [len(REALTIME)], 20)
    # no offline segment served yet: the realtime half alone, unfiltered, and no boundary to show
    assert answer(cluster, "SELECT COUNT(*) FROM sales") == [len(REALTIME)]
    assert cluster.http.get(f"{cluster.broker_url}/debug/timeBoundary/sales").status_code == 404

    servers = cluster.server_instances()
    for day, rows in OFFLINE.items():
        push_offline(cluster, store, tmp_path, f"sales_{day}", rows, servers[day % len(servers)])
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE") == [3000], 30)
    want = expected(OFFLINE, BOUNDARY)
    assert want[0] < 3000 + len(REALTIME), "the halves overlap: a plain union would count day 2 twice"
    wait_until(lambda: answer(cluster, SQL) == want, 20, message=lambda: f"{answer(cluster, SQL)} != {want}")

    # a half named with its type is read alone, unfiltered
    assert answer(cluster, "SELECT COUNT(*) FROM sales_REALTIME") == [len(REALTIME)]
    assert answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE") == [3000]
    # group by and selection merge across the halves in the one merge
    groups = cluster.query("SELECT country, COUNT(*) FROM sales GROUP BY country ORDER BY country")["resultTable"]
    rows = [r for items in OFFLINE.values() for r in items if r["ts"] <= BOUNDARY] + \
        [r for r in REALTIME if r["ts"] > BOUNDARY]
    assert groups["rows"] == [[c, sum(1 for r in rows if r["country"] == c)] for c in ("fr", "us")]
    # each half's servers keep 5 × 3 of the 50 groups they hold, ranked alike: exact across the halves too
    trimmed = cluster.query("SET minServerGroupTrimSize = 1; SELECT id % 50 AS k, COUNT(*), SUM(amount) FROM sales "
                            "GROUP BY k ORDER BY k DESC LIMIT 3")
    assert trimmed["resultTable"]["rows"] == [
        [k, sum(1 for r in rows if r["id"] % 50 == k), float(sum(r["amount"] for r in rows if r["id"] % 50 == k))]
        for k in (49, 48, 47)]
    assert trimmed["groupsTrimmed"] is False and trimmed["exceptions"] == []
    edge = cluster.query("SELECT id FROM sales WHERE ts BETWEEN "
                         f"{BOUNDARY - 60_000} AND {BOUNDARY + 60_000} ORDER BY id LIMIT 10")
    assert [r[0] for r in edge["resultTable"]["rows"]] == sorted(
        r["id"] for r in rows if BOUNDARY - 60_000 <= r["ts"] <= BOUNDARY + 60_000)
    stats = cluster.query("SELECT COUNT(*) FROM sales")
    assert stats["numDocsScanned"] == want[0] and stats["totalDocs"] == 3000 + len(REALTIME)

    # what the broker applies, for operators
    assert cluster.http.get(f"{cluster.broker_url}/debug/timeBoundary/sales").json() == {
        "timeColumn": "ts", "timeValue": str(BOUNDARY)}
    assert cluster.http.get(f"{cluster.broker_url}/debug/timeBoundary/sales_REALTIME").status_code == 404
    assert cluster.http.get(f"{cluster.broker_url}/debug/timeBoundary/nope").status_code == 404
    routing = cluster.http.get(f"{cluster.broker_url}/debug/routingTable/sales").json()
    assert routing["timeBoundary"]["timeValue"] == str(BOUNDARY)
    assert [(h["table"], h["timeFilter"]) for h in routing["halves"]] == [
        ("sales_OFFLINE", {"column": "ts", "op": "<=", "value": BOUNDARY}),
        ("sales_REALTIME", {"column": "ts", "op": ">", "value": BOUNDARY})]
    assert sorted(s for segs in routing["halves"][0]["servers"].values() for s in segs) == [
        "sales_0", "sales_1", "sales_2"]


def test_lineage_switches_the_offline_set_in_one_step(cluster: InProcessCluster, store: ClusterStore,
                                                      tmp_path: Path) -> None:
    """Replace ``sales_0`` by ``sales_0b`` (its first 100 rows): hidden while IN_PROGRESS even though ONLINE, then
    the switch on COMPLETED; a query sees exactly one of the two sets at any moment."""
    before = expected(OFFLINE, BOUNDARY)
    assert answer(cluster, SQL) == before
    store.update_lineage("sales_OFFLINE", lambda lin: lin.with_entry(
        "e1", LineageEntry(("sales_0",), ("sales_0b",), LineageState.IN_PROGRESS, 1)))
    push_offline(cluster, store, tmp_path, "sales_0b", OFFLINE[0][:100], cluster.server_instances()[0])
    wait_until(lambda: store.external_view("sales_OFFLINE") is not None
               and "sales_0b" in store.external_view("sales_OFFLINE").segments, 30)
    wait_until(lambda: "sales_0b" in cluster.http.get(
        f"{cluster.broker_url}/debug/routingTable/sales_OFFLINE").json()["hidden"], 10)
    assert answer(cluster, SQL) == before

    after = expected({**OFFLINE, 0: OFFLINE[0][:100]}, BOUNDARY)
    store.update_lineage("sales_OFFLINE", lambda lin: lin.with_entry(
        "e1", lin.entries["e1"].with_state(LineageState.COMPLETED, 2)))
    deadline = time.monotonic() + 10
    while (got := answer(cluster, SQL)) != after:
        assert got == before, f"{got} is neither the old set {before} nor the new one {after}"
        assert time.monotonic() < deadline, "the broker never switched to the new set"
        time.sleep(0.02)
    routing = cluster.http.get(f"{cluster.broker_url}/debug/routingTable/sales_OFFLINE").json()
    assert routing["hidden"] == ["sales_0"]
    assert sorted(s for segs in routing["servers"].values() for s in segs) == ["sales_0b", "sales_1", "sales_2"]
