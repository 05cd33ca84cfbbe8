"""Pinot's bounds on a server's groups (numGroupsLimit, the server trim): the pure planning and sizing, and answers
over rows split across servers whose groups are trimmed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.query import QueryError, QueryErrorCode, TableInfo, merge_partials, plan_sql, run_server_step
from cuvee.query.group_trim import GroupOptions, GroupTrim, cut, group_options, trim_size
from cuvee.query.parse import split_query
from tests.query.helpers import SCHEMA, event_tables, partitions, reference, resolve, rows

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRIMMABLE = GroupTrim("SELECT * FROM cuvee_groups ORDER BY __g0", rows=10, exact=False)
UNTRIMMABLE = GroupTrim("SELECT * FROM cuvee_groups ORDER BY __g0", rows=None, exact=False)


def test_trim_size_is_five_times_the_rows_or_the_minimum() -> None:
    assert trim_size(10, 5_000) == 5_000
    assert trim_size(2_000, 5_000) == 10_000
    assert trim_size(0, 1) == 1


@pytest.mark.parametrize(("groups", "trim", "limit", "min_trim", "expected"), [
    (4_000, TRIMMABLE, 100_000, 5_000, (4_000, False, False)),       # fewer groups than the trim size: all sent
    (8_000, TRIMMABLE, 100_000, 5_000, (5_000, False, True)),        # trimmed to max(10 × 5, 5,000)
    (8_000, TRIMMABLE, 100_000, 20, (50, False, True)),              # 5 × LIMIT when the minimum is smaller
    (8_000, TRIMMABLE, 100_000, 0, (8_000, False, False)),           # a minimum <= 0 turns the trim off
    (8_000, TRIMMABLE, 100_000, -1, (8_000, False, False)),
    (8_000, UNTRIMMABLE, 100_000, 5_000, (8_000, False, False)),     # not trimmable: every group
    (8_000, UNTRIMMABLE, 3_000, 5_000, (3_000, True, False)),        # the groups limit cuts, and says so
    (8_000, TRIMMABLE, 3_000, 5_000, (3_000, True, False)),          # the limit is below the trim size
    (8_000, TRIMMABLE, 7_000, 5_000, (5_000, False, True)),          # the trim keeps fewer: the limit dropped none
    (8_000, TRIMMABLE, 5_000, 5_000, (5_000, True, False)),          # the limit, at the trim size, dropped them
    (3_000, UNTRIMMABLE, 3_000, 5_000, (3_000, False, False)),       # exactly the limit is not beyond it
])
def test_cut_keeps_at_most_the_limit_and_the_trim_size(groups: int, trim: GroupTrim, limit: int, min_trim: int,
                                                       expected: tuple[int, bool, bool]) -> None:
    decided = cut(groups, trim, limit, min_trim)
    assert (decided.keep, decided.limit_reached, decided.trimmed) == expected


def _trim(sql: str) -> GroupTrim:
    plan = plan_sql(sql, resolve)
    assert plan.group_trim is not None
    return plan.group_trim


@pytest.mark.parametrize(("sql", "rows_", "exact"), [
    ("SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC LIMIT 5", 5, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY COUNT(*) DESC LIMIT 5 OFFSET 20", 25, False),
    ("SELECT city, SUM(d) FROM events GROUP BY city ORDER BY city DESC", 10, True),  # Pinot's default LIMIT 10
    ("SELECT city, v, MAX(d) FROM events GROUP BY city, v ORDER BY v + 1, city LIMIT 3", 3, True),
    ("SELECT DISTINCT city, v FROM events ORDER BY city LIMIT 4", 4, True),
    ("SELECT city, AVG(d) FROM events GROUP BY city ORDER BY AVG(d), city LIMIT 3", 3, False),
    ("SELECT city, MIN(v), MINMAXRANGE(d) FROM events GROUP BY city ORDER BY MINMAXRANGE(d) LIMIT 3", 3, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY SUM(v) * 2 - COUNT(*) LIMIT 3", 3, False),
    ("SELECT city, DISTINCTCOUNT(v) AS n FROM events GROUP BY city ORDER BY n DESC LIMIT 5", 5, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY COUNT(*) + DISTINCTCOUNT(v) LIMIT 5", 5, False),
    ("SELECT city, DISTINCTSUM(v), DISTINCTAVG(d) FROM events GROUP BY city ORDER BY 2, 3 LIMIT 5", 5, False),
    # no ORDER BY: ranked by every key, so exactly (any groups may answer, but whole ones)
    ("SELECT city, COUNT(*) FROM events GROUP BY city LIMIT 5", 5, True),
    ("SELECT DISTINCT city, v FROM events LIMIT 4 OFFSET 1", 5, True),
    ("SELECT city, COUNT(*) FROM events GROUP BY city LIMIT 100001", None, False),  # a leaf's: every group
    # not trimmed: an aggregation partials cannot rank, or a HAVING (keys or not, ORDER BY or not)
    ("SELECT city, COUNT(*) FROM events GROUP BY city HAVING COUNT(*) > 2 LIMIT 5", None, False),
    ("SELECT city, PERCENTILE90(d) FROM events GROUP BY city ORDER BY 2 LIMIT 5", None, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY COUNT(*) + PERCENTILE90(d) LIMIT 5", None, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city HAVING COUNT(*) > 2 ORDER BY city LIMIT 5", None, False),
    ("SELECT city, COUNT(*) FROM events GROUP BY city HAVING city <> 'bern' ORDER BY city LIMIT 5", None, False),
])
def test_which_queries_are_trimmed_and_which_exactly(sql: str, rows_: int | None, exact: bool) -> None:
    trim = _trim(sql)
    assert (trim.rows, trim.exact) == (rows_, exact)


def test_the_ranking_evaluates_aggregations_on_partials_and_breaks_ties_by_keys() -> None:
    avg = _trim("SELECT city, v, AVG(d) AS a FROM events GROUP BY city, v ORDER BY a DESC LIMIT 3")
    assert "CAST(__p0 AS DOUBLE) / NULLIF(__p1, 0)" in avg.order_sql  # AVG = partial sum / partial count
    assert avg.order_sql.endswith("DESC, __g0, __g1")
    count = _trim("SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY COUNT(*) LIMIT 3")
    assert "COALESCE(__p0, 0)" in count.order_sql
    keyed = _trim("SELECT city, v, COUNT(*) FROM events GROUP BY city, v ORDER BY city DESC LIMIT 3")
    assert keyed.order_sql == "SELECT * FROM cuvee_groups ORDER BY __g0 DESC, __g1"
    # a distinct count ranks by the server's own count (the length of its distinct list)
    assert "ORDER BY (COALESCE(LENGTH(__p0), 0)) DESC, __g0" in \
        _trim("SELECT city, DISTINCTCOUNT(v) FROM events GROUP BY city ORDER BY 2 DESC LIMIT 3").order_sql
    # a percentile cannot rank: the numGroupsLimit cut takes any groups, unsorted (as without ORDER BY)
    assert _trim("SELECT city, PERCENTILE50(d) FROM events GROUP BY city ORDER BY 2 LIMIT 3").order_sql == \
        "SELECT * FROM cuvee_groups"
    assert _trim("SELECT city, v, COUNT(*) FROM events GROUP BY city, v LIMIT 3").order_sql == \
        "SELECT * FROM cuvee_groups ORDER BY __g0, __g1"  # no ORDER BY: by every key


def test_an_exact_trim_gives_the_brokers_order_the_same_tie_breakers() -> None:
    keyed = plan_sql("SELECT city, v, COUNT(*) FROM events GROUP BY city, v ORDER BY city LIMIT 3", resolve)
    assert keyed.final_sql.endswith("ORDER BY __g0, __g1 LIMIT 3")
    counted = plan_sql("SELECT city, v, COUNT(*) AS c FROM events GROUP BY city, v ORDER BY c LIMIT 3", resolve)
    assert counted.final_sql.endswith('ORDER BY "c" LIMIT 3')  # approximate anyway: the user's order alone


def test_without_order_by_the_broker_takes_the_first_groups_by_key_as_servers_rank_them() -> None:
    plan = plan_sql("SELECT city, v, COUNT(*) FROM events GROUP BY city, v LIMIT 3 OFFSET 1", resolve)
    assert plan.final_sql.endswith("ORDER BY __g0, __g1 LIMIT 3 OFFSET 1")
    assert plan.whole_sql is not None and plan.whole_sql.endswith("ORDER BY __g0, __g1 LIMIT 3 OFFSET 1")
    having = plan_sql("SELECT city, COUNT(*) FROM events GROUP BY city HAVING COUNT(*) > 1 LIMIT 3", resolve)
    assert "ORDER BY" not in having.final_sql  # not trimmed, so any groups (all are whole)


def test_only_group_by_plans_carry_a_ranking() -> None:
    assert plan_sql("SELECT COUNT(*) FROM events", resolve).group_trim is None
    assert plan_sql("SELECT city FROM events ORDER BY city LIMIT 3", resolve).group_trim is None


def test_multi_value_keys_are_ranked_after_unnesting() -> None:
    table = TableInfo("tags", ("tag", "n"), multi_value_columns=frozenset({"tag"}))
    plan = plan_sql("SELECT tag, SUM(n) FROM tags GROUP BY tag ORDER BY tag DESC LIMIT 1", lambda _: table)
    assert plan.group_trim is not None and plan.group_trim.exact and plan.group_trim.rows == 1
    parts = [pa.table({"tag": [["a", "b"], ["c"], ["h", "d", "e"]], "n": [1, 2, 3]}),
             pa.table({"tag": [["b", "e"], ["a"], ["f", "g", "h"]], "n": [10, 20, 30]})]
    partials = [run_server_step(plan, [part], min_trim_size=1) for part in parts]
    assert [p.num_rows for p in partials] == [5, 5]  # each part's six tags trimmed to 5 × LIMIT
    merged = merge_partials(plan, partials, parts[0].schema)
    assert merged.to_pylist() == [{"tag": "h", "sum(n)": 33.0}]


@pytest.mark.parametrize(("options", "expected"), [
    ({}, GroupOptions(None, None)),
    ({"numGroupsLimit": "250"}, GroupOptions(250, None)),
    ({"NUMGROUPSLIMIT": " 7 ", "minservergrouptrimsize": "-1"}, GroupOptions(7, -1)),
    ({"minServerGroupTrimSize": "0", "timeoutMs": "5"}, GroupOptions(None, 0)),
    ({"numGroupsLimit": "2147483647"}, GroupOptions(2_147_483_647, None)),
])
def test_group_options_are_read_from_query_options(options: dict[str, str], expected: GroupOptions) -> None:
    assert group_options(options) == expected


@pytest.mark.parametrize("options", [
    {"numGroupsLimit": "0"}, {"numGroupsLimit": "-3"}, {"numGroupsLimit": "many"}, {"numGroupsLimit": "1.5"},
    {"numGroupsLimit": "2147483648"}, {"minServerGroupTrimSize": "lots"}, {"minServerGroupTrimSize": "--1"},
    {"minServerGroupTrimSize": "99999999999"},
])
def test_bad_group_options_are_150(options: dict[str, str]) -> None:
    with pytest.raises(QueryError) as raised:
        group_options(options)
    assert raised.value.code is QueryErrorCode.SQL_PARSING


def _trimmed_run(sql: str, parts: list[pa.Table], min_trim_size: int = 1) -> pa.Table:
    """The distributed answer when every server keeps only its trim size of groups (5 × (LIMIT + OFFSET))."""
    plan = plan_sql(sql, resolve)
    partials = [run_server_step(plan, [part], min_trim_size=min_trim_size) for part in parts]
    return merge_partials(plan, partials, SCHEMA)


# ORDER BY every key: a total order, so the answer is DuckDB's row for row
TOTAL_KEY_ORDERS = [
    ("SELECT city, v, COUNT(*), SUM(d), MIN(d), AVG(d) FROM events GROUP BY city, v "
     "ORDER BY city DESC NULLS FIRST, v LIMIT 3 OFFSET 2",
     "SELECT city, v, COUNT(*), SUM(d), MIN(d), AVG(d) FROM events GROUP BY city, v "
     "ORDER BY city DESC NULLS FIRST, v LIMIT 3 OFFSET 2"),
    ("SELECT v, DISTINCTCOUNT(city), COUNT(*) FROM events GROUP BY v ORDER BY v DESC LIMIT 4",
     "SELECT v, COUNT(DISTINCT city), COUNT(*) FROM events GROUP BY v ORDER BY v DESC LIMIT 4"),
    ("SELECT DISTINCT v, city FROM events ORDER BY v, city LIMIT 2", None),
]


@SETTINGS
@given(data=st.data())
def test_ordering_by_every_key_is_exact_when_servers_trim(data: st.DataObject) -> None:
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    sql, oracle = data.draw(st.sampled_from(TOTAL_KEY_ORDERS))
    assert rows(_trimmed_run(sql, parts)) == rows(reference(oracle or sql, table))


@SETTINGS
@given(data=st.data())
def test_ordering_by_some_keys_gives_whole_groups_when_servers_trim(data: st.DataObject) -> None:
    """Ties under the ORDER BY may be broken either way, but every row is a whole group: a group one server cut
    must never come back with another server's share only (the tie-breakers guarantee it)."""
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    limit, offset = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 2))
    sql = (f"SELECT city, v, COUNT(*), SUM(d) FROM events GROUP BY city, v ORDER BY city DESC "
           f"LIMIT {limit} OFFSET {offset}")
    got = rows(_trimmed_run(sql, parts))
    groups = set(rows(reference("SELECT city, v, COUNT(*), SUM(d) FROM events GROUP BY city, v", table)))
    assert all(row in groups for row in got)
    expected = rows(reference(f"SELECT city FROM events GROUP BY city, v ORDER BY city DESC "
                              f"LIMIT {limit} OFFSET {offset}", table))
    assert [row[:1] for row in got] == expected


