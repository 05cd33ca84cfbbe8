"""LOOKUP over a dimension table: its translation into the servers' SQL, run over two "servers" of fact rows with
the dimension rows beside each, and judged against DuckDB's LEFT JOIN over the same rows; and every refusal."""

from __future__ import annotations

import dataclasses
import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from cuvee.query import QueryError, QueryErrorCode, TableInfo, check_plan, merge_partials, plan_sql, run_server_step
from cuvee.query.rewrite import QueryPlan

FACT = pa.table({"teamID": pa.array(["a", "b", "c", "a", None, "b", "zz"]),
                 "league": pa.array(["AL", "NL", "AL", "NL", "AL", "AL", "NL"]),
                 "runs": pa.array([1, 2, 3, 4, 5, 6, 7], pa.int64()),
                 "tags": pa.array([["x"], [], ["y", "z"], [], [], ["x"], []], pa.list_(pa.string()))})
TEAMS = pa.table({"teamID": pa.array(["a", "b", "c"]), "teamName": pa.array(["Ants", "Bees", "Cats"]),
                  "rank": pa.array([3, 1, 2], pa.int32())})
PAIRS = pa.table({"league": pa.array(["AL", "NL", "AL"]), "teamID": pa.array(["a", "a", "b"]),
                  "bonus": pa.array([10.5, 20.5, 30.5])})

TABLES = {
    "games_OFFLINE": TableInfo("games_OFFLINE", ("teamID", "league", "runs", "tags"),
                               multi_value_columns=frozenset({"tags"}),
                               value_types=(("teamID", "STRING"), ("league", "STRING"), ("runs", "LONG"))),
    "teams_OFFLINE": TableInfo("teams_OFFLINE", ("teamID", "teamName", "rank"), dim_table=True,
                               primary_key=("teamID",), primary_key_types=("VARCHAR",),
                               value_types=(("teamID", "STRING"), ("teamName", "STRING"), ("rank", "INT"))),
    "pairs_OFFLINE": TableInfo("pairs_OFFLINE", ("league", "teamID", "bonus"), dim_table=True,
                               primary_key=("league", "teamID"), primary_key_types=("VARCHAR", ""),
                               value_types=(("league", "STRING"), ("teamID", "STRING"), ("bonus", "DOUBLE"))),
    "plain_OFFLINE": TableInfo("plain_OFFLINE", ("teamID",), value_types=(("teamID", "STRING"),)),
    "events_REALTIME": TableInfo("events_REALTIME", ("teamID",)),
}
ROWS = {"teams_OFFLINE": TEAMS, "pairs_OFFLINE": PAIRS}
FACT_SCHEMA = FACT.schema


def resolve(name: str) -> TableInfo | None:
    for key, info in TABLES.items():
        if name.lower() in (key.lower(), key.rsplit("_", 1)[0].lower()):
            return info
    return None


def plan(sql: str) -> QueryPlan:
    planned = plan_sql(sql, resolve)
    typed = tuple(dataclasses.replace(lookup, schema=ROWS[lookup.table].schema) for lookup in planned.lookups)
    return dataclasses.replace(planned, lookups=typed)  # what the broker adds (cuvee.broker.lookups)


def run(sql: str) -> list[tuple]:
    """The answer of two servers, each with half the fact rows and the whole dimension tables."""
    planned = plan(sql)
    check_plan(planned, FACT_SCHEMA)
    dims = {lookup.relation: ROWS[lookup.table] for lookup in planned.lookups}
    partials = [run_server_step(planned, [FACT.slice(0, 3)], lookups=dims),
                run_server_step(planned, [FACT.slice(3)], lookups=dims)]
    return [tuple(row.values()) for row in merge_partials(planned, partials, FACT_SCHEMA).to_pylist()]


def oracle(sql: str) -> list[tuple]:
    con = duckdb.connect()
    for name, rows in {"games": FACT, "teams": TEAMS, "pairs": PAIRS}.items():
        con.register(name, rows)
    return con.sql(sql).fetchall()


def test_the_translation_qualifies_the_fact_columns_and_records_the_dimension_table() -> None:
    planned = plan_sql("SELECT LOOKUP('teams', 'teamName', 'teamID', teamID) FROM games", resolve)
    assert [(lk.relation, lk.table) for lk in planned.lookups] == [("cuvee_lookup_1", "teams_OFFLINE")]
    assert ('(SELECT "__lookup1"."teamName" FROM cuvee_lookup_1 AS "__lookup1" '
            'WHERE "__lookup1"."teamID" = TRY_CAST(cuvee_segments."teamID" AS TEXT) LIMIT 1)') in planned.server_sql


