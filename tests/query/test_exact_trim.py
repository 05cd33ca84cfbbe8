"""The second round that makes a trimmed GROUP BY … ORDER BY <aggregation> exact (``cuvee.query.exact_trim``):
random groups spread over servers that trim hard, every answer compared with DuckDB's over all the rows, ties
judged as the compatibility judge does."""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.query import merge_partials, plan_sql, run_server_step
from cuvee.query.exact_trim import Decision, decide
from cuvee.query.execute import sandboxed_cursor, wanted_groups
from cuvee.query.group_trim import RankBound
from cuvee.query.wanted_keys import MAX_WANTED_BYTES, WantedKeys, encode
from cuvee.server.query_routes import DEFAULT_MAX_REQUEST_BYTES
from cuvee.testing.compat.judge import canon_rows
from tests.query.helpers import SCHEMA, resolve

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (query, the output columns its ORDER BY sorts by)
QUERIES = [
    ("SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC LIMIT 3 OFFSET 2", (1,)),
    ("SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC, city LIMIT 4", (1, 0)),
    ("SELECT city, SUM(v) AS s, COUNT(*) FROM events GROUP BY city ORDER BY s DESC LIMIT 3", (1,)),
    ("SELECT city, MAX(v) AS m, COUNT(*) FROM events GROUP BY city ORDER BY m DESC LIMIT 3", (1,)),
    ("SELECT city, MIN(v) AS m, SUM(d) FROM events GROUP BY city ORDER BY m LIMIT 2 OFFSET 1", (1,)),
    ("SELECT city, MAX(v) AS m, COUNT(*) FROM events GROUP BY city ORDER BY m, city LIMIT 3", (1, 0)),
    ("SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c LIMIT 3", (1,)),
    ("SELECT city, SUM(d) AS s FROM events GROUP BY city ORDER BY s DESC LIMIT 3", (1,)),
    ("SELECT city, AVG(v) AS a, COUNT(*) FROM events GROUP BY city ORDER BY a DESC LIMIT 3", (1,)),
]


@st.composite
def spread(draw: st.DrawFn) -> list[pa.Table]:
    """Rows of up to 40 groups over 2-4 servers, each group's rows on a random subset of them: group sizes skewed
    so that rankings differ from server to server."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    servers = draw(st.integers(2, 4))
    parts: list[list[dict[str, Any]]] = [[] for _ in range(servers)]
    for group in range(draw(st.integers(12, 40))):
        for server in range(servers):
            if rng.random() < 0.6:
                for _ in range(rng.choice([1, 1, 2, 3, 5, 8])):
                    parts[server].append({"id": len(parts[server]), "city": f"c{group:02d}",
                                          "v": rng.randint(-5, 20), "d": rng.randint(0, 40) / 4, "ts": None})
    return [pa.Table.from_pylist(rows, schema=SCHEMA) for rows in parts]


def _judged(got: list[tuple[Any, ...]], tables: list[pa.Table], sql: str, keys: tuple[int, ...]) -> None:
    """As ``cuvee.testing.compat.judge.compare``: the rows are rows of the full answer, and their sort keys are the
    oracle's, in order."""
    con = duckdb.connect()
    con.register("events", pa.concat_tables(tables))
    oracle = sql.replace("SUM(v)", "CAST(SUM(v) AS DOUBLE)").replace("SUM(d)", "CAST(SUM(d) AS DOUBLE)") \
        .replace("AVG(v)", "CAST(AVG(v) AS DOUBLE)")
    limited = con.sql(oracle).fetchall()
    full = con.sql(oracle.rsplit(" LIMIT ", 1)[0]).fetchall()
    mine, want = canon_rows(got), canon_rows(limited)
    assert len(mine) == len(want), (mine, want)
    assert not Counter(mine) - Counter(canon_rows(full)), (mine, want)
    assert [tuple(r[k] for k in keys) for r in mine] == [tuple(r[k] for k in keys) for r in want], (mine, want)