NO_ORDER = [
    ("SELECT city, v, COUNT(*), SUM(d), AVG(d), DISTINCTCOUNT(id) FROM events GROUP BY city, v LIMIT {n} OFFSET {m}",
     "SELECT city, v, COUNT(*), SUM(d), AVG(d), COUNT(DISTINCT id) FROM events GROUP BY city, v"),
    ("SELECT v, MAX(d), COUNT(*) FROM events GROUP BY v LIMIT {n} OFFSET {m}",
     "SELECT v, MAX(d), COUNT(*) FROM events GROUP BY v"),
]
NO_ORDER_KEYS = {0: "city, v", 1: "v"}


@SETTINGS
@given(data=st.data())
def test_without_order_by_every_group_returned_is_whole_when_servers_cut(data: st.DataObject) -> None:
    """GROUP BY … LIMIT without ORDER BY, each server cut by numGroupsLimit (the smallest that leaves LIMIT +
    OFFSET groups, the worst case) or by the trim size: every row answered is a whole group, DuckDB's over all the
    rows, and there are as many as LIMIT and OFFSET leave. Servers that kept whichever groups they met first sent
    some groups another server cut, and those came back with one server's share."""
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    which = data.draw(st.sampled_from([0, 1]))
    sql, oracle = NO_ORDER[which]
    n, m = data.draw(st.integers(1, 4)), data.draw(st.integers(0, 2))
    plan = plan_sql(sql.format(n=n, m=m), resolve)
    limit = data.draw(st.sampled_from([n + m, n + m + 1]))
    partials = [run_server_step(plan, [part], num_groups_limit=limit, min_trim_size=data.draw(st.sampled_from(
        [1, -1]))) for part in parts]
    got = rows(merge_partials(plan, partials, SCHEMA))
    groups = rows(reference(oracle, table))
    assert all(row in groups for row in got), (got, groups)
    assert len(got) == min(n, max(len(groups) - m, 0))
    # which groups: the first by their keys (NULLs last), the order the servers ranked them by
    assert got == rows(reference(f"{oracle} ORDER BY {NO_ORDER_KEYS[which]} LIMIT {n} OFFSET {m}", table))