def test_a_fact_column_named_like_the_dimension_key_is_the_fact_rows_own() -> None:
    """Unqualified, ``teamID = teamID`` would compare the dimension row with itself: every row would match."""
    assert sorted(run("SELECT runs, LOOKUP('teams', 'teamName', 'teamID', teamID) FROM games"), key=str) == sorted(
        oracle("SELECT runs, t.teamName FROM games g LEFT JOIN teams t ON t.teamID = g.teamID"), key=str)


def test_no_matching_row_is_null_and_the_answer_has_the_dimension_columns_type() -> None:
    planned = plan("SELECT runs, LOOKUP('teams', 'rank', 'teamID', teamID) AS r FROM games ORDER BY runs")
    dims = {"cuvee_lookup_1": TEAMS}
    answer = merge_partials(planned, [run_server_step(planned, [FACT], lookups=dims)], FACT_SCHEMA)
    assert answer.schema.field("r").type == pa.int32()
    assert answer.column("r").to_pylist() == [3, 1, 2, 3, None, 1, None]  # NULL key, and 'zz' matches nothing


def test_group_by_a_lookup_with_counts_as_duckdb_left_join_answers() -> None:
    assert run("SELECT LOOKUP('teams', 'teamName', 'teamID', teamID), COUNT(*) FROM games GROUP BY 1 "
               "ORDER BY 2 DESC, 1 NULLS LAST") == oracle(
        "SELECT t.teamName, COUNT(*) FROM games g LEFT JOIN teams t ON t.teamID = g.teamID GROUP BY 1 "
        "ORDER BY 2 DESC, 1 NULLS LAST")


def test_a_lookup_in_where_and_inside_aggregations() -> None:
    assert run("SELECT SUM(runs), MAX(LOOKUP('teams', 'rank', 'teamID', teamID)) FROM games "
               "WHERE LOOKUP('teams', 'teamName', 'teamID', teamID) IN ('Ants', 'Cats')") == oracle(
        "SELECT SUM(runs)::DOUBLE, MAX(t.rank) FROM games g LEFT JOIN teams t ON t.teamID = g.teamID "
        "WHERE t.teamName IN ('Ants', 'Cats')")


def test_composite_keys_are_anded_in_any_order() -> None:
    expected = oracle("SELECT runs, p.bonus FROM games g LEFT JOIN pairs p ON p.league = g.league "
                      "AND p.teamID = g.teamID ORDER BY runs")
    assert run("SELECT runs, LOOKUP('pairs', 'bonus', 'league', league, 'teamID', teamID) FROM games "
               "ORDER BY runs") == expected
    assert run("SELECT runs, lookUp('pairs_OFFLINE', 'BONUS', 'teamid', teamID, 'LEAGUE', league) FROM games "
               "ORDER BY runs") == expected


def test_a_lookups_fact_value_may_be_an_expression_or_another_lookup() -> None:
    assert run("SELECT runs, LOOKUP('teams', 'teamName', 'teamID', lower(upper(teamID))) FROM games "
               "ORDER BY runs")[:3] == [(1, "Ants"), (2, "Bees"), (3, "Cats")]
    nested = run("SELECT LOOKUP('pairs', 'bonus', 'league', 'AL', 'teamID', "
                 "LOOKUP('teams', 'teamID', 'teamID', teamID)) AS b FROM games ORDER BY runs")
    assert [row[0] for row in nested] == [10.5, 30.5, None, 10.5, None, 30.5, None]


@pytest.mark.parametrize(("sql", "code", "words"), [
    ("SELECT LOOKUP('nope', 'teamName', 'teamID', teamID) FROM games", QueryErrorCode.TABLE_DOES_NOT_EXIST,
     "table 'nope' does not exist"),
    ("SELECT LOOKUP('plain', 'teamID', 'teamID', teamID) FROM games", QueryErrorCode.SQL_PARSING,
     "is not a dimension table"),
    ("SELECT LOOKUP('events', 'teamID', 'teamID', teamID) FROM games", QueryErrorCode.SQL_PARSING,
     "is not a dimension table"),
    ("SELECT LOOKUP('teams', 'nope', 'teamID', teamID) FROM games", QueryErrorCode.UNKNOWN_COLUMN,
     "Unknown columnName 'nope'"),
    ("SELECT LOOKUP('teams', 'teamName', 'nope', teamID) FROM games", QueryErrorCode.UNKNOWN_COLUMN,
     "Unknown columnName 'nope'"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID') FROM games", QueryErrorCode.SQL_PARSING, "4 or more arguments"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID', teamID, 'rank') FROM games", QueryErrorCode.SQL_PARSING,
     "4 or more arguments"),
    ("SELECT LOOKUP(league, 'teamName', 'teamID', teamID) FROM games", QueryErrorCode.SQL_PARSING,
     "must be a string literal"),
    ("SELECT LOOKUP('teams', 'teamName', teamID, teamID) FROM games", QueryErrorCode.SQL_PARSING,
     "must be a string literal"),
    ("SELECT LOOKUP('teams', 'teamName', 'rank', runs) FROM games", QueryErrorCode.SQL_PARSING,
     "must be the primary key columns"),
    ("SELECT LOOKUP('pairs', 'bonus', 'league', league) FROM games", QueryErrorCode.SQL_PARSING,
     "must be the primary key columns"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID', MAX(teamID)) FROM games", QueryErrorCode.SQL_PARSING,
     "not an aggregation"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID', tags) FROM games", QueryErrorCode.SQL_PARSING,
     "multi-value column"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID', nope) FROM games", QueryErrorCode.UNKNOWN_COLUMN,
     "Unknown columnName 'nope'"),
])
def test_bad_lookups_are_refused_with_pinots_codes(sql: str, code: QueryErrorCode, words: str) -> None:
    with pytest.raises(QueryError) as info:
        plan_sql(sql, resolve)
    assert info.value.code is code and words in info.value.message


