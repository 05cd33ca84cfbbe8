"""The pass before parsing: nesting depth outside strings and comments, and long literal IN-lists set aside and
put back verbatim (so a 140,000-value list plans in well under a second instead of ~10 s in sqlglot)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.query.errors import QueryError
from cuvee.query.parse import TableInfo
from cuvee.query.prescan import MIN_SET_ASIDE, prescan
from cuvee.query.rewrite import plan_sql

TABLE = TableInfo("t_OFFLINE", ("id", "s", "ts"), timestamp_columns=frozenset({"ts"}))


def _plan(sql: str) -> str:
    return plan_sql(sql, lambda name: TABLE if name == "t" else None).server_sql


def test_depth_counts_parentheses_outside_strings_identifiers_and_comments() -> None:
    assert prescan("SELECT ((1))").depth == 2
    assert prescan("SELECT '(((' , \"a((\" -- ((((\n /* (((( */ (1)").depth == 1
    assert prescan("SELECT 'it''s ((' || (1)").depth == 1
    assert prescan("SELECT x FROM t WHERE x IN (1, 2)").depth == 1


def test_long_lists_are_set_aside_and_short_ones_and_quoted_ones_are_left() -> None:
    values = ", ".join(str(i) for i in range(MIN_SET_ASIDE))
    scanned = prescan(f"SELECT 1 FROM t WHERE id IN ({values}) AND s IN (1, 2)")
    assert list(scanned.lists.values()) == [values] and "IN (1, 2)" in scanned.text
    assert values not in scanned.text
    quoted = f"SELECT 1 FROM t WHERE s = 'id IN ({values})'"
    assert prescan(quoted).lists == {} and prescan(quoted).text == quoted
    mixed = ", ".join(["1"] * MIN_SET_ASIDE + ["id"])  # not only literals: the ordinary path
    assert prescan(f"SELECT 1 FROM t WHERE id IN ({mixed})").lists == {}


def test_a_set_aside_list_reaches_the_server_sql_verbatim_and_the_rest_is_still_checked() -> None:
    strings = ", ".join(f"'v''{i}'" for i in range(MIN_SET_ASIDE + 1))
    numbers = ", ".join(str(-i) + ".5e1" for i in range(MIN_SET_ASIDE))
    server = _plan(f"SELECT COUNT(*) FROM t WHERE s NOT IN ({strings}) AND id IN ({numbers})")
    assert f'NOT "s" IN ({strings})' in server and f'"id" IN ({numbers})' in server
    # A TIMESTAMP column compared with numbers is read as epoch millis, long list or not.
    assert f'EPOCH_MS("ts") IN ({numbers})' in _plan(f"SELECT COUNT(*) FROM t WHERE ts IN ({numbers})")
    assert f'"ts" IN ({strings})' in _plan(f"SELECT COUNT(*) FROM t WHERE ts IN ({strings})")
    with pytest.raises(QueryError) as unknown:
        _plan(f"SELECT COUNT(*) FROM t WHERE nope IN ({numbers})")
    assert unknown.value.code == 710


def test_a_140000_value_list_plans_in_well_under_a_second() -> None:
    values = ", ".join(str(i) for i in range(140_000))
    started = time.perf_counter()
    server = _plan(f"SELECT COUNT(*) FROM t WHERE id IN ({values})")
    assert values in server
    assert time.perf_counter() - started < 5  # ~0.2 s here; sqlglot alone took ~10 s


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-10**12, 10**12).map(str),
                          st.text(alphabet="ab'(), -", max_size=6).map(lambda t: "'" + t.replace("'", "''") + "'")),
                min_size=1, max_size=MIN_SET_ASIDE * 2))
def test_what_a_query_means_does_not_change_when_its_list_is_set_aside(values: list[str]) -> None:
    sql = f"SELECT COUNT(*) FROM t WHERE s IN ({', '.join(values)})"
    scanned = prescan(sql)
    if scanned.lists:
        (name, text), = scanned.lists.items()
        assert scanned.text.replace(name, text) == sql
    else:
        assert scanned.text == sql


def test_string_forms_the_scanner_does_not_know_fall_back_to_parsing_the_original_text() -> None:
    values = ", ".join(str(i) for i in range(MIN_SET_ASIDE + 6))
    for literal in (f"E'a\\' x IN ({values}) '", f"$$ id IN ({values}) $$"):
        server = _plan(f"SELECT COUNT(*) FROM t WHERE s = {literal}")
        assert "__cuvee_in_" not in server and f"IN ({values})" in server, server


def test_non_ascii_digits_are_not_literals() -> None:
    arabic = ", ".join(["\u0661"] * (MIN_SET_ASIDE + 6))
    assert prescan(f"SELECT 1 FROM t WHERE id IN ({arabic})").lists == {}
