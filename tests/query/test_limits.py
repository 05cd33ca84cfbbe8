"""The one cheap pass that measures a query's text before anything recursive reads it (``cuvee.query.limits``)."""

from __future__ import annotations

import time

import pytest

from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.limits import QueryLimits, ServerQueryLimits, check_text

OR_CHAIN = "SELECT COUNT(*) FROM t WHERE " + " OR ".join(f"id = {i}" for i in range(20_000))


def _refusal(sql: str, limits: QueryLimits) -> str:
    with pytest.raises(QueryError) as caught:
        check_text(sql, limits)
    assert caught.value.code is QueryErrorCode.SQL_PARSING
    return caught.value.message


def test_the_text_is_measured_outside_strings_and_comments() -> None:
    scanned = check_text("SELECT a, b FROM t WHERE x = 'a OR b AND (c' AND y BETWEEN 1 AND 2 -- OR OR\n"
                         "AND z IN (1, 2) OR w IN ('p', 'q')", QueryLimits())
    assert (scanned.connectives, scanned.depth, scanned.longest_in) == (4, 1, 2)
    assert scanned.tokens == 23  # a string, a comment and an IN-list of literals count one each


def test_each_limit_is_named_by_its_key_past_it() -> None:
    started = time.monotonic()
    assert "19999 ANDs and ORs; at most 1000 (query_limits.max_connectives)" in _refusal(OR_CHAIN, QueryLimits())
    assert time.monotonic() - started < 5  # measured, not parsed (sqlglot took ~10 s on it)
    deep = "SELECT " + "abs(" * 10_000 + "x" + ")" * 10_000 + " FROM t"
    assert "nests parentheses 10000 deep; at most 32 (query_limits.max_nesting)" in _refusal(deep, QueryLimits())
    wide = "SELECT " + " + ".join("x" for _ in range(15_000)) + " FROM t"
    assert "(query_limits.max_tokens)" in _refusal(wide, QueryLimits())
    listed = "SELECT COUNT(*) FROM t WHERE id IN (" + ", ".join(str(i) for i in range(1_001)) + ")"
    assert "IN-list of 1001 values; at most 1000 (query_limits.max_in_values)" in _refusal(
        listed, QueryLimits(max_in_values=1_000))
    check_text(listed, QueryLimits())  # a long list counts as one token, its values against max_in_values only


def test_limits_are_positive_integers_and_servers_have_room_for_the_rewrite() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="query_limits.max_tokens"):
            QueryLimits(max_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_connectives must be at most 4000"):
        QueryLimits(max_connectives=4_001)  # within a quarter of where Arrow's recursion overflowed 8 MiB
    server, broker = ServerQueryLimits(), QueryLimits()
    assert server.max_tokens == 2 * broker.max_tokens and server.max_connectives == 2 * broker.max_connectives
    assert server.max_nesting == 2 * broker.max_nesting and server.max_in_values == broker.max_in_values


def test_no_role_raises_pythons_recursion_limit() -> None:
    """A RecursionError is a clean 150 only while Python's limit stays within every thread's C stack: none of the
    roles (nor what they import) raises it above the interpreter's 1,000 frames."""
    import sys

    import cuvee.broker.broker  # noqa: F401
    import cuvee.controller  # noqa: F401
    import cuvee.server.server  # noqa: F401

    assert sys.getrecursionlimit() <= 1_000


def test_a_servers_query_limits_table_keeps_the_server_defaults_it_does_not_name() -> None:
    from cuvee.node.config import config_from_dict
    from cuvee.server.config import ServerConfig

    config = config_from_dict(ServerConfig, {"query_limits": {"max_tokens": 5}})
    assert config.query_limits == ServerQueryLimits(max_tokens=5)
    assert config.query_limits.max_connectives == 2_000