def test_a_fact_value_is_read_as_the_keys_type_and_one_that_does_not_convert_matches_nothing() -> None:
    """Pinot reads the fact value as the key's type; DuckDB comparing across types would fail on 'a'."""
    numbered = pa.table({"n": pa.array([1, 2, 3], pa.int64()), "word": pa.array(["one", "two", "three"])})
    TABLES["numbers_OFFLINE"] = TableInfo("numbers_OFFLINE", ("n", "word"), dim_table=True, primary_key=("n",),
                                          primary_key_types=("BIGINT",))
    ROWS["numbers_OFFLINE"] = numbered
    try:
        answer = run("SELECT runs, LOOKUP('numbers', 'word', 'n', runs > 2), LOOKUP('numbers', 'word', 'n', "
                     "CONCAT(teamID, '')), LOOKUP('teams', 'teamName', 'teamID', runs) FROM games ORDER BY runs")
    finally:
        del TABLES["numbers_OFFLINE"], ROWS["numbers_OFFLINE"]
    assert answer[0] == (1, None, None, None) and answer[-1] == (7, "one", None, None)  # true is 1; 'zz' no number


# ---- Pinot's conversions of a join value to the key's type, and a LOOKUP beside aggregations ----------------------

MEASURES = pa.table({"x": pa.array([2.7, -2.7, 3.0, float("nan"), 1e30, None]),
                     "ts": pa.array([1_000, 2_000, 3_000, 4_000, 5_000, None], pa.timestamp("ms")),
                     "ms": pa.array([1_000, 2_000, 3_000, 4_000, 5_000, None], pa.int64()),
                     "label": pa.array(["2.9", "-2", "x", "2", " 3", None])})
CODES = pa.table({"code": pa.array([2, -2, 3, 0, 2 ** 31 - 1], pa.int32()),
                  "word": pa.array(["two", "minus two", "three", "zero", "max"])})
MOMENTS = pa.table({"at": pa.array([1_000, 3_000, 5_000], pa.int64()), "what": pa.array(["one", "three", "five"])})
STAMPED = pa.table({"at": pa.array([2_000, 4_000], pa.timestamp("ms")), "what": pa.array(["two", "four"])})
CONVERSION_TABLES = {
    "measures_OFFLINE": TableInfo("measures_OFFLINE", tuple(MEASURES.schema.names), frozenset({"ts"}),
                                  number_columns=frozenset({"x", "ms"})),
    "codes_OFFLINE": TableInfo("codes_OFFLINE", ("code", "word"), dim_table=True, primary_key=("code",),
                               primary_key_types=("INTEGER",)),
    "moments_OFFLINE": TableInfo("moments_OFFLINE", ("at", "what"), dim_table=True, primary_key=("at",),
                                 primary_key_types=("BIGINT",)),
    "stamped_OFFLINE": TableInfo("stamped_OFFLINE", ("at", "what"), dim_table=True, primary_key=("at",),
                                 primary_key_types=("TIMESTAMP",)),
}
CONVERSION_ROWS = {"codes_OFFLINE": CODES, "moments_OFFLINE": MOMENTS, "stamped_OFFLINE": STAMPED}


