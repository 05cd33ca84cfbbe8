"""Cuvee's own compatibility checks that a hand-written DuckDB oracle cannot express, on the suite's generated
tables (on two servers and on one): FUNNELMAXSTEP and FUNNELMATCHSTEP against a Python model of the windowed funnel
over the same rows, and EXPLAIN PLAN FOR describing where the query would run. (The aggregations a DuckDB query can
judge are in ``sets/cuvee_pinot_aggregations.jsonl``, run by ``test_compat.py``.)"""

from __future__ import annotations

from typing import Any

from tests.compat.conftest import Compat

STEPS = ("ATL", "JFK", "SEA")
WINDOW_DAYS = 5


def ask(compat: Compat, sql: str) -> dict[str, Any]:
    return compat.cluster.http.post(f"{compat.cluster.broker_url}/query/sql", json={"sql": sql}).json()


def _max_step(events: list[tuple[int, int]], steps: int, window: int) -> int:
    """The windowed funnel's definition: over every window opened by a first-step event, the most steps matched in
    order by the events inside it (each event, in time order, advancing the match when it is the next step)."""
    events = sorted(events)
    best = 0
    for i, (start, step) in enumerate(events):
        if step != 0:
            continue
        reached = 0
        for time, current in events[i:]:
            if time >= start + window:
                break
            if current == reached:
                reached += 1
                if reached == steps:
                    break
        best = max(best, reached)
    return best


def test_funnel_max_and_match_steps_answer_the_model(compat: Compat) -> None:
    steps = ", ".join(f"Origin = '{code}'" for code in STEPS)
    sql = (f"SELECT TailNum, FUNNELMAXSTEP(DaysSinceEpoch, {WINDOW_DAYS}, 3, {steps}), "
           f"FUNNEL_MATCH_STEP(DaysSinceEpoch, {WINDOW_DAYS}, 3, {steps}) FROM mytable WHERE Carrier IN ('AA', 'DL') "
           "GROUP BY TailNum ORDER BY TailNum LIMIT 100")
    answer = ask(compat, sql)
    assert not answer["exceptions"], answer["exceptions"]
    rows = compat.oracle.execute("SELECT TailNum, DaysSinceEpoch, Origin FROM mytable WHERE Carrier IN ('AA', 'DL')"
                                 ).fetchall()
    events: dict[str, list[tuple[int, int]]] = {}
    for tail, day, origin in rows:
        events.setdefault(tail, [])
        if origin in STEPS:
            events[tail].append((day, STEPS.index(origin)))
    expected = [[tail, _max_step(ev, 3, WINDOW_DAYS), [1] * _max_step(ev, 3, WINDOW_DAYS) +
                 [0] * (3 - _max_step(ev, 3, WINDOW_DAYS))] for tail, ev in sorted(events.items())]
    assert answer["resultTable"]["rows"] == expected
    assert {row[1] for row in expected} >= {2, 3}, "the generated rows reach deep into the funnel"
    assert answer["resultTable"]["dataSchema"]["columnDataTypes"] == ["STRING", "INT", "INT_ARRAY"]


def test_explain_plan_for_says_where_the_query_runs(compat: Compat) -> None:
    answer = ask(compat, "EXPLAIN PLAN FOR SELECT Carrier, HISTOGRAM(Distance, 0, 3000, 6) FROM mytable "
                         "GROUP BY Carrier ORDER BY Carrier")
    assert not answer["exceptions"], answer["exceptions"]
    rows = answer["resultTable"]["rows"]
    servers = len(compat.cluster.servers)
    one_step = servers == 1  # one server answers the whole query: the broker merges nothing
    assert rows[0] == [f"BROKER_REDUCE(limit:10,merge:{'none' if one_step else 'partials'})", 1, 0]
    assert rows[1] == [f"COMBINE_GROUP_BY(servers:{servers})", 2, 1]
    assert rows[2] == ["PLAN_START(numSegmentsForThisPlan:4)", -1, -1]
    assert rows[3][0].startswith("SERVER_GROUP_BY(table:mytable_OFFLINE,sql:SELECT ") and rows[3][1:] == [3, 2]
    assert rows[4][0].startswith("SEGMENTS(committed:4,consuming:0,servers:") and rows[4][1:] == [4, 3]
