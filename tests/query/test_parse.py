"""Parsing and planning: Pinot's error codes for bad queries, and the shape of plans for good ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.query import QueryError, QueryErrorCode, QueryKind, parse_query_options, plan_sql
from cuvee.query.rewrite import DOCS_COLUMN
from tests.query.helpers import resolve

SQL_PARSING = [
    "SELEC * FROM events",
    "",
    "SELECT * FROM events; SELECT id FROM events",
    "DROP TABLE events",
    "CREATE TABLE x (a INT)",
    "INSERT INTO events VALUES (1)",
    "UPDATE events SET v = 1",
    "DELETE FROM events",
    "SELECT a.id FROM events a JOIN events b ON a.id = b.id",
    "SELECT id FROM events, events",
    "SELECT id FROM events WHERE id IN (SELECT id FROM events)",
    "SELECT * FROM (SELECT id FROM events)",
    "WITH x AS (SELECT 1) SELECT * FROM events",
    "SELECT id FROM events UNION SELECT id FROM events",
    "SELECT id, SUM(v) OVER () FROM events",
    "SELECT 1",
    "SELECT id FROM db.events",
    "SELECT x.id FROM events",
    "SELECT SUM(COUNT(v)) FROM events",
    "SELECT id FROM events WHERE SUM(v) > 1",
    "SELECT city, COUNT(*) FROM events GROUP BY SUM(v)",
    "SELECT city, v, COUNT(*) FROM events GROUP BY city",
    "SELECT SUM(v) FROM events HAVING id > 1",
    "SELECT city, COUNT(*) FROM events GROUP BY city ORDER BY v",
    "SELECT STDDEV(v) FROM events",
    "SELECT COUNT(*) FILTER (WHERE v > 1) FROM events",
    "SELECT PERCENTILE(v, 101) FROM events",
    "SELECT PERCENTILE(v) FROM events",
    "SELECT PERCENTILE(v, v) FROM events",
    "SELECT DISTINCTCOUNT(v, city) FROM events",
    "SELECT TEXT_MATCH(city, 'x') FROM events",
    "SELECT current_setting('temp_directory') FROM events",  # a server's settings and paths are not the caller's
    "SELECT id FROM events WHERE getenv('HOME') <> ''",
    "SELECT id FROM events ORDER BY 5",
    "SELECT COUNT(*) FROM events GROUP BY 0",
    "SELECT id FROM events LIMIT -1",
    "SELECT id FROM events LIMIT 1.5",
    "SELECT DISTINCT city, COUNT(*) FROM events",
    "SELECT id FROM events OPTION(timeoutMs)",
]


@pytest.mark.parametrize("sql", SQL_PARSING)
def test_unsupported_or_malformed_sql_is_error_150(sql: str) -> None:
    with pytest.raises(QueryError) as info:
        plan_sql(sql, resolve)
    assert info.value.code is QueryErrorCode.SQL_PARSING
    assert info.value.to_json()["errorCode"] == 150
    assert str(info.value.to_json()["message"]).startswith("SQLParsingError:\n")


@pytest.mark.parametrize("sql", ["SELECT * FROM nope", "SELECT COUNT(*) FROM events_OFFLINE"])
def test_unknown_table_is_error_190(sql: str) -> None:
    with pytest.raises(QueryError) as info:
        plan_sql(sql, resolve)
    assert info.value.code == 190


@pytest.mark.parametrize(("sql", "column"), [
    ("SELECT nope FROM events", "nope"),
    ("SELECT id FROM events WHERE nope = 1", "nope"),
    ("SELECT COUNT(*) FROM events GROUP BY nope", "nope"),
    ("SELECT id FROM events ORDER BY nope", "nope"),
    ("SELECT SUM(nope) FROM events", "nope"),
    ("SELECT id AS i FROM events WHERE i > 2", "i"),
    ("SELECT id AS i, i + 1 FROM events", "i"),
])
def test_unknown_column_is_error_710(sql: str, column: str) -> None:
    with pytest.raises(QueryError) as info:
        plan_sql(sql, resolve)
    assert info.value.code == 710
    assert info.value.message == f"Unknown columnName '{column}' found in the query"


def test_columns_and_tables_resolve_case_insensitively_and_quoted() -> None:
    plan = plan_sql('SELECT "ID", City FROM "events_REALTIME" WHERE events.V > 1', resolve)
    assert plan.table == "events"
    assert plan.column_names == ("id", "city")
    assert plan.server_sql == ('SELECT "id" AS __c0, "city" AS __c1 FROM cuvee_segments WHERE "v" > 1 LIMIT 10')


def test_pinot_default_limit_applies_to_selection_and_group_by_but_not_aggregation() -> None:
    assert plan_sql("SELECT id FROM events", resolve).limit == 10
    assert plan_sql("SELECT city, COUNT(*) FROM events GROUP BY city", resolve).limit == 10
    assert plan_sql("SELECT DISTINCT city FROM events", resolve).limit == 10
    assert plan_sql("SELECT COUNT(*) FROM events", resolve).limit is None
    explicit = plan_sql("SELECT id FROM events LIMIT 3 OFFSET 4", resolve)
    assert (explicit.limit, explicit.offset) == (3, 4)
    assert explicit.server_sql.endswith("LIMIT 7")


def test_query_kinds() -> None:
    assert plan_sql("SELECT id FROM events", resolve).kind is QueryKind.SELECTION
    assert plan_sql("SELECT MAX(v) FROM events", resolve).kind is QueryKind.AGGREGATION
    assert plan_sql("SELECT v FROM events GROUP BY v", resolve).kind is QueryKind.GROUP_BY
    assert plan_sql("SELECT DISTINCT v FROM events", resolve).kind is QueryKind.GROUP_BY


def test_result_column_names_follow_pinot() -> None:
    plan = plan_sql("SELECT COUNT(*), sum(v), COUNT(DISTINCT city), DISTINCTCOUNTHLL(city), PERCENTILE90(d), "
                    "MAX(d) AS top, city FROM events GROUP BY city", resolve)
    assert plan.column_names == ("count(*)", "sum(v)", "distinctcount(city)", "distinctcounthll(city)",
                                 "percentile90(d)", "top", "city")


def test_star_expands_to_columns_in_name_order() -> None:
    assert plan_sql("SELECT * FROM events", resolve).column_names == ("city", "d", "id", "ts", "v")


def test_query_options_from_set_statements_and_option_clause() -> None:
    plan = plan_sql("SET timeoutMs = 100; SET useMultistageEngine = 'false'; SELECT COUNT(*) FROM events;", resolve)
    assert plan.options == {"timeoutMs": "100", "useMultistageEngine": "false"}
    plan = plan_sql("SELECT COUNT(*) FROM events OPTION(timeoutMs=20, preserveType='true')", resolve)
    assert plan.options == {"timeoutMs": "20", "preserveType": "true"}


def test_request_query_options_allow_empty_entries() -> None:
    assert parse_query_options("timeoutMs=100;;useMultistageEngine=false;") == {
        "timeoutMs": "100", "useMultistageEngine": "false"}
    assert parse_query_options("") == {} and parse_query_options(None) == {}
    with pytest.raises(QueryError) as info:
        parse_query_options("timeoutMs")
    assert info.value.code == 150


def test_servers_never_see_the_users_table_name_and_partials_are_shared() -> None:
    plan = plan_sql("SELECT AVG(v), SUM(v), COUNT(v) FROM events", resolve)
    assert "events" not in plan.server_sql
    assert plan.server_sql == 'SELECT sum("v") AS __p0, count("v") AS __p1 FROM cuvee_segments'


def test_docs_scanned_rides_along_an_aggregation_and_is_a_second_query_for_a_selection() -> None:
    plan = plan_sql("SELECT city, COUNT(*) FROM events WHERE v > 1 GROUP BY city", resolve)
    assert plan.docs_scanned_sql is None and plan.docs_column == DOCS_COLUMN
    assert f"count(*) AS {DOCS_COLUMN} FROM cuvee_segments WHERE" in plan.server_sql
    plan = plan_sql("SELECT city FROM events WHERE v > 1 LIMIT 3", resolve)
    assert plan.docs_column is None
    assert plan.docs_scanned_sql == 'SELECT count(*) AS numDocsScanned FROM cuvee_segments WHERE "v" > 1'
    plan = plan_sql("SELECT COUNT(*) FROM events", resolve)
    assert plan.docs_column is None and plan.docs_scanned_sql is None and DOCS_COLUMN not in plan.server_sql


def test_timestamp_columns_compare_as_epoch_millis() -> None:
    plan = plan_sql("SELECT toEpochSeconds(ts) FROM events WHERE ts > 1000 AND ts < TIMESTAMP '2026-01-01'",
                    resolve)
    assert 'EPOCH_MS("ts") > 1000' in plan.server_sql
    assert '"ts" < CAST(' in plan.server_sql
    assert '(EPOCH_MS("ts")) // 1000' in plan.server_sql


_TOKENS = ["SELECT", "FROM", "events", "WHERE", "GROUP", "BY", "ORDER", "HAVING", "LIMIT", "OFFSET", "DISTINCT",
           "COUNT(*)", "SUM(v)", "AVG(", "PERCENTILE(v,", "90)", "DISTINCTCOUNT(city)", "city", "v", "d", "ts", "id",
           "nope", ",", "(", ")", "=", ">", "AND", "OR", "NOT", "IN", "LIKE", "'b%'", "1", "2", "AS", "x", "DESC",
           "*", "+", "/", "NULL", "IS", "BETWEEN", ";", "JOIN", "UPPER(", "toEpochSeconds("]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=14), st.text(max_size=20))
def test_any_input_plans_or_fails_with_a_query_error(tokens: list[str], noise: str) -> None:
    for sql in (" ".join(["SELECT", *tokens]), " ".join(tokens) + noise):
        try:
            plan = plan_sql(sql, resolve)
        except QueryError as e:
            assert e.code in (QueryErrorCode.SQL_PARSING, QueryErrorCode.UNKNOWN_COLUMN,
                              QueryErrorCode.TABLE_DOES_NOT_EXIST)
        else:
            assert plan.server_sql.startswith("SELECT ") and "cuvee_segments" in plan.server_sql


def test_to_date_time_formats_epoch_millis_with_a_java_pattern() -> None:
    plan = plan_sql("SELECT toDateTime(ts, 'yyyy-MM-dd''T''HH:mm') AS d FROM events LIMIT 1", resolve)
    assert "STRFTIME(\"ts\", '%Y-%m-%dT%H:%M')" in plan.server_sql
    with pytest.raises(QueryError, match="TODATETIME takes"):
        plan_sql("SELECT toDateTime(ts) FROM events", resolve)
