"""The ingest job end to end on a multi-process cluster (controller, 2 servers, broker as processes) with a real
local[2] Spark session: Parquet, JSON and CSV land with exact counts; a re-run changes nothing; a changed input
replaces its previous run (APPEND) or the whole table (REFRESH); bad rows are counted and written where the
summary says; a job SIGKILLed between its push and endReplaceSegments leaves the old data served, and the next
run completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.pipeline.ingest import IngestOptions, IngestSummary, run_ingest
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, fast_sqlite
from tests.offline.support import SCHEMA, offline_table

pytestmark = [pytest.mark.spark, pytest.mark.multiprocess]

DAY = 86_400_000
SQL = "SELECT COUNT(*), SUM(amount), DISTINCTCOUNT(id) FROM sales"


def rows(ids: range, first_day: int) -> list[dict[str, Any]]:
    return [{"id": i, "country": ("us", "fr", "de")[i % 3], "amount": float(i % 7),
             "ts": (first_day + i % 3) * DAY + i} for i in ids]


def expected(items: list[dict[str, Any]]) -> list[Any]:
    return [len(items), float(sum(r["amount"] for r in items)), len({r["id"] for r in items})]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("pipeline")
    info = up(LocalClusterSpec(dir=root, servers=2, metadata=fast_sqlite(root), overrides=FAST))
    try:
        http = httpx.Client(timeout=30)
        assert http.post(f"{info['controller']}/schemas", json=SCHEMA).status_code == 200
        assert http.post(f"{info['controller']}/tables", json=offline_table(replication=2)).status_code == 200
        yield {**info, "http": http, "root": root}
        http.close()
    finally:
        down(root)


def answer(cluster: dict[str, Any]) -> list[Any] | None:
    doc = cluster["http"].post(f"{cluster['broker']}/query/sql", json={"sql": SQL}).json()
    return None if doc.get("exceptions") else doc["resultTable"]["rows"][0]


def wait_answer(cluster: dict[str, Any], want: list[Any]) -> None:
    wait_until(lambda: answer(cluster) == want, 60, interval=0.2, message=lambda: f"{answer(cluster)} != {want}")


def ingest(spark: Any, cluster: dict[str, Any], path: Path, **options: Any) -> IngestSummary:
    return run_ingest(spark, IngestOptions(cluster["controller"], "sales", str(path),
                                           bad_rows_dir=str(path.parent / f"bad-{path.stem}"), **options))


def test_formats_reruns_refresh_and_bad_rows(spark: Any, cluster: dict[str, Any]) -> None:
    data = cluster["root"] / "input"
    data.mkdir()
    parquet_rows, json_rows, csv_rows = rows(range(0, 3000), 0), rows(range(3000, 5000), 3), rows(range(5000, 6000), 6)
    pq.write_table(pa.Table.from_pylist(parquet_rows), data / "a.parquet")
    (data / "b.json").write_text("".join(json.dumps(r) + "\n" for r in json_rows))
    lines = ["id,country,amount,ts"] + [f"{r['id']},{r['country']},{r['amount']},{r['ts']}" for r in csv_rows]
    lines += ["6001,us,not-a-number,0", "six,fr,1.0,0", "6003,de,2.0,yesterday"]  # three bad rows
    (data / "c.csv").write_text("\n".join(lines) + "\n")

    first = ingest(spark, cluster, data / "a.parquet")
    assert (first.rows_in, first.rows_out, first.bad_rows) == (3000, 3000, 0)
    assert len(first.segments) == 3  # one per day (DAILY push frequency)
    wait_answer(cluster, expected(parquet_rows))
    ingest(spark, cluster, data / "b.json")
    wait_answer(cluster, expected(parquet_rows + json_rows))
    with_csv = ingest(spark, cluster, data / "c.csv")
    assert (with_csv.rows_in, with_csv.rows_out, with_csv.bad_rows) == (1003, 1000, 3)
    written = [json.loads(line) for f in Path(with_csv.bad_rows_path or "").glob("part-*") for line in f.read_text().splitlines()]
    assert sorted(w["row"]["id"] for w in written) == ["6001", "6003", "six"]
    assert all(w["reason"] for w in written)
    everything = parquet_rows + json_rows + csv_rows
    wait_answer(cluster, expected(everything))

    again = ingest(spark, cluster, data / "a.parquet")  # the same input: nothing pushed, nothing doubled
    assert again.lineage_entry is None and sorted(again.unchanged) == sorted(first.segments)
    assert answer(cluster) == expected(everything)

    changed = rows(range(0, 1500), 0)  # the same path with other content: APPEND replaces that path's last run
    pq.write_table(pa.Table.from_pylist(changed), data / "a.parquet")
    replaced = ingest(spark, cluster, data / "a.parquet")
    assert sorted(replaced.replaced) == sorted(first.segments)
    wait_answer(cluster, expected(changed + json_rows + csv_rows))

    fresh = rows(range(9000, 9500), 1)
    pq.write_table(pa.Table.from_pylist(fresh), data / "d.parquet")
    ingest(spark, cluster, data / "d.parquet", mode="refresh")
    wait_answer(cluster, expected(fresh))


def test_a_job_killed_after_its_push_leaves_the_old_data_served(spark: Any, cluster: dict[str, Any]) -> None:
    before = answer(cluster)
    assert before is not None and before[0] > 0
    data = cluster["root"] / "killed"
    data.mkdir()
    newer = rows(range(20_000, 20_700), 2)
    pq.write_table(pa.Table.from_pylist(newer), data / "e.parquet")
    env = {**os.environ, "CUVEE_FAULTS": "pipeline.after_push=kill", "SPARK_LOCAL_IP": "127.0.0.1"}
    job = subprocess.run([sys.executable, "-m", "cuvee", "pipeline", "ingest", "--controller", cluster["controller"],
                          "--table", "sales", "--input", str(data / "e.parquet"), "--mode", "refresh",
                          "--master", "local[1]"], env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == -9, job.stderr[-2000:]
    lineage = cluster["http"].get(f"{cluster['controller']}/segments/sales/lineage").json()["lineageEntries"]
    assert [e["state"] for e in lineage.values()].count("IN_PROGRESS") == 1
    for _ in range(5):  # pushed but never switched to: the old data is what queries see
        assert answer(cluster) in (before, None)
    done = ingest(spark, cluster, data / "e.parquet", mode="refresh")
    assert done.lineage_entry is not None
    wait_answer(cluster, expected(newer))
    states = [e["state"] for e in cluster["http"].get(f"{cluster['controller']}/segments/sales/lineage")
              .json()["lineageEntries"].values()]
    assert "IN_PROGRESS" not in states


def test_a_partitioned_tables_segments_are_placed_by_partition_and_joined_on_the_servers(
        spark: Any, cluster: dict[str, Any]) -> None:
    """Two tables partitioned alike (Modulo 4 on ``id``) ingested by the job: each segment records its one
    partition (read by the controller from the archive's metadata on the metadata push), a partition's segments
    of both tables share their servers, and a join on ``id`` runs on the servers with the join's exact answer."""
    http = cluster["http"]
    for name in ("lsales", "rsales"):
        assert http.post(f"{cluster['controller']}/schemas", json={**SCHEMA, "schemaName": name}).status_code == 200
        config = offline_table(name=name, replication=1)
        config["tableIndexConfig"]["segmentPartitionConfig"] = {"columnPartitionMap": {
            "id": {"functionName": "Modulo", "numPartitions": 4}}}
        created = http.post(f"{cluster['controller']}/tables", json=config)
        assert created.status_code == 200, created.text
    data = cluster["root"] / "partitioned"
    data.mkdir()
    left, right = rows(range(0, 2000), 0), rows(range(1000, 2600), 0)
    pq.write_table(pa.Table.from_pylist(left), data / "left.parquet")
    pq.write_table(pa.Table.from_pylist(right), data / "right.parquet")
    for name, path in (("lsales", data / "left.parquet"), ("rsales", data / "right.parquet")):
        run_ingest(spark, IngestOptions(cluster["controller"], name, str(path), bad_rows_dir=str(data / f"bad-{name}")))
    placed: dict[int, set[str]] = {}
    for name in ("lsales_OFFLINE", "rsales_OFFLINE"):
        ideal = http.get(f"{cluster['controller']}/tables/{name}/idealstate").json()
        for segment, replicas in ideal.get("OFFLINE", ideal).items():
            meta = http.get(f"{cluster['controller']}/segments/{name}/{segment}/metadata").json()
            partitions = meta["partitionMetadata"]["partitions"]
            assert len(partitions) == 1, (segment, meta)
            placed.setdefault(partitions[0], set()).update(replicas)
    assert sorted(placed) == [0, 1, 2, 3] and all(len(servers) == 1 for servers in placed.values())
    sql = "SELECT COUNT(*), SUM(l.amount) FROM lsales l JOIN rsales r ON l.id = r.id WHERE r.country = 'fr'"
    joined = [r for r in left if 1000 <= r["id"] < 2000 and r["country"] == "fr"]

    def asked() -> dict[str, Any]:
        return http.post(f"{cluster['broker']}/query/sql", json={"sql": sql}).json()

    wait_until(lambda: asked().get("resultTable", {}).get("rows") == [[len(joined), float(sum(r["amount"] for r in joined))]],
               60, interval=0.2, message=lambda: str(asked())[:500])
    assert asked()["numServersQueried"] == 2  # one request per server holding partitions: no table-wide leaves
