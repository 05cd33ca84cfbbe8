"""A hybrid table on an in-process cluster: one table to clients, halves split at Pinot's time boundary so a row
present in both halves is counted once; lineage hides replaced and in-flight segments from queries; an explicit
boundary wins until cleared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cuvee.pruning.predicate import MAX_NODES
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.offline.support import add_hybrid_sales, metadata_push

DAY = 86_400_000


def day_rows(day: int, ids: range) -> list[dict[str, Any]]:
    return [{"id": i, "country": ("us", "fr")[i % 2], "amount": float(i % 5), "ts": day * DAY + (i % 1000) * 60_000}
            for i in ids]


def as_table(items: list[dict[str, Any]]) -> pa.Table:
    return pa.table({"id": pa.array([r["id"] for r in items], pa.int64()), "country": [r["country"] for r in items],
                     "amount": pa.array([r["amount"] for r in items], pa.float64()),
                     "ts": pa.array([r["ts"] for r in items], pa.int64())})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with InProcessCluster(tmp_path_factory.mktemp("hybrid"), servers=2,
                          controller={"lineage_end_timeout_seconds": 10}) as c:
        yield c


def answer(cluster: InProcessCluster, sql: str) -> list[Any] | None:
    doc = cluster.query(sql)
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0]


def test_hybrid_counts_every_row_once(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    configs = add_hybrid_sales(cluster)
    assert http.get(f"{ctl}/tables").json()["tables"] == ["sales"]

    offline = {day: day_rows(day, range(day * 1000, day * 1000 + 1000)) for day in range(0, 3)}  # days 0,1,2
    realtime = day_rows(2, range(2000, 3000)) + day_rows(3, range(3000, 3500))  # day 2 in both halves
    cluster.produce(configs, realtime, "id")
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales_REALTIME") == [1500], 20)
    # realtime only until the offline half has a served segment: nothing is counted twice meanwhile
    assert answer(cluster, "SELECT COUNT(*) FROM sales") == [1500]

    for day, items in offline.items():
        assert metadata_push(http, ctl, cluster.deep_store, tmp_path, f"sales_{day}", as_table(items)).status_code == 200
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE") == [3000], 20)

    boundary = max(r["ts"] for r in offline[2]) - DAY  # Pinot's rule: max end time − 1 day (DAILY)
    every = {r["id"]: r for items in offline.values() for r in items if r["ts"] <= boundary}
    every.update({r["id"]: r for r in realtime if r["ts"] > boundary})
    expected = [len(every), float(sum(r["amount"] for r in every.values())), len(every)]
    sql = "SELECT COUNT(*), SUM(amount), DISTINCTCOUNT(id) FROM sales"
    wait_until(lambda: answer(cluster, sql) == expected, 20, message=lambda: f"{answer(cluster, sql)} != {expected}")
    # day 2's offline segment lies past the boundary: the offline half's servers skip it (its time min/max)
    assert cluster.query(sql)["numSegmentsPrunedByServer"] == 1
    assert http.get(f"{ctl}/tables/sales/timeBoundary").json() == {"timeColumn": "ts", "timeValue": str(boundary)}
    assert http.get(f"{cluster.broker_url}/debug/timeBoundary/sales").json()["timeValue"] == str(boundary)
    groups = cluster.query("SELECT country, COUNT(*) FROM sales GROUP BY country ORDER BY country")
    assert [r[1] for r in groups["resultTable"]["rows"]] == [
        sum(1 for r in every.values() if r["country"] == c) for c in ("fr", "us")]
    # a WHERE at the pruning filter's bounds, with each half's time bound joined to it, is still one servers accept
    for terms in (MAX_NODES - 3, MAX_NODES - 1):
        ors = " OR ".join(f"id = {n}" for n in range(terms))
        assert answer(cluster, f"SELECT COUNT(*) FROM sales WHERE {ors}") == [sum(1 for i in every if i < terms)]

    # an explicit boundary wins until it is cleared
    assert http.post(f"{ctl}/tables/sales/timeBoundary", params={"timeValue": 2 * DAY - 1}).status_code == 200
    explicit = len([r for items in offline.values() for r in items if r["ts"] <= 2 * DAY - 1]) + \
        len([r for r in realtime if r["ts"] > 2 * DAY - 1])
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales") == [explicit], 20)
    assert http.delete(f"{ctl}/tables/sales/timeBoundary").status_code == 200
    wait_until(lambda: answer(cluster, sql) == expected, 20)


def test_lineage_hides_segments_being_replaced(cluster: InProcessCluster, tmp_path: Path) -> None:
    http, ctl = cluster.http, cluster.controller_url
    before = answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE")
    assert before == [3000]
    start = http.post(f"{ctl}/segments/sales/startReplaceSegments", params={"type": "OFFLINE"},
                      json={"segmentsFrom": ["sales_0"], "segmentsTo": ["sales_0b"]})
    entry = start.json()["segmentLineageEntryId"]
    smaller = as_table(day_rows(0, range(0, 10)))
    assert metadata_push(http, ctl, cluster.deep_store, tmp_path, "sales_0b", smaller).status_code == 200
    # pushed and being loaded, but not switched to: queries still see exactly the old set
    for _ in range(10):
        assert answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE") in ([3000], None)
    assert http.post(f"{ctl}/segments/sales/endReplaceSegments",
                     params={"type": "OFFLINE", "segmentLineageEntryId": entry}).status_code == 200
    wait_until(lambda: answer(cluster, "SELECT COUNT(*) FROM sales_OFFLINE") == [2010], 20)
    routing = http.get(f"{cluster.broker_url}/debug/routingTable/sales_OFFLINE").json()
    assert "sales_0" in routing["hidden"]
