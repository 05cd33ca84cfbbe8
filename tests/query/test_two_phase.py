"""Two-phase plans answer exactly what DuckDB answers over all rows, however the rows are split over servers; an
aggregation answered in one step by a single server (``QueryPlan.whole_sql``) answers what the merge does, with the
same types."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.query import plan_sql
from tests.query.helpers import (
    BASE_TS,
    distributed,
    event_tables,
    one_step,
    partitions,
    reference,
    resolve,
    rows,
    sort_key,
)

MID_MS = int(BASE_TS.replace(tzinfo=dt.timezone.utc).timestamp() * 1000) + 300 * 60_000
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (Pinot SQL, DuckDB SQL giving the same answer over all rows). ORDER BY cases order totally, so order is compared.
UNORDERED = [
    ("SELECT COUNT(*) FROM events", None),
    ("SELECT COUNT(v), SUM(v), MIN(v), MAX(v), AVG(v) FROM events", None),
    ("SELECT COUNT(*), SUM(d), AVG(d), MIN(d), MAX(d) FROM events WHERE v > 0 AND city <> 'bern'", None),
    ("SELECT DISTINCTCOUNT(city), COUNT(DISTINCT v), DISTINCTCOUNTHLL(v), DISTINCTCOUNTTHETASKETCH(d) FROM events",
     "SELECT COUNT(DISTINCT city), COUNT(DISTINCT v), COUNT(DISTINCT v), COUNT(DISTINCT d) FROM events"),
    ("SELECT DISTINCTSUM(v), DISTINCTAVG(v), MINMAXRANGE(d) FROM events",
     "SELECT SUM(DISTINCT v), AVG(DISTINCT v), MAX(d) - MIN(d) FROM events"),
    ("SELECT city, SUM(DISTINCT v), AVG(DISTINCT d), MIN(DISTINCT v), MAX(DISTINCT d) FROM events GROUP BY city "
     "LIMIT 100", None),
    ("SELECT city, COUNT(*), SUM(v), AVG(d) FROM events GROUP BY city LIMIT 100", None),
    ("SELECT city, v % 3 AS m, MAX(d), COUNT(v) FROM events GROUP BY city, m LIMIT 100",
     "SELECT city, v % 3 AS m, MAX(d), COUNT(v) FROM events GROUP BY city, v % 3"),
    ("SELECT city, DISTINCTCOUNT(v), COUNT(DISTINCT d) FROM events GROUP BY 1 LIMIT 100",
     "SELECT city, COUNT(DISTINCT v), COUNT(DISTINCT d) FROM events GROUP BY city"),
    ("SELECT COUNT(*), AVG(v), SUM(d) FROM events WHERE city = 'nowhere'", None),
    ("SELECT city, COUNT(*) FROM events WHERE v IS NULL OR d IS NOT NULL GROUP BY city LIMIT 100", None),
    ("SELECT COUNT(*) FROM events WHERE city IN ('berlin', 'cairo') AND NOT (v BETWEEN -3 AND 3)", None),
    ("SELECT COUNT(*), SUM(v) FROM events WHERE city LIKE 'b%' OR city NOT LIKE '%o'", None),
    ("SELECT city, SUM(v) + COUNT(*) * 2 AS mix FROM events GROUP BY city LIMIT 100",
     "SELECT city, SUM(v) + COUNT(*) * 2 FROM events GROUP BY city"),
    ("SELECT COUNT(*) FROM events WHERE ts >= TIMESTAMP '2026-11-21 20:00:00'", None),
    (f"SELECT COUNT(*) FROM events WHERE ts > {MID_MS} AND ts BETWEEN 0 AND {MID_MS * 2}",
     f"SELECT COUNT(*) FROM events WHERE epoch_ms(ts) > {MID_MS}"),
    ("SELECT DISTINCT city FROM events LIMIT 100", None),
    ("SELECT city, AVG(v) AS a FROM events GROUP BY city HAVING a > 0 OR COUNT(*) > 5 LIMIT 100",
     "SELECT city, AVG(v) AS a FROM events GROUP BY city HAVING AVG(v) > 0 OR COUNT(*) > 5"),
    ("SELECT SUM(v) FROM events HAVING COUNT(*) > 10", None),
    ("SELECT 'x' AS k FROM events HAVING 1 = 1", None),
]
ORDERED = [
    ("SELECT city, COUNT(*) AS cnt FROM events GROUP BY city HAVING COUNT(*) > 3 ORDER BY cnt DESC, city LIMIT 100",
     None),
    ("SELECT city, SUM(v) FROM events GROUP BY city ORDER BY SUM(v) DESC, city LIMIT 2 OFFSET 1", None),
    ("SELECT v, COUNT(*) FROM events WHERE v BETWEEN -10 AND 10 GROUP BY v ORDER BY 2 DESC, 1 LIMIT 5", None),
    ("SELECT UPPER(city) AS u, COUNT(*), MIN(ts) FROM events GROUP BY UPPER(city) ORDER BY u LIMIT 100", None),
    ("SELECT city, MIN(v), MAX(v), MINMAXRANGE(v) FROM events GROUP BY city ORDER BY city",
     "SELECT city, MIN(v), MAX(v), MAX(v) - MIN(v) FROM events GROUP BY city ORDER BY city LIMIT 10"),
    ("SELECT city, SUM(v) / COUNT(*) AS ratio FROM events GROUP BY city ORDER BY ratio DESC, city LIMIT 100",
     "SELECT city, CAST(SUM(v) AS DOUBLE) / COUNT(*) AS ratio FROM events GROUP BY city ORDER BY ratio DESC, city"),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY COUNT(*) * -1, AVG(d), city LIMIT 100", None),
    ("SELECT DISTINCT city, v FROM events ORDER BY v DESC, city LIMIT 7", None),
    ("SELECT id, city, v FROM events WHERE city LIKE 'b%' OR v IS NULL ORDER BY v DESC, id LIMIT 7 OFFSET 3", None),
    ("SELECT id, d * 2 AS dd FROM events WHERE city IN ('amsterdam', 'cairo') AND NOT (v < 0) ORDER BY dd, id "
     "LIMIT 20", None),
    ("SELECT id FROM events WHERE city IS NULL ORDER BY id DESC",
     "SELECT id FROM events WHERE city IS NULL ORDER BY id DESC LIMIT 10"),
    ("SELECT id, v FROM events ORDER BY 2, id DESC LIMIT 5 OFFSET 2", None),
    ("SELECT id, v * -1 AS v FROM events ORDER BY v, id LIMIT 6", None),
    ("SELECT city, SUM(d) AS d FROM events GROUP BY city ORDER BY d DESC NULLS FIRST, city LIMIT 100", None),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY city NULLS FIRST LIMIT 3 OFFSET 1", None),
    ("SELECT id, city FROM events ORDER BY v * -1 DESC, ts, id LIMIT 9", None),
    ("SELECT * FROM events ORDER BY ts DESC, id LIMIT 4",
     "SELECT city, d, id, ts, v FROM events ORDER BY ts DESC, id LIMIT 4"),
    ("SELECT id, toEpochSeconds(v * 1000) AS s, toEpochMinutes(ts) FROM events ORDER BY id LIMIT 5",
     "SELECT id, (v * 1000) // 1000 AS s, epoch_ms(ts) // 60000 FROM events ORDER BY id LIMIT 5"),
    ("SELECT id, plus(v, 1), TIMES(d, 2), fromEpochSeconds(v) FROM events ORDER BY id DESC LIMIT 5",
     "SELECT id, v + 1, d * 2, v * 1000 FROM events ORDER BY id DESC LIMIT 5"),
]

# Pinot's aggregations that carry their own merge steps (each checked against a model in test_pinot_aggregates.py):
# here, with WHERE, HAVING and ORDER BY on them, the one-step answer must equal the merge
PINOT_AGGREGATIONS = [
    "SELECT city, LASTWITHTIME(v, ts, 'INT') AS l, FIRSTWITHTIME(d, ts, 'DOUBLE'), MODE(v, 'AVG') FROM events "
    "WHERE d IS NOT NULL GROUP BY city HAVING MODE(v) > -20 ORDER BY l DESC NULLS LAST, city LIMIT 100",
    "SELECT city, HISTOGRAM(v, -20, 20, 4), EXPR_MAX(id, v, d), EXPR_MIN(city, d) FROM events GROUP BY city "
    "ORDER BY EXPR_MAX(id, v, d), city LIMIT 100",
    "SELECT MODE(d, 'MAX'), HISTOGRAM(d, ARRAY[-100, 0, 100]), FUNNEL_COUNT(STEPS(v > 0, d > 0), CORRELATE_BY(city)) "
    "FROM events WHERE v IS NOT NULL",
    "SELECT city, FUNNELMAXSTEP(ts, 3600000, 2, v > 0, v > 5), FUNNELCOMPLETECOUNT(ts, 3600000, 2, v > 0, v > 5) "
    "FROM events GROUP BY city ORDER BY 1 LIMIT 100",
]


@pytest.mark.parametrize(("sql", "ref_sql"), UNORDERED)
@SETTINGS
@given(data=st.data())
def test_unordered_queries_match_duckdb(sql: str, ref_sql: str | None, data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    got = rows(distributed(sql, parts))
    want = rows(reference(ref_sql or sql, table))
    assert sorted(got, key=sort_key) == sorted(want, key=sort_key)


@pytest.mark.parametrize(("sql", "ref_sql"), ORDERED)
@SETTINGS
@given(data=st.data())
def test_ordered_queries_match_duckdb(sql: str, ref_sql: str | None, data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    assert rows(distributed(sql, parts)) == rows(reference(ref_sql or sql, table))


@pytest.mark.parametrize(("sql", "ordered"), [(sql, False) for sql, _ in UNORDERED] + [(sql, True) for sql, _ in ORDERED]
                         + [(sql, "ORDER BY" in sql) for sql in PINOT_AGGREGATIONS])
@SETTINGS
@given(data=st.data())
def test_one_server_answers_an_aggregation_whole_as_the_merge_does(sql: str, ordered: bool,
                                                                    data: st.DataObject) -> None:
    plan = plan_sql(sql, resolve)
    if plan.whole_sql is None:  # selections, and one-row merges done in Arrow
        assert plan.kind.value == "selection" or plan.simple_merge is not None or sql == "SELECT COUNT(*) FROM events"
        return
    table = data.draw(event_tables())
    merged = distributed(sql, [table])
    whole, docs = one_step(plan, table)
    assert whole.schema == merged.schema
    if ordered:
        assert rows(whole) == rows(merged)
    else:
        assert sorted(rows(whole), key=sort_key) == sorted(rows(merged), key=sort_key)
    if plan.docs_column is None:
        assert docs is None
    elif whole.num_rows:  # the rows that passed WHERE, whatever HAVING and LIMIT left of the groups
        where = sql[sql.index(" WHERE "):].split(" GROUP BY")[0].split(" ORDER BY")[0].split(" LIMIT")[0]
        assert docs == reference(f"SELECT COUNT(*) FROM events{where}", table).column(0)[0].as_py()


def _pinot_percentile(values: list[float], pct: float) -> float | None:
    """Pinot's exact rule, written independently: sorted[floor(n * p / 100)], the last value at 100."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(math.floor(len(ordered) * pct / 100), len(ordered) - 1)]