def _answer(sql: str, tables: list[pa.Table]) -> tuple[list[tuple[Any, ...]], Decision, bool]:
    """The broker's answer after the first round (servers trimming to 5 × LIMIT + OFFSET) and the second round
    ``decide`` asks for; whether some server cut."""
    plan = plan_sql(sql, resolve)
    assert plan.group_trim is not None and plan.limit is not None
    rows = plan.limit + plan.offset
    first = [run_server_step(plan, [t], min_trim_size=1) for t in tables]
    whole = [run_server_step(plan, [t], min_trim_size=0) for t in tables]
    cut = [f.num_rows < w.num_rows for f, w in zip(first, whole)]
    decision = decide(plan.group_trim.bound, rows, first, cut)
    partials = [whole[i] if i in decision.untrimmed else p for i, p in enumerate(first)]
    partials += [run_server_step(plan, [tables[i]], wanted=WantedKeys.from_json(orjson.loads(orjson.dumps(
        keys.to_json())))) for i, keys in decision.wanted.items()]  # as they travel
    merged = merge_partials(plan, partials, SCHEMA)
    return [tuple(r.values()) for r in merged.to_pylist()], decision, any(cut)


@pytest.mark.parametrize(("sql", "keys"), QUERIES)
@SETTINGS
@given(tables=spread())
def test_trimmed_answers_are_exact_after_the_second_round(sql: str, keys: tuple[int, ...],
                                                          tables: list[pa.Table]) -> None:
    got, _, _ = _answer(sql, tables)
    _judged(got, tables, sql, keys)


def test_a_trim_that_cuts_nothing_needed_asks_nothing() -> None:
    """Every server holds the same groups with the same skew: the top groups are whole on every server, so the
    first round is exact and no server is asked again."""
    rows = [{"id": i, "city": f"c{g:02d}", "v": 1, "d": 0.0, "ts": None}
            for i, g in enumerate(g for g in range(30) for _ in range(60 - 2 * g))]
    tables = [pa.Table.from_pylist(rows, schema=SCHEMA)] * 3
    sql = "SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC LIMIT 2"
    got, decision, cut = _answer(sql, tables)
    assert cut and decision.complete
    assert got == [("c00", 180), ("c01", 174)]


def test_a_group_short_on_one_server_is_completed() -> None:
    """Server 0 ranks g1 first; server 1 holds g1 too but cuts it (its own top is g2, g3...): the first round alone
    answers g1 short, the second asks server 1 for g1 only."""
    def table(counts: dict[str, int]) -> pa.Table:
        rows = [{"id": 0, "city": city, "v": 1, "d": 0.0, "ts": None} for city, n in counts.items() for _ in range(n)]
        return pa.Table.from_pylist(rows, schema=SCHEMA)

    zero = table({"g1": 50, **{f"h{i}": 1 for i in range(10)}})
    one = table({"g1": 30, **{f"k{i}": 40 for i in range(10)}})
    sql = "SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC LIMIT 1"
    got, decision, cut = _answer(sql, [zero, one])
    assert cut and list(decision.wanted) == [1] and decision.wanted[1].columns == {"__g0": ("g1",)}
    assert got == [("g1", 80)]


def test_what_cannot_be_bounded_is_asked_untrimmed() -> None:
    """AVG ranks nothing the broker can bound; COUNT ASC leaves any cut group possible: untrimmed both."""
    tables = [pa.Table.from_pylist([{"id": i, "city": f"c{i % 17}", "v": i % 5, "d": 0.0, "ts": None}
                                    for i in range(s, 200 + s)], schema=SCHEMA) for s in range(2)]
    for sql in ("SELECT city, AVG(v) FROM events GROUP BY city ORDER BY 2 DESC LIMIT 1",
                "SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY 2 LIMIT 1"):
        _, decision, cut = _answer(sql, tables)
        assert cut and decision.untrimmed == (0, 1)