def test_ties_under_a_key_order_are_broken_alike_on_every_server() -> None:
    """Forty groups tie under ORDER BY city, each with one row on each of two servers that hold them in opposite
    orders. Each server keeps 5 × LIMIT of them: the same ones (by the other key), so each comes back whole."""
    v = list(range(40))
    first = pa.table({"id": v, "city": ["x"] * 40, "v": v, "d": [1.0] * 40, "ts": [None] * 40}, schema=SCHEMA)
    parts = [first, first.take(list(reversed(range(40))))]
    got = _trimmed_run("SELECT city, v, COUNT(*) AS c FROM events GROUP BY city, v ORDER BY city LIMIT 3", parts)
    assert got.column("c").to_pylist() == [2, 2, 2]


def _skewed(seed: int, n: int = 60_000, keys: int = 20_000) -> pa.Table:
    """Many rare ids and a few heavy ones, every id's rows spread over the whole table (so over every server)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(100, 100 + keys, n)
    heavy = rng.random(n) < 0.2
    ids[heavy] = rng.zipf(1.3, int(heavy.sum())) % 50  # ids 0..49 take a fifth of the rows, zipf-skewed
    return pa.table({"id": ids.astype(np.int64), "city": pa.nulls(n, pa.string()),
                     "v": rng.integers(0, 100, n).astype(np.int32), "d": rng.random(n) * 10,
                     "ts": pa.nulls(n, pa.timestamp("ms"))}, schema=SCHEMA)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_top_counts_survive_the_default_trim_on_skewed_rows(seed: int) -> None:
    table = _skewed(seed)
    parts = [table.slice(i * 20_000, 20_000) for i in range(3)]
    sql = "SELECT id, COUNT(*) AS c, SUM(v) FROM events GROUP BY id ORDER BY c DESC, id LIMIT 10"
    plan = plan_sql(sql, resolve)
    partials = [run_server_step(plan, [part]) for part in parts]  # the defaults: 5,000 groups of ~7,000 kept
    assert all(p.num_rows == 5_000 for p in partials)
    assert rows(merge_partials(plan, partials, SCHEMA)) == rows(reference(sql, table))


@pytest.mark.parametrize("order", ["AVG(d) DESC", "SUM(d)", "MAX(v) - MIN(d) DESC", "MINMAXRANGE(d) DESC",
                                   "DISTINCTCOUNT(v) DESC", "DISTINCTSUM(v)", "DISTINCTAVG(v) DESC"])
def test_partials_rank_like_the_merged_values_when_each_group_lives_on_one_server(order: str) -> None:
    """Rows partitioned by the key (Pinot's partitioned tables): a server's partials are whole groups, so ranking
    them on partials must pick exactly the top groups — a wrong partial formula (AVG as a sum) picks others."""
    table = _skewed(3).sort_by("id")
    ids = table.column("id").to_numpy()
    cut_at = [int(np.searchsorted(ids, bound)) for bound in (5_000, 12_000)]
    parts = [table.slice(0, cut_at[0]), table.slice(cut_at[0], cut_at[1] - cut_at[0]), table.slice(cut_at[1])]
    sql = f"SELECT id, COUNT(*), AVG(d) FROM events GROUP BY id ORDER BY {order}, id LIMIT 7"
    oracle = sql.replace("MINMAXRANGE(d)", "(MAX(d) - MIN(d))").replace("DISTINCTCOUNT(v)", "COUNT(DISTINCT v)") \
        .replace("DISTINCTSUM(v)", "SUM(DISTINCT v)").replace("DISTINCTAVG(v)", "AVG(DISTINCT v)")
    assert rows(_trimmed_run(sql, parts)) == rows(reference(oracle, table))


def test_num_groups_limit_drops_groups_beyond_it() -> None:
    table = _skewed(4, n=3_000, keys=1_000)
    plan = plan_sql("SELECT id, COUNT(*) FROM events GROUP BY id LIMIT 100000", resolve)
    kept = run_server_step(plan, [table], num_groups_limit=300)
    assert kept.num_rows == 300
    everything = run_server_step(plan, [table])
    assert everything.num_rows == len(set(table.column("id").to_pylist())) > 300
    whole = dict(zip(everything.column("__g0").to_pylist(), everything.column("__p0").to_pylist()))
    assert all(whole[key] == count for key, count in zip(kept.column("__g0").to_pylist(),
                                                         kept.column("__p0").to_pylist()))  # whole groups
    ranked = plan_sql("SELECT id, COUNT(*) AS c FROM events GROUP BY id ORDER BY c DESC, id LIMIT 100000", resolve)
    top = run_server_step(ranked, [table], num_groups_limit=300)  # a trimmable query keeps its top groups
    assert top.column("__g0").to_pylist() == [key for key, _ in sorted(whole.items(), key=lambda kv: (-kv[1],
                                                                                                      kv[0]))][:300]


def test_a_distinct_count_past_the_groups_limit_keeps_the_top_groups() -> None:
    """ClickBench's q14 at 10M rows (``GROUP BY SearchPhrase ORDER BY COUNT(DISTINCT UserID) DESC LIMIT 10``):
    with more groups than numGroupsLimit, the server keeps its top groups by its own distinct count, not any."""
    table = _skewed(5)
    sql = "SELECT id, DISTINCTCOUNT(v) AS u FROM events GROUP BY id ORDER BY u DESC, id LIMIT 10"
    plan = plan_sql(sql, resolve)
    kept = run_server_step(plan, [table], num_groups_limit=100, min_trim_size=-1)
    assert kept.num_rows == 100
    assert rows(merge_partials(plan, [kept], SCHEMA)) == \
        rows(reference(sql.replace("DISTINCTCOUNT(v)", "COUNT(DISTINCT v)"), table))


@pytest.mark.parametrize("sql", [
    "SET minServerGroupTrimSize = -1; SET numGroupsLimit = 1000000; SELECT city FROM events GROUP BY city",
    "SELECT city FROM events GROUP BY city OPTION(numGroupsLimit=1000000, minServerGroupTrimSize=-1)",
])
def test_group_options_in_the_query_text(sql: str) -> None:
    assert group_options(split_query(sql)[1]) == GroupOptions(1_000_000, -1)
