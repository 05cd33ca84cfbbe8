"""The multi-stage engine on the compatibility tables (20,000 generated rows each, 4 offline segments, on two servers and on one):
joins, subqueries, CTEs, set operations, windows and FILTER clauses answer exactly what DuckDB answers over the
same rows; what does not fit the broker is refused in words that point to Spark."""

from __future__ import annotations

from typing import Any

import pytest

from cuvee.testing.compat.judge import canon_rows, run_oracle
from tests.compat.conftest import LEAF_ROWS, Compat

# Every query orders its whole answer, so rows compare exactly.
QUERIES = {
    "join a grouped subquery": "SELECT a.Carrier, COUNT(*) AS n FROM mytable a JOIN (SELECT Carrier, MAX(ArrTime) AS m "
                               "FROM mytable GROUP BY Carrier) b ON a.Carrier = b.Carrier WHERE a.ArrTime = b.m "
                               "AND a.DayOfWeek < 4 GROUP BY a.Carrier ORDER BY a.Carrier",
    "in subquery": "SELECT COUNT(*) FROM mytable WHERE DayOfWeek = 2 AND Origin IN (SELECT Dest FROM mytable "
                   "WHERE DestState = 'CA')",
    "not in subquery": "SELECT Carrier, COUNT(*) FROM mytable WHERE DayOfWeek = 5 AND Origin NOT IN "
                       "(SELECT Dest FROM mytable WHERE Dest < 'F' AND DayOfWeek = 1) GROUP BY Carrier "
                       "ORDER BY Carrier",
    "cte": "WITH c AS (SELECT Carrier, COUNT(*) AS n FROM mytable GROUP BY Carrier) "
           "SELECT Carrier, n FROM c WHERE n > 10 ORDER BY n DESC, Carrier LIMIT 5",
    "two ctes joined": "WITH o AS (SELECT Origin AS code, COUNT(*) AS deps FROM mytable GROUP BY Origin), "
                       "d AS (SELECT Dest AS code, COUNT(*) AS arrs FROM mytable GROUP BY Dest) "
                       "SELECT o.code, deps, arrs FROM o JOIN d ON o.code = d.code ORDER BY deps DESC, o.code "
                       "LIMIT 10",
    "union all": "SELECT Carrier AS k, COUNT(*) AS n FROM mytable WHERE DayOfWeek = 1 GROUP BY Carrier UNION ALL "
                 "SELECT Origin, COUNT(*) FROM mytable WHERE DayOfWeek = 2 GROUP BY Origin ORDER BY k, n",
    "union": "SELECT Origin AS airport FROM mytable WHERE OriginState = 'CA' UNION "
             "SELECT Dest FROM mytable WHERE DestState = 'CA' ORDER BY airport",
    "intersect": "SELECT Origin FROM mytable WHERE DayOfWeek = 1 INTERSECT SELECT Dest FROM mytable "
                 "WHERE DayOfWeek = 2 ORDER BY 1",
    "except": "SELECT FlightNum FROM mytable WHERE DayOfWeek = 1 EXCEPT SELECT FlightNum FROM mytable "
              "WHERE DayOfWeek = 2 ORDER BY 1",
    "window over groups": "SELECT Carrier, DayOfWeek, COUNT(*) AS n, SUM(COUNT(*)) OVER (PARTITION BY Carrier) AS "
                          "total, RANK() OVER (PARTITION BY Carrier ORDER BY COUNT(*) DESC, DayOfWeek) AS r "
                          "FROM mytable GROUP BY Carrier, DayOfWeek ORDER BY Carrier, DayOfWeek",
    "window over rows": "SELECT FlightNum, ArrTime, SUM(ArrTime) OVER (ORDER BY ArrTime, FlightNum, AirlineID, "
                        "DepTime, Distance ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s FROM mytable "
                        "WHERE Carrier = 'DL' AND DayOfWeek = 3 ORDER BY ArrTime, FlightNum, AirlineID, DepTime, "
                        "Distance, s LIMIT 20",
    "left join, unmatched": "SELECT COUNT(*) FROM (SELECT DISTINCT FlightNum FROM mytable WHERE DayOfWeek = 1) o "
                            "LEFT JOIN (SELECT DISTINCT FlightNum FROM mytable WHERE DayOfWeek = 2) d "
                            "ON o.FlightNum = d.FlightNum WHERE d.FlightNum IS NULL",
    "correlated exists": "SELECT COUNT(*) FROM mytable a WHERE a.DayOfWeek = 3 AND EXISTS "
                         "(SELECT 1 FROM mytable b WHERE b.Dest = a.Origin AND b.Cancelled = 1)",
    "scalar subquery": "SELECT Carrier, COUNT(*) FROM mytable WHERE DayOfWeek < 3 AND ArrTime > "
                       "(SELECT AVG(ArrTime) FROM mytable) GROUP BY Carrier ORDER BY Carrier",
    "filter clause": "SELECT Carrier, COUNT(*) FILTER (WHERE Cancelled = 1) AS c, COUNT(*) AS n FROM mytable "
                     "WHERE DayOfWeek < 4 GROUP BY Carrier ORDER BY Carrier",
    "join of two tables": "SELECT COUNT(*), SUM(h.CounterID) FROM (SELECT DISTINCT CounterID FROM hits) h "
                          "JOIN (SELECT DISTINCT FlightNum FROM mytable) m ON h.CounterID = m.FlightNum",
}


