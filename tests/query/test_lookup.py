"""LOOKUP over a dimension table: its translation into the servers' SQL, run over two "servers" of fact rows with
the dimension rows beside each, and judged against DuckDB's LEFT JOIN over the same rows; and every refusal."""

from __future__ import annotations

import dataclasses

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
                               multi_value_columns=frozenset({"tags"})),
    "teams_OFFLINE": TableInfo("teams_OFFLINE", ("teamID", "teamName", "rank"), dim_table=True,
                               primary_key=("teamID",), primary_key_types=("VARCHAR",)),
    "pairs_OFFLINE": TableInfo("pairs_OFFLINE", ("league", "teamID", "bonus"), dim_table=True,
                               primary_key=("league", "teamID"), primary_key_types=("VARCHAR", "")),
    "plain_OFFLINE": TableInfo("plain_OFFLINE", ("teamID",)),
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