def java_int(value: float | str | None) -> int | None:
    """Java's ``(int) d`` of a double (``Double.valueOf(s).intValue()`` of a string): toward zero, NaN 0, saturated;
    None where the string is no number."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if number != number:
        return 0
    return max(-(2 ** 31), min(2 ** 31 - 1, int(number)))


def run_measures(sql: str) -> list[tuple]:
    """``sql`` over MEASURES on one server, with the conversion tests' dimension tables."""
    def resolve_here(name: str) -> TableInfo | None:
        return next((i for k, i in CONVERSION_TABLES.items() if name.lower() in (k.lower(), k[:-8].lower())), None)

    planned = plan_sql(sql, resolve_here)
    planned = dataclasses.replace(planned, lookups=tuple(
        dataclasses.replace(lk, schema=CONVERSION_ROWS[lk.table].schema) for lk in planned.lookups))
    check_plan(planned, MEASURES.schema)
    dims = {lk.relation: CONVERSION_ROWS[lk.table] for lk in planned.lookups}
    partial = run_server_step(planned, [MEASURES], lookups=dims)
    return [tuple(r.values()) for r in merge_partials(planned, [partial], MEASURES.schema).to_pylist()]


def test_a_double_or_string_against_an_int_key_is_read_with_javas_cast_not_rounded() -> None:
    words = dict(zip(CODES["code"].to_pylist(), CODES["word"].to_pylist()))
    answer = run_measures("SELECT LOOKUP('codes', 'word', 'code', x), LOOKUP('codes', 'word', 'code', label) "
                          "FROM measures LIMIT 10")
    assert [a for a, _ in answer] == [words.get(java_int(x)) for x in MEASURES["x"].to_pylist()]
    assert [b for _, b in answer] == [words.get(java_int(s)) for s in MEASURES["label"].to_pylist()]
    assert answer[0][0] == "two"  # 2.7 is 2 in Java (DuckDB's cast rounded it to 3)


def test_a_timestamp_and_a_long_key_compare_as_epoch_millis() -> None:
    millis = [None if t is None else int(t.timestamp() * 1000) for t in
              MEASURES["ts"].cast(pa.timestamp("ms", tz="UTC")).to_pylist()]
    by_long = dict(zip(MOMENTS["at"].to_pylist(), MOMENTS["what"].to_pylist()))
    by_stamp = {int(t.replace(tzinfo=dt.timezone.utc).timestamp() * 1000): w
                for t, w in zip(STAMPED["at"].to_pylist(), STAMPED["what"].to_pylist())}
    answer = run_measures("SELECT LOOKUP('moments', 'what', 'at', ts), LOOKUP('stamped', 'what', 'at', ms), "
                          "LOOKUP('stamped', 'what', 'at', ts) FROM measures LIMIT 10")
    assert [row[0] for row in answer] == [by_long.get(m) for m in millis]  # a TIMESTAMP fact, a LONG key
    assert [row[1] for row in answer] == [by_stamp.get(m) for m in MEASURES["ms"].to_pylist()]  # LONG vs TIMESTAMP
    assert [row[2] for row in answer] == [by_stamp.get(m) for m in millis]


def test_a_lookup_over_group_by_keys_is_selected_beside_aggregations() -> None:
    """Its join values are GROUP BY keys, so it is a function of the group: the servers compute it as a hidden
    group key (the broker holds no dimension table)."""
    sql = ("SELECT teamID, LOOKUP('teams', 'teamName', 'teamID', teamID) AS name, SUM(runs), COUNT(*) FROM games "
           "GROUP BY teamID ORDER BY teamID NULLS LAST")
    expected = oracle("SELECT g.teamID, t.teamName, SUM(runs)::DOUBLE, COUNT(*) FROM games g LEFT JOIN teams t "
                      "ON t.teamID = g.teamID GROUP BY g.teamID, t.teamName ORDER BY g.teamID NULLS LAST")
    assert run(sql) == expected
    assert plan(sql).column_names == ("teamID", "name", "sum(runs)", "count(*)")
    # in HAVING and ORDER BY too, and with a composite key over two GROUP BY keys
    assert run("SELECT league, teamID, MAX(runs) FROM games GROUP BY league, teamID "
               "HAVING LOOKUP('pairs', 'bonus', 'league', league, 'teamID', teamID) > 15 ORDER BY "
               "LOOKUP('pairs', 'bonus', 'league', league, 'teamID', teamID)") == oracle(
        "SELECT g.league, g.teamID, MAX(runs) FROM games g JOIN pairs p ON p.league = g.league AND "
        "p.teamID = g.teamID GROUP BY g.league, g.teamID, p.bonus HAVING p.bonus > 15 ORDER BY p.bonus")


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT league, LOOKUP('teams', 'teamName', 'teamID', teamID), SUM(runs) FROM games GROUP BY league",
     "column(s) teamID are not GROUP BY keys"),
    ("SELECT LOOKUP('teams', 'teamName', 'teamID', teamID), SUM(runs) FROM games", "there is no GROUP BY"),
])
def test_a_lookup_beside_aggregations_over_other_columns_is_refused_in_words(sql: str, words: str) -> None:
    with pytest.raises(QueryError) as info:
        plan_sql(sql, resolve)
    assert info.value.code is QueryErrorCode.SQL_PARSING and words in info.value.message