def ask(compat: Compat, sql: str) -> dict[str, Any]:
    return compat.cluster.http.post(f"{compat.cluster.broker_url}/query/sql", json={"sql": sql}).json()


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_multi_stage_query_answers_what_duckdb_answers_over_the_same_rows(compat: Compat, name: str) -> None:
    sql = QUERIES[name]
    answer = ask(compat, sql)
    assert not answer["exceptions"], answer["exceptions"]
    rows = answer["resultTable"]["rows"]
    expected = run_oracle(compat.oracle, sql)
    assert expected and any(any(v not in (0, None) for v in row) for row in expected), "the rows give it nothing"
    assert canon_rows(rows) == canon_rows(expected)
    assert answer["numServersQueried"] >= len(compat.cluster.servers) and answer["numDocsScanned"] > 0


def test_pinot_names_its_columns_and_the_multistage_option_is_accepted(compat: Compat) -> None:
    answer = ask(compat, "SET useMultistageEngine = true; SELECT Carrier, COUNT(*) FROM mytable m WHERE m.DayOfWeek "
                         "IN (SELECT DayOfWeek FROM mytable WHERE DayOfWeek = 1) GROUP BY Carrier ORDER BY 2 DESC "
                         "LIMIT 3")
    assert not answer["exceptions"], answer["exceptions"]
    assert answer["resultTable"]["dataSchema"]["columnNames"] == ["Carrier", "count(*)"]
    assert answer["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "LONG"]
    single = ask(compat, "SET useMultistageEngine = true; SELECT COUNT(*) FROM mytable")
    assert single["resultTable"]["rows"] == [[20_000]]


@pytest.mark.parametrize("sql, code, words", [
    ("SELECT COUNT(*) FROM mytable a JOIN nosuch b ON a.Carrier = b.Carrier", 190, "nosuch"),
    ("SELECT a.nosuch FROM mytable a JOIN mytable b ON a.Carrier = b.Carrier WHERE a.DayOfWeek = 1 "
     "AND b.DayOfWeek = 1", 710, "nosuch"),
    ("SELECT COUNT(*) FROM mytable a JOIN mytable b ON a.FlightNum = b.FlightNum", 700, "Spark"),
])
def test_what_cannot_run_is_refused_in_words(compat: Compat, sql: str, code: int, words: str) -> None:
    answer = ask(compat, sql)
    assert [e["errorCode"] for e in answer["exceptions"]] == [code], answer["exceptions"]
    assert words in answer["exceptions"][0]["message"]
    assert "resultTable" not in answer
    if code == 700:
        assert str(LEAF_ROWS) in answer["exceptions"][0]["message"]


def test_a_broker_stage_past_the_querys_timeout_is_stopped_and_answered_400(compat: Compat) -> None:
    sql = ("SELECT COUNT(*) FROM mytable a, mytable b, mytable c WHERE a.DayOfWeek = 1 AND b.DayOfWeek = 2 "
           "AND c.DayOfWeek = 6 AND a.ArrTime + b.ArrTime + c.ArrTime = -1 OPTION(timeoutMs=1500)")
    answer = ask(compat, sql)  # ~17 billion combinations: minutes if it were not stopped
    assert [e["errorCode"] for e in answer["exceptions"]] == [400], answer["exceptions"]
    assert "timeout" in answer["exceptions"][0]["message"] and answer["timeUsedMs"] < 10_000
    assert ask(compat, "SELECT COUNT(*) FROM mytable")["resultTable"]["rows"] == [[20_000]]  # the broker goes on


def test_a_leaf_that_fails_fails_the_query_and_too_many_leaves_are_refused(compat: Compat) -> None:
    """A leaf short of rows would make NOT IN, EXCEPT and anti-joins answer wrong: its error is the answer (here
    a conversion that fails on the rows, named with its segment). 65 leaves are over multistage_max_leaves."""
    failed = ask(compat, "SELECT COUNT(*) FROM (SELECT CAST(Carrier AS INT) AS c FROM mytable WHERE DayOfWeek = 1) a "
                         "JOIN (SELECT DISTINCT DayOfWeek AS d FROM mytable) b ON a.c = b.d")
    assert "resultTable" not in failed and failed["exceptions"]
    assert {e["errorCode"] for e in failed["exceptions"]} == {200}
    assert "the query failed on segment mytable_" in failed["exceptions"][0]["message"]
    union = " UNION ALL ".join(f"SELECT COUNT(*) FROM mytable WHERE DayOfWeek = {i % 7 + 1}" for i in range(65))
    refused = ask(compat, f"SELECT SUM(1) FROM ({union}) u")
    assert [e["errorCode"] for e in refused["exceptions"]] == [700]
    assert "multistage_max_leaves" in refused["exceptions"][0]["message"]