def test_wanted_groups_match_null_keys_and_nothing_else() -> None:
    con = sandboxed_cursor(0)
    try:
        groups = pa.table({"__g0": ["a", None, "b", "c"], "__g1": [1, 1, None, 2], "__p0": [10, 20, 30, 40]})
        wanted = encode(pa.table({"__g0": [None, "b", "c"], "__g1": [1, None, 3]}))
        got = wanted_groups(con, groups, wanted)
    finally:
        con.close()
    assert sorted(got.column("__p0").to_pylist()) == [20, 30]


def _table(groups: dict[str, list[float]]) -> pa.Table:
    rows = [{"id": 0, "city": city, "v": 1, "d": d, "ts": None} for city, ds in groups.items() for d in ds]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


@pytest.mark.parametrize(("odd", "sql"), [
    ([float("nan")], "SELECT city, MAX(d) AS m, COUNT(*) AS c FROM events GROUP BY city ORDER BY m DESC LIMIT 2"),
    ([float("inf"), float("-inf")],
     "SELECT city, SUM(d) AS m, COUNT(*) AS c FROM events GROUP BY city ORDER BY m DESC LIMIT 2"),
])
def test_nan_and_infinite_rankings_are_asked_untrimmed(odd: list[float], sql: str) -> None:
    """A NaN ranking value (or inf + -inf) makes every bound NaN, which compares false to everything: the bounds
    would prove the first round exact while G is short by its three rows on server 1 (review H1)."""
    zero = _table({"G": [100.0]})
    one = _table({"n": odd, **{f"h{i}": [50.0] for i in range(10)}, "G": [1.0] * 3})
    got, decision, cut = _answer(sql, [zero, one])
    assert cut and decision.untrimmed == (1,)
    assert ("G", 100.0 if "MAX" in sql else 103.0, 4) in got


def test_long_wanted_keys_are_asked_untrimmed_not_sent_past_the_request_limit() -> None:
    """Candidates whose keys add up past ``MAX_WANTED_BYTES`` would make a request the server refuses (413, review
    M2): that server is asked untrimmed instead."""
    n, kept, long = 3500, 2000, 12_000
    keys = [f"https://example.com/{i:06d}/" + "x" * long for i in range(n)]
    zero = pa.table({"__g0": keys[:kept], "__p0": pa.array([n - i for i in range(kept)], pa.float64())})
    one = pa.table({"__g0": keys[n - kept:], "__p0": pa.array([i + 1 for i in range(n - kept, n)], pa.float64())})
    decision = decide(RankBound("__p0", "sum", True, False, True), 400, [zero, one], [True, True])
    assert set(decision.untrimmed) | set(decision.wanted) == {0, 1} and decision.untrimmed
    assert all(keys.encoded_bytes() <= MAX_WANTED_BYTES for keys in decision.wanted.values())
    assert MAX_WANTED_BYTES <= DEFAULT_MAX_REQUEST_BYTES // 2


def test_a_timestamps_max_is_bounded_not_asked_untrimmed() -> None:
    """MAX(ts) ranks by the instants' counts of units: a second round of wanted groups, not every group again
    (review L2), and the answer DuckDB's."""
    rng = random.Random(0)
    start = dt.datetime(2026, 1, 1)
    tables = [pa.Table.from_pylist([{"id": i, "city": f"c{rng.randint(0, 80)}", "v": 1, "d": 0.0,
                                     "ts": start + dt.timedelta(minutes=rng.randint(0, 10**5))} for i in range(400)],
                                   schema=SCHEMA) for _ in range(3)]
    sql = "SELECT city, MAX(ts) AS m, COUNT(*) FROM events GROUP BY city ORDER BY m DESC LIMIT 3"
    got, decision, cut = _answer(sql, tables)
    assert cut and decision.untrimmed == ()
    _judged(got, tables, sql, (1,))
