"""Pinot's aggregations, GAPFILL and EXPLAIN PLAN FOR through a real broker and two servers, on the events layout of
``test_broker_cluster`` (committed and consuming segments, replicas rotating between requests): each answer equals
a model over all rows, whichever replicas answer."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pytest

from tests.broker.test_broker_cluster import Cluster, cluster, reference  # noqa: F401 - the module's cluster fixture

BUCKET_MS = 300_000


def _by_city(rows: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["city"], []).append(row)
    return groups


def _last(rows: list[dict[str, Any]]) -> Any:
    pairs = [(r["ts"], r["v"]) for r in rows if r["v"] is not None]
    return max(pairs)[1] if pairs else None


def _mode(rows: list[dict[str, Any]]) -> float | None:
    counts = Counter(float(r["d"]) for r in rows if r["d"] is not None)
    top = max(counts.values())
    return min(v for v, n in counts.items() if n == top)


def _histogram(rows: list[dict[str, Any]]) -> list[float]:
    counts = [0.0] * 4
    for r in rows:
        if r["v"] is not None:
            counts[min(int((r["v"] + 20) // 10), 3)] += 1
    return counts


def _funnel(rows: list[dict[str, Any]]) -> list[int]:
    first = {r["id"] % 7 for r in rows if r["v"] is not None and r["v"] > 0}
    second = {r["id"] % 7 for r in rows if r["d"] is not None and r["d"] > 0}
    return [len(first), len(first & second)]


def test_new_aggregations_answer_the_model_whichever_replicas_answer(cluster: Cluster) -> None:  # noqa: F811
    sql = ("SELECT city, LASTWITHTIME(v, ts, 'INT'), MODE(d), HISTOGRAM(v, -20, 20, 4), "
           "FUNNEL_COUNT(STEPS(v > 0, d > 0), CORRELATE_BY(id % 7)), EXPR_MAX(id, d, id), ARRAY_AGG(v, 'INT', true) "
           "FROM events GROUP BY city ORDER BY city NULLS LAST LIMIT 100")
    groups = _by_city(cluster.rows.to_pylist())
    want = [[city, _last(rows), _mode(rows), _histogram(rows), _funnel(rows),
             max(rows, key=lambda r: (r["d"], r["id"]))["id"],
             sorted({r["v"] for r in rows if r["v"] is not None})]
            for city, rows in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))]
    for _ in range(3):  # consecutive requests read the segments from other replicas
        response = cluster.query(sql)
        assert response["exceptions"] == []
        got = [row[:-1] + [sorted(row[-1])] for row in response["resultTable"]["rows"]]
        assert got == want
        assert response["resultTable"]["dataSchema"]["columnDataTypes"] == [
            "STRING", "INT", "DOUBLE", "DOUBLE_ARRAY", "LONG_ARRAY", "LONG", "INT_ARRAY"]
        assert response["numConsumingSegmentsQueried"] == 2


def test_bad_arguments_are_pinots_150_not_a_python_error(cluster: Cluster) -> None:  # noqa: F811
    response = cluster.query("SELECT LASTWITHTIME(v, ts) FROM events")
    assert [e["errorCode"] for e in response["exceptions"]] == [150]
    assert "takes 3 arguments" in response["exceptions"][0]["message"]
    assert "Traceback" not in response["exceptions"][0]["message"]


def test_gapfill_fills_every_city_in_every_bucket(cluster: Cluster) -> None:  # noqa: F811
    base = min(r["ts"] for r in cluster.rows.to_pylist())
    start = int(base.replace(tzinfo=dt.timezone.utc).timestamp() * 1000) // BUCKET_MS * BUCKET_MS
    end = start + 6 * BUCKET_MS
    inner = ("SELECT DATETIMECONVERT(ts, '1:MILLISECONDS:EPOCH', '1:MILLISECONDS:EPOCH', '5:MINUTES') AS bucket, "
             "city, COUNT(*) AS n FROM events GROUP BY 1, 2 ORDER BY 1 LIMIT 1000")
    sql = (f"SELECT GAPFILL(bucket, '1:MILLISECONDS:EPOCH', '{start}', '{end}', '5:MINUTES', "
           f"FILL(n, 'FILL_DEFAULT_VALUE'), TIMESERIESON(city)), city, n FROM ({inner}) LIMIT 1000")
    counts = {(b, c): n for b, c, n in reference(
        cluster.rows, f"SELECT epoch_ms(ts) // {BUCKET_MS} * {BUCKET_MS}, city, COUNT(*) FROM events GROUP BY 1, 2")}
    cities = {c for _, c in counts}
    response = cluster.query(sql)
    assert response["exceptions"] == []
    assert response["resultTable"]["dataSchema"]["columnNames"] == ["bucket", "city", "n"]
    rows = response["resultTable"]["rows"]
    assert len(rows) == 6 * len(cities)
    assert {(b, c): n for b, c, n in rows} == {(start + i * BUCKET_MS, c): counts.get((start + i * BUCKET_MS, c), 0)
                                               for i in range(6) for c in cities}
    assert [b for b, _, _ in rows] == sorted(b for b, _, _ in rows)
    assert response["numServersQueried"] == 2 and response["numDocsScanned"] == cluster.rows.num_rows


def test_explain_plan_for_describes_what_servers_run_and_what_the_broker_merges(cluster: Cluster) -> None:  # noqa: F811
    response = cluster.query("EXPLAIN PLAN FOR SELECT city, MODE(v) FROM events WHERE v > 0 GROUP BY city LIMIT 5")
    assert response["exceptions"] == []
    table = response["resultTable"]
    assert table["dataSchema"] == {"columnNames": ["Operator", "Operator_Id", "Parent_Id"],
                                   "columnDataTypes": ["STRING", "INT", "INT"]}
    rows = table["rows"]
    assert rows[0] == ["BROKER_REDUCE(limit:5,merge:partials)", 1, 0]
    assert rows[1] == ["COMBINE_GROUP_BY(servers:2)", 2, 1]
    assert rows[2] == ["PLAN_START(numSegmentsForThisPlan:5)", -1, -1]
    assert rows[3][0].startswith("SERVER_GROUP_BY(table:events_REALTIME,sql:SELECT ") and "histogram(" in rows[3][0]
    assert rows[3][1:] == [3, 2]
    assert rows[4][0].startswith("SEGMENTS(committed:3,consuming:2,servers:Server_A|Server_B") and rows[4][1:] == [4, 3]
    assert response["numServersQueried"] == 0, "nothing ran on the servers"
    count = cluster.query("SET timeoutMs = 5000; EXPLAIN PLAN FOR SELECT COUNT(*) FROM events")["resultTable"]["rows"]
    assert count[0][0] == "BROKER_REDUCE(merge:arrow)" and "ROW_COUNTS" in count[3][0]
    joined = cluster.query("EXPLAIN PLAN FOR SELECT COUNT(*) FROM events a JOIN events b ON a.id = b.id")
    assert [e["errorCode"] for e in joined["exceptions"]] == [150]
    assert "single-stage" in joined["exceptions"][0]["message"]


@pytest.mark.parametrize("sql", ["SELECT HISTOGRAM(v, 0, 10, 2), MODE(v) FROM events WHERE id < 0"])
def test_no_matching_rows_give_pinots_empty_answers(cluster: Cluster, sql: str) -> None:  # noqa: F811
    response = cluster.query(sql)
    assert response["resultTable"]["rows"] == [[[0.0, 0.0], None]]


def test_explain_and_gapfill_need_read_on_the_table_and_bound_their_rows(cluster: Cluster) -> None:  # noqa: F811
    import asyncio

    from cuvee.auth.policy import Principal

    handler = cluster.broker.handler
    cluster.query("SELECT COUNT(*) FROM events")  # the broker's loop and pool exist
    assert handler._loop is not None

    def ask(sql: str, principal: Principal) -> dict[str, Any]:  # on the broker's own loop, where its pool lives
        return asyncio.run_coroutine_threadsafe(handler.handle(sql, None, principal), handler._loop).result(30)

    gapfill = ("SELECT GAPFILL(bucket, '1:MILLISECONDS:EPOCH', '0', '600000', '5:MINUTES', TIMESERIESON(city)), city "
               "FROM (SELECT DATETIMECONVERT(ts, '1:MILLISECONDS:EPOCH', '1:MILLISECONDS:EPOCH', '5:MINUTES') AS "
               "bucket, city, COUNT(*) FROM events GROUP BY 1, 2 LIMIT 100) LIMIT 10")
    stranger = Principal("stranger", tables=frozenset({"slow"}))
    for sql in ("EXPLAIN PLAN FOR SELECT COUNT(*) FROM events", gapfill):
        denied = ask(sql, stranger)
        assert [e["errorCode"] for e in denied["exceptions"]] == [180], denied["exceptions"]
        assert "resultTable" not in denied
        assert ask(sql, Principal("reader", tables=frozenset({"events"})))["exceptions"] == []
    too_many = cluster.query(gapfill.replace("LIMIT 10", "LIMIT 9000"))
    assert [e["errorCode"] for e in too_many["exceptions"]] == [700]
    assert "at most 5000" in too_many["exceptions"][0]["message"]