@SETTINGS
@given(data=st.data())
def test_percentiles_follow_pinots_rule(data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    sql = ("SELECT city, PERCENTILE(v, 50), PERCENTILE90(d), PERCENTILEEST(v, 100), PERCENTILETDIGEST(d, 0), "
           "percentile(v, 99.9) FROM events GROUP BY city LIMIT 100")
    got = {row[0]: row[1:] for row in rows(distributed(sql, parts))}
    assert {row[0]: row[1:] for row in rows(one_step(plan_sql(sql, resolve), table)[0])} == got  # one server
    expected = {}
    for city in set(table.column("city").to_pylist()):
        mine = [r for r in table.to_pylist() if r["city"] == city]
        vs = [float(r["v"]) for r in mine if r["v"] is not None]
        ds = [r["d"] for r in mine if r["d"] is not None]
        expected[city] = (_pinot_percentile(vs, 50), _pinot_percentile(ds, 90), _pinot_percentile(vs, 100),
                          _pinot_percentile(ds, 0), _pinot_percentile(vs, 99.9))
    assert got == expected


@SETTINGS
@given(data=st.data())
def test_selection_without_order_returns_some_matching_rows(data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    limit = data.draw(st.integers(0, 15))
    got = rows(distributed(f"SELECT id, v FROM events WHERE v > 0 LIMIT {limit}", parts))
    matching = rows(reference("SELECT id, v FROM events WHERE v > 0", table))
    assert len(got) == min(limit, len(matching))
    assert set(got) <= set(matching)
    assert len(set(got)) == len(got)


@SETTINGS
@given(data=st.data())
def test_default_limit_is_ten_for_group_by(data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    got = rows(distributed("SELECT id, COUNT(*) FROM events GROUP BY id ORDER BY id", parts))
    assert got == [(float(i), 1.0) for i in range(min(10, table.num_rows))]
