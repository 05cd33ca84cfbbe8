"""The broker end to end: real servers' query apps on HTTP, routing from a sqlite metastore, Pinot's API.

Layout of ``events`` (servers A and B), built so that a routing mistake changes the answers:

- partition 0: seq 0 ONLINE on A and B; seq 1 ONLINE on A but still CONSUMING on B, whose consuming copy holds
  only a prefix (reading it would miss committed rows); seq 2 CONSUMING on A.
- partition 1: seq 0 ONLINE on A and B; seq 1 CONSUMING on A and B; seq 2 already CONSUMING on B with rows that
  are not in the reference (reading it before seq 1 is ONLINE would be wrong).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa
import pytest

from cuvee.broker.broker import Broker
from cuvee.broker.config import BrokerConfig
from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.spi.metastore import MetadataStore
from tests.broker.helpers import (
    CLUSTER,
    FAST_META,
    TABLE,
    BlockingSegment,
    MutableView,
    QueryServer,
    committed,
    event_rows,
    register_server,
    segment_name,
    start_query_server,
    wait_until,
    write_table,
    write_view,
)

ON, CO = SegmentState.ONLINE, SegmentState.CONSUMING
GRACE = 2.0


@dataclass
class Cluster:
    meta: MetadataStore
    store: ClusterStore
    servers: dict[str, QueryServer]
    broker: Broker
    rows: pa.Table
    blocking: list[BlockingSegment]
    work: Path

    def query(self, sql: str, options: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"sql": sql}
        if options is not None:
            body["queryOptions"] = options
        response = httpx.post(f"{self.broker.url}/query/sql", json=body, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()


def _events(work: Path, servers: dict[str, QueryServer], store: ClusterStore) -> pa.Table:
    a, b = servers["Server_A"].registry, servers["Server_B"].registry
    p0 = [event_rows(200, 0, 1), event_rows(150, 200, 2), event_rows(60, 350, 3)]
    p1 = [event_rows(180, 1000, 4), event_rows(90, 1180, 5), event_rows(40, 1270, 6)]
    n = {(p, s): segment_name(p, s) for p in range(2) for s in range(3)}
    for registry in (a, b):
        registry.put(TABLE, committed(work / registry_id(registry, a), n[0, 0], p0[0]))
        registry.put(TABLE, committed(work / registry_id(registry, a), n[1, 0], p1[0]))
        registry.put(TABLE, MutableView(n[1, 1], p1[1], last_ingestion_ms=9_000 if registry is a else 8_000))
    a.put(TABLE, committed(work / "a", n[0, 1], p0[1]))
    b.put(TABLE, MutableView(n[0, 1], p0[1].slice(0, 100)))  # B is behind on the segment A already committed
    a.put(TABLE, MutableView(n[0, 2], p0[2], last_ingestion_ms=7_000))
    b.put(TABLE, MutableView(n[1, 2], p1[2]))  # must stay unread until seq 1 is ONLINE somewhere
    write_table(store)
    write_view(store, {
        n[0, 0]: {"Server_A": ON, "Server_B": ON}, n[0, 1]: {"Server_A": ON, "Server_B": CO},
        n[0, 2]: {"Server_A": CO},
        n[1, 0]: {"Server_A": ON, "Server_B": ON}, n[1, 1]: {"Server_A": CO, "Server_B": CO},
        n[1, 2]: {"Server_B": CO},
    })
    return pa.concat_tables([p0[0], p0[1], p0[2], p1[0], p1[1]])


def registry_id(registry: Any, a: Any) -> str:
    return "a" if registry is a else "b"


def _slow_table(work: Path, servers: dict[str, QueryServer], store: ClusterStore) -> list[BlockingSegment]:
    """``slow``: one segment on A answers at once, one on C is stuck; ``slowish`` on C answers late."""
    write_table(store, "slow")
    write_table(store, "slowish")
    fast, stuck = segment_name(0, 0, "slow"), segment_name(1, 0, "slow")
    servers["Server_A"].registry.put("slow_REALTIME", committed(work / "a", fast, event_rows(10, 0, 7)))
    blocked = BlockingSegment(committed(work / "c", stuck, event_rows(10, 10, 8)), hold_seconds=60)
    servers["Server_C"].registry.put("slow_REALTIME", blocked)
    write_view(store, {fast: {"Server_A": ON}, stuck: {"Server_C": ON}}, "slow_REALTIME")
    late_name = segment_name(0, 0, "slowish")
    late = BlockingSegment(committed(work / "c", late_name, event_rows(5, 0, 9)), hold_seconds=1.0)
    servers["Server_C"].registry.put("slowish_REALTIME", late)
    write_view(store, {late_name: {"Server_C": ON}}, "slowish_REALTIME")
    # a table whose config sets a query time limit (Pinot's query.timeoutMs) over a stuck segment
    write_table(store, "slowcfg", query={"timeoutMs": "300"})
    held = segment_name(0, 0, "slowcfg")
    stuck_too = BlockingSegment(committed(work / "c", held, event_rows(3, 0, 10)), hold_seconds=60)
    servers["Server_C"].registry.put("slowcfg_REALTIME", stuck_too)
    write_view(store, {held: {"Server_C": ON}}, "slowcfg_REALTIME")
    return [blocked, late, stuck_too]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("broker")
    uri = f"sqlite://{work / 'meta.db'}?{FAST_META}"
    meta = open_metastore(uri)
    store = ClusterStore(meta, CLUSTER)
    servers = {name: start_query_server(name) for name in ("Server_A", "Server_B", "Server_C")}
    for server in servers.values():
        register_server(meta, store, server)
    rows = _events(work, servers, store)
    blocking = _slow_table(work, servers, store)
    broker = Broker(BrokerConfig(cluster=CLUSTER, metadata=uri, routing_poll_seconds=0.5, timeout_ms=10_000,
                                 server_grace_seconds=GRACE, max_sql_bytes=20_000, max_response_rows=5_000)).start()
    try:
        wait_until(lambda: broker.view and {"events_REALTIME", "slow_REALTIME"} <= set(broker.view.snapshot.tables)
                   and len(broker.view.snapshot.servers) >= 3, message="the broker sees the tables and servers")
        yield Cluster(meta, store, servers, broker, rows, blocking, work)
    finally:
        for segment in blocking:
            segment.release.set()
        broker.stop()
        for server in servers.values():
            server.http.stop()
        meta.close()


def reference(rows: pa.Table, sql: str) -> list[list[Any]]:
    con = duckdb.connect()
    con.register("events", rows)
    return [list(r) for r in con.sql(sql).fetchall()]


def approx(rows: list[list[Any]]) -> list[list[Any]]:
    return [[round(v, 6) if isinstance(v, float) else v for v in row] for row in rows]


QUERIES = [
    ("SELECT COUNT(*), SUM(v), MIN(d), MAX(d), AVG(d) FROM events", None),
    ("SELECT COUNT(DISTINCT id), DISTINCTCOUNT(city) FROM events",
     "SELECT COUNT(DISTINCT id), COUNT(DISTINCT city) FROM events"),
    ("SELECT city, COUNT(*), SUM(v), MAX(id) FROM events GROUP BY city ORDER BY city NULLS LAST LIMIT 100",
     "SELECT city, COUNT(*), SUM(v), MAX(id) FROM events GROUP BY city ORDER BY city NULLS LAST"),
    ("SELECT city, AVG(d) AS a FROM events WHERE v BETWEEN -10 AND 10 AND city IN ('bern', 'cairo', 'berlin') "
     "GROUP BY city HAVING COUNT(*) > 3 ORDER BY a DESC LIMIT 2",
     "SELECT city, AVG(d) AS a FROM events WHERE v BETWEEN -10 AND 10 AND city IN ('bern', 'cairo', 'berlin') "
     "GROUP BY city HAVING COUNT(*) > 3 ORDER BY a DESC LIMIT 2"),
    ("SELECT id, city, v FROM events WHERE v > 15 OR city IS NULL ORDER BY id DESC LIMIT 12 OFFSET 3", None),
    ("SELECT COUNT(*) FROM events WHERE city LIKE 'b%' AND NOT (v < 0)", None),
]


@pytest.mark.parametrize(("sql", "ref"), QUERIES)
def test_answers_equal_duckdb_on_all_rows_whichever_replicas_answer(cluster: Cluster, sql: str,
                                                                    ref: str | None) -> None:
    want = approx(reference(cluster.rows, ref or sql))
    for _ in range(3):  # consecutive requests rotate the replicas each segment is read from
        response = cluster.query(sql)
        assert response["exceptions"] == []
        assert approx(response["resultTable"]["rows"]) == want


@pytest.mark.parametrize(("sql", "pruned"), [
    # committed segments hold ids 0-199 (partition 0), 200-349 (partition 0, on A) and 1000-1179 (partition 1);
    # the consuming segments (350-409, 1180-1269) are never pruned
    ("SELECT COUNT(*), SUM(d), MIN(city) FROM events WHERE id = 1100", 2),
    ("SELECT id, city, d FROM events WHERE id IN (5, 1500) OR id BETWEEN 1260 AND 1300 ORDER BY id LIMIT 50", 2),
    ("SELECT city, COUNT(*) FROM events WHERE id > 1179 GROUP BY city ORDER BY city NULLS LAST LIMIT 10", 3),
    ("SELECT COUNT(*) FROM events WHERE id >= 100 AND id < 250", 1),
    ("SELECT COUNT(*) FROM events WHERE NOT (id = 1100)", 0),
])
def test_segments_whose_stats_rule_out_the_filter_are_skipped_with_the_same_answer(cluster: Cluster, sql: str,
                                                                                   pruned: int) -> None:
    response = cluster.query(sql)
    assert response["exceptions"] == []
    assert approx(response["resultTable"]["rows"]) == approx(reference(cluster.rows, sql))
    assert response["numSegmentsPrunedByServer"] == pruned
    assert response["numSegmentsProcessed"] == response["numSegmentsQueried"] - pruned
    assert response["totalDocs"] == cluster.rows.num_rows  # a pruned segment's rows still count, as in Pinot


def test_response_statistics(cluster: Cluster) -> None:
    response = cluster.query("SELECT COUNT(*) FROM events WHERE v > 0")
    assert response["numServersQueried"] == response["numServersResponded"] == 2
    assert response["partialResult"] is False
    assert response["totalDocs"] == cluster.rows.num_rows
    assert response["numDocsScanned"] == reference(cluster.rows, "SELECT COUNT(*) FROM events WHERE v > 0")[0][0]
    assert response["numSegmentsQueried"] == 5
    assert response["numConsumingSegmentsQueried"] == 2
    assert response["minConsumingFreshnessTimeMs"] in (7_000, 8_000)
    assert response["resultTable"]["dataSchema"] == {"columnNames": ["count(*)"], "columnDataTypes": ["LONG"]}
    assert int(response["requestId"]) > 0 and response["timeUsedMs"] >= 0


def test_timestamps_are_pinot_strings_and_get_and_alias_endpoints_work(cluster: Cluster) -> None:
    sql = "SELECT id, ts FROM events ORDER BY id LIMIT 2"
    first = cluster.query(sql)
    assert first["resultTable"]["dataSchema"]["columnDataTypes"] == ["LONG", "TIMESTAMP"]
    assert first["resultTable"]["rows"][0][1].endswith(".0") and first["resultTable"]["rows"][0][0] == 0
    got = httpx.get(f"{cluster.broker.url}/query/sql", params={"sql": sql}, timeout=30).json()
    assert got["resultTable"] == first["resultTable"]
    alias = httpx.post(f"{cluster.broker.url}/query", json={"sql": sql}, timeout=30).json()
    assert alias["resultTable"] == first["resultTable"]
    assert httpx.get(f"{cluster.broker.url}/health", timeout=10).text == "OK"


@pytest.mark.parametrize(("sql", "code"), [
    ("SELECT COUNT(*) FROM nowhere", 190),
    ("SELEC COUNT(*) FROM events", 150),
    ("SELECT nope FROM events", 710),
    ("DELETE FROM events", 150),
    ("SELECT id FROM events LIMIT 6000", 700),
])
def test_query_errors_are_pinot_codes_in_http_200(cluster: Cluster, sql: str, code: int) -> None:
    response = cluster.query(sql)
    assert [e["errorCode"] for e in response["exceptions"]] == [code]
    assert "resultTable" not in response


def test_query_options_with_empty_entries_and_bad_values(cluster: Cluster) -> None:
    ok = cluster.query("SELECT COUNT(*) FROM events", "timeoutMs=5000;;")
    assert ok["exceptions"] == [] and ok["resultTable"]["rows"] == [[cluster.rows.num_rows]]
    bad = cluster.query("SELECT COUNT(*) FROM events", "timeoutMs=soon")
    assert [e["errorCode"] for e in bad["exceptions"]] == [150]


def test_oversize_sql_and_bodies_are_refused_clearly(cluster: Cluster) -> None:
    long_sql = "SELECT COUNT(*) FROM events WHERE " + " OR ".join(f"id = {i}" for i in range(3000))
    response = cluster.query(long_sql)
    assert [e["errorCode"] for e in response["exceptions"]] == [700]
    assert "at most 20000" in response["exceptions"][0]["message"]
    huge = httpx.post(f"{cluster.broker.url}/query/sql", content=b"x" * 200_000, timeout=30)
    assert huge.status_code == 413 and "bytes" in huge.json()["error"]
    not_json = httpx.post(f"{cluster.broker.url}/query/sql", content=b"{sql", timeout=30)
    assert not_json.status_code == 400
    assert cluster.query("SELECT COUNT(*) FROM events")["exceptions"] == [], "the broker still serves"


def test_a_server_that_does_not_answer_in_time_gives_427_and_a_partial_result(cluster: Cluster) -> None:
    response = cluster.query("SELECT COUNT(*) FROM slow", "timeoutMs=300")
    assert [e["errorCode"] for e in response["exceptions"]] == [427]
    assert "Server_C" in response["exceptions"][0]["message"]
    assert response["partialResult"] is True
    assert response["numServersQueried"] == 2 and response["numServersResponded"] == 1
    assert response["resultTable"]["rows"] == [[10]], "the server that answered is still merged"


def test_a_table_configs_query_timeout_applies_when_the_query_sets_none(cluster: Cluster) -> None:
    wait_until(lambda: "slowcfg_REALTIME" in cluster.broker.view.snapshot.tables)
    started = time.monotonic()
    response = cluster.query("SELECT COUNT(*) FROM slowcfg")  # the broker's own default is 10 s
    assert [e["errorCode"] for e in response["exceptions"]] == [427]
    assert time.monotonic() - started < 5
    assert response["partialResult"] is True


def test_a_server_that_times_out_itself_reports_250(cluster: Cluster) -> None:
    response = cluster.query("SELECT COUNT(*) FROM slowish", "timeoutMs=300")
    assert [e["errorCode"] for e in response["exceptions"]] == [250]
    assert response["numServersResponded"] == 1 and response["partialResult"] is True


def test_unavailable_and_missing_segments_are_reported(cluster: Cluster) -> None:
    table = write_table(cluster.store, "gaps")
    here, gone, unserved = (segment_name(0, i, "gaps") for i in range(3))
    cluster.servers["Server_A"].registry.put(table, committed(cluster.work / "a", here, event_rows(4, 0, 3)))
    write_view(cluster.store, {here: {"Server_A": ON}, gone: {"Server_A": ON},
                               unserved: {"Server_B": SegmentState.ERROR}}, table)
    # wait for the broker to see the view (until then the table may answer [[0]] with no exception)
    response = wait_until(lambda: (r := cluster.query("SELECT COUNT(*) FROM gaps")) and "resultTable" in r
                          and len(r["exceptions"]) == 2 and r)
    codes = sorted(e["errorCode"] for e in response["exceptions"])
    assert codes == [235, 305]
    assert response["resultTable"]["rows"] == [[4]] and response["partialResult"] is True


def test_routing_follows_external_view_changes(cluster: Cluster) -> None:
    table = write_table(cluster.store, "moving")
    first, second = segment_name(0, 0, "moving"), segment_name(0, 1, "moving")
    a = cluster.servers["Server_A"].registry
    a.put(table, MutableView(first, event_rows(30, 0, 11)))
    write_view(cluster.store, {first: {"Server_A": CO}}, table)
    wait_until(lambda: cluster.query("SELECT COUNT(*) FROM moving").get("resultTable", {}).get("rows") == [[30]])
    # the commit: first ONLINE (swapped in the registry), second CONSUMING with rows after it
    a.swap(table, first, committed(cluster.work / "a", first, event_rows(30, 0, 11)))
    a.put(table, MutableView(second, event_rows(5, 30, 12)))
    write_view(cluster.store, {first: {"Server_A": ON}, second: {"Server_A": CO}}, table)
    wait_until(lambda: cluster.query("SELECT COUNT(*) FROM moving").get("resultTable", {}).get("rows") == [[35]])


def test_pinotdb_dbapi_reads_the_right_rows(cluster: Cluster) -> None:
    from pinotdb import connect

    port = int(cluster.broker.url.rsplit(":", 1)[1])
    connection = connect(host="127.0.0.1", port=port, path="/query/sql", scheme="http")
    cursor = connection.cursor()
    cursor.execute("SELECT city, COUNT(*) AS n, SUM(d) FROM events GROUP BY city ORDER BY city NULLS LAST LIMIT 100")
    got = [list(row) for row in cursor.fetchall()]
    assert approx(got) == approx(reference(cluster.rows, "SELECT city, COUNT(*), SUM(d) FROM events GROUP BY city "
                                                         "ORDER BY city NULLS LAST"))
    assert [d[0] for d in cursor.description] == ["city", "n", "sum(d)"]
    cursor.execute("SELECT id, v FROM events WHERE v = 20 ORDER BY id LIMIT 1000")
    assert [list(r) for r in cursor.fetchall()] == reference(cluster.rows,
                                                             "SELECT id, v FROM events WHERE v = 20 ORDER BY id")
    with pytest.raises(Exception, match="190"):
        cursor.execute("SELECT COUNT(*) FROM nowhere")


def test_concurrent_queries_all_answer(cluster: Cluster) -> None:
    import concurrent.futures

    sql = "SELECT COUNT(*), SUM(v) FROM events"
    want = reference(cluster.rows, sql)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: cluster.query(sql)["resultTable"]["rows"], range(24)))
    assert len(answers) == 24 and all(a == want for a in answers)


KEYED = "SELECT id % 53 AS k, COUNT(*), SUM(d), MIN(v) FROM events GROUP BY k ORDER BY k DESC LIMIT 4 OFFSET 2"


def test_servers_trimming_groups_ordered_by_key_answer_exactly(cluster: Cluster) -> None:
    """Both servers hold rows of every k (53 groups each) and keep 5 × 6 of them: the answer is DuckDB's, and an
    exact trim is not reported."""
    want = approx(reference(cluster.rows, KEYED))
    for _ in range(3):  # the replicas rotate: the groups split differently between the servers
        response = cluster.query(f"SET minServerGroupTrimSize = 1; {KEYED}")
        assert response["exceptions"] == []
        assert approx(response["resultTable"]["rows"]) == want
        assert (response["groupsTrimmed"], response["numGroupsLimitReached"]) == (False, False)


def test_a_trim_ranked_on_partial_aggregates_is_made_exact_or_reported(cluster: Cluster) -> None:
    sql = "SELECT id % 53 AS k, COUNT(*) AS c FROM events GROUP BY k ORDER BY c DESC, k LIMIT 2"
    exact = cluster.query(sql, "minServerGroupTrimSize=1")  # 53 groups, 10 kept: a second round (trim_rounds)
    assert exact["groupsTrimmed"] is False and exact["exceptions"] == []
    assert approx(exact["resultTable"]["rows"]) == approx(reference(cluster.rows, sql))
    pinot = cluster.query(sql, "minServerGroupTrimSize=1;accurateGroupByWithOrderBy=false")  # Pinot's one round
    assert pinot["groupsTrimmed"] is True and pinot["numServersQueried"] == 2
    untrimmed = cluster.query(sql, "minServerGroupTrimSize=-1")  # <= 0: no trim
    assert untrimmed["groupsTrimmed"] is False
    assert approx(untrimmed["resultTable"]["rows"]) == approx(reference(cluster.rows, sql))
    assert cluster.query(sql)["groupsTrimmed"] is False  # the default keeps 5,000: nothing to trim here


def test_num_groups_limit_drops_groups_and_says_so(cluster: Cluster) -> None:
    sql = "SELECT id, COUNT(*) FROM events GROUP BY id LIMIT 5000"
    every = cluster.query(sql)
    assert every["numRowsResultSet"] == cluster.rows.num_rows and every["numGroupsLimitReached"] is False
    limited = cluster.query(sql, "numGroupsLimit=50")
    assert limited["exceptions"] == [] and limited["numGroupsLimitReached"] is True
    assert 50 <= limited["numRowsResultSet"] <= 100  # each of the two servers keeps 50 ids
    assert limited["groupsTrimmed"] is False and limited["partialResult"] is False  # Pinot's flags
    assert limited["numDocsScanned"] == every["numDocsScanned"]  # the rows were scanned all the same
    bad = cluster.query(sql, "numGroupsLimit=0")
    assert [e["errorCode"] for e in bad["exceptions"]] == [150] and "numGroupsLimit" in bad["exceptions"][0]["message"]


WHOLE = ("SELECT city, COUNT(*) AS c, DISTINCTCOUNT(v), AVG(d) FROM {t} WHERE v > -5 GROUP BY city "
         "ORDER BY c DESC, city NULLS LAST LIMIT 3")
WHOLE_REF = ("SELECT city, COUNT(*) AS c, COUNT(DISTINCT v), AVG(d) FROM events WHERE v > -5 GROUP BY city "
             "ORDER BY c DESC, city NULLS LAST LIMIT 3")


def test_one_server_answers_an_aggregation_whole(cluster: Cluster) -> None:
    """Every segment on one server: it answers the query in one step (no partials merged), right, with the rows
    that passed WHERE as numDocsScanned."""
    table = write_table(cluster.store, "single")
    parts = [event_rows(120, 0, 21), event_rows(80, 120, 22)]
    names = [segment_name(0, i, "single") for i in range(2)]
    for name, part in zip(names, parts):
        cluster.servers["Server_A"].registry.put(table, committed(cluster.work / "a", name, part))
    write_view(cluster.store, {name: {"Server_A": ON} for name in names}, table)
    rows = pa.concat_tables(parts)
    response = wait_until(lambda: (r := cluster.query(WHOLE.format(t="single"))) and "resultTable" in r and r)
    assert response["exceptions"] == [] and response["numServersQueried"] == 1
    assert approx(response["resultTable"]["rows"]) == approx(reference(rows, WHOLE_REF))
    assert response["numDocsScanned"] == reference(rows, "SELECT COUNT(*) FROM events WHERE v > -5")[0][0]
    assert response["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "LONG", "INT", "DOUBLE"]
    docs = response["numDocsScanned"]
    empty = cluster.query("SELECT city, COUNT(*) FROM single WHERE v > -5 GROUP BY city HAVING COUNT(*) > 1000")
    assert empty["resultTable"]["rows"] == [] and empty["numDocsScanned"] == docs  # counted alone
    bounded = cluster.query(WHOLE.format(t="single"), "numGroupsLimit=1")  # Pinot's cut, asked for: two steps
    assert bounded["numGroupsLimitReached"] is True and len(bounded["resultTable"]["rows"]) == 1


def test_a_whole_answer_missing_a_moved_segment_is_asked_again_in_parts(cluster: Cluster) -> None:
    """The one server routed to no longer holds a segment another replica holds (a move under way): its one-step
    answer cannot be merged with the other's, so it is asked for its partial result instead; no row is lost."""
    table = write_table(cluster.store, "moved")
    kept, moved = segment_name(0, 0, "moved"), segment_name(0, 1, "moved")
    parts = [event_rows(90, 0, 23), event_rows(70, 90, 24)]
    cluster.servers["Server_A"].registry.put(table, committed(cluster.work / "a", kept, parts[0]))
    cluster.servers["Server_B"].registry.put(table, committed(cluster.work / "b", moved, parts[1]))
    write_view(cluster.store, {kept: {"Server_A": ON}, moved: {"Server_A": ON, "Server_B": ON}}, table)
    want = approx(reference(pa.concat_tables(parts), WHOLE_REF))
    wait_until(lambda: "resultTable" in cluster.query(WHOLE.format(t="moved")))
    asked = set()
    for _ in range(8):  # the replica chosen for the moved segment rotates: A (then asked again) or B
        response = cluster.query(WHOLE.format(t="moved"))
        assert response["exceptions"] == [] and approx(response["resultTable"]["rows"]) == want
        asked.add(response["numServersQueried"])
    assert asked == {2, 3}  # A and B at once; or A whole, A again in parts and B for the moved segment
