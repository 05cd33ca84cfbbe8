"""What a client sends is bounded with Pinot's error 150 and a message saying the limit, and what goes wrong
inside the broker reaches the client as a generic message (the traceback stays in the log)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cuvee.broker import handler as handler_module
from cuvee.broker.config import BrokerConfig
from cuvee.broker.handler import QueryHandler
from tests.broker.test_handler_loop import FakeView


def _ask(handler: QueryHandler, sql: str, options: str | None = None) -> dict[str, Any]:
    return asyncio.run(handler.handle(sql, options))


def _error(answer: dict[str, Any]) -> tuple[int, str]:
    [error] = answer["exceptions"]
    return error["errorCode"], error["message"]


@pytest.fixture
def handler() -> QueryHandler:
    return QueryHandler(BrokerConfig(metadata="sqlite:///unused", max_timeout_ms=60_000), FakeView())  # type: ignore[arg-type]


def test_timeout_options_are_integers_within_the_configured_maximum(handler: QueryHandler) -> None:
    for value in ("99999999999999999999", "0", "-5", "1e5", "abc", "60001", "²", "١٢"):
        code, message = _error(_ask(handler, "SELECT COUNT(*) FROM events", f"timeoutMs={value}"))
        assert code == 150 and "timeoutMs must be" in message and "60000" in message
    assert _ask(handler, "SELECT COUNT(*) FROM events", "timeoutMs=60000")["exceptions"] == []
    with pytest.raises(ValueError):
        BrokerConfig(timeout_ms=20_000, max_timeout_ms=10_000)
    assert BrokerConfig(timeout_ms=7_200_000).timeout_limit_ms == 7_200_000  # a long default is not refused


def test_deeply_nested_sql_is_refused_before_it_is_parsed(handler: QueryHandler) -> None:
    deep = "SELECT COUNT(*) FROM events WHERE " + "(" * 5000 + "ts = 1" + ")" * 5000
    code, message = _error(_ask(handler, deep))
    assert code == 150 and "5000 deep" in message
    commented = "SELECT COUNT(*) FROM events -- it's\nWHERE " + "(" * 100 + "ts = 1" + ")" * 100
    code, message = _error(_ask(handler, commented))
    assert code == 150 and "100 deep" in message  # a quote in a comment does not hide what follows
    chain = "SELECT COUNT(*) FROM events WHERE " + "NOT " * 5000 + "ts = 1"  # no parentheses, still deep
    code, message = _error(_ask(handler, chain))
    assert code == 150 and "nested too deeply" in message
    quoted = "SELECT COUNT(*) FROM events /* don't */ WHERE tag = '" + "(" * 500 + "'"  # in a string: no nesting
    assert all("deep" not in e["message"] for e in _ask(handler, quoted)["exceptions"])


def test_an_unexpected_failure_answers_450_without_its_text(handler: QueryHandler,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise ZeroDivisionError("secret /var/lib/cuvee path")

    monkeypatch.setattr(handler_module, "broker_response", broken)
    code, message = _error(_ask(handler, "SELECT COUNT(*) FROM events"))
    assert code == 450 and "secret" not in message and "ZeroDivision" not in message and "broker log" in message


def test_planning_is_bounded_by_the_querys_timeout_and_overrunning_plans_are_capped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    handler = QueryHandler(BrokerConfig(metadata="sqlite:///unused", max_timeout_ms=60_000, max_overrun_plans=1),
                           FakeView())  # type: ignore[arg-type]
    release = threading.Event()
    real = handler_module.plan_sql

    def slow(*args: Any) -> Any:
        release.wait(10)  # a plan that takes longer than the query may
        return real(*args)

    monkeypatch.setattr(handler_module, "plan_sql", slow)

    async def scenario() -> list[dict[str, Any]]:
        first = await handler.handle("SELECT COUNT(*) FROM events", "timeoutMs=200")
        second = await handler.handle("SELECT COUNT(*) FROM events", "timeoutMs=200")  # the first still plans
        release.set()
        while handler._overrun_plans:  # the first plan ends: queries are planned again
            await asyncio.sleep(0.01)
        monkeypatch.setattr(handler_module, "plan_sql", real)
        third = await handler.handle("SET timeoutMs = 300; SELECT COUNT(*) FROM events OPTION(timeoutMs=250)")
        return [first, second, third]

    first, second, third = asyncio.run(scenario())
    code, message = _error(first)
    assert code == 400 and "planning the query took longer than the time its timeout left (200 ms)" in message
    assert first["timeUsedMs"] < 1000  # answered at the timeout, not when the plan ended
    code, message = _error(second)
    assert code == 400 and "overran their timeout are still being planned" in message
    assert third["exceptions"] == []


def test_options_in_the_sql_text_are_read_before_planning() -> None:
    from cuvee.query import embedded_options

    assert embedded_options("SET timeoutMs = 300; SET a='x;y'; SELECT 1 FROM t OPTION(timeoutMs=250, b=2)") == {
        "timeoutMs": "250", "a": "x;y", "b": "2"}
    assert embedded_options("SELECT 1 FROM t OPTION(nonsense)") == {}  # parsing reports it


def test_a_large_in_list_answers_in_seconds(handler: QueryHandler) -> None:
    values = ", ".join(str(i) for i in range(70_000))  # two lists, ~0.9 MB: the 990 KB
    answer = _ask(handler, f"SELECT COUNT(*) FROM events WHERE id IN ({values}) AND ts IN ({values})",
                  "timeoutMs=20000")
    assert answer["exceptions"] == [] and answer["resultTable"]["rows"] == [[0]]


def test_a_20000_term_or_is_refused_by_name_before_it_is_parsed(handler: QueryHandler,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: parsed, this text took sqlglot ~10 s, and DuckDB's push of it into an Arrow scan overflowed a C
    stack (a segmentation fault of the broker and the server); now nothing recursive sees it."""
    def never(*_: Any) -> Any:
        raise AssertionError("planned a text past the limits")

    monkeypatch.setattr(handler_module, "plan_sql", never)
    chain = "SELECT COUNT(*) FROM events WHERE " + " OR ".join(f"id = {i}" for i in range(20_000))
    code, message = _error(_ask(handler, chain, "timeoutMs=60000"))
    assert code == 150 and "19999 ANDs and ORs; at most 1000 (query_limits.max_connectives)" in message
    calls = "SELECT " + "abs(" * 10_000 + "id" + ")" * 10_000 + " FROM events"
    code, message = _error(_ask(handler, calls))
    assert code == 150 and "10000 deep; at most 32 (query_limits.max_nesting)" in message


def test_query_limits_are_configuration() -> None:
    from cuvee.node.config import ConfigValidationError, config_from_dict
    from cuvee.query.limits import QueryLimits

    lowered = QueryHandler(BrokerConfig(metadata="sqlite:///unused", query_limits=QueryLimits(
        max_connectives=2, max_tokens=40)), FakeView())  # type: ignore[arg-type]
    assert _ask(lowered, "SELECT COUNT(*) FROM events WHERE ts = 1 OR ts = 2 OR ts = 3")["exceptions"] == []
    code, message = _error(_ask(lowered, "SELECT COUNT(*) FROM events WHERE ts = 1 OR ts = 2 OR ts = 3 OR ts = 4"))
    assert code == 150 and "3 ANDs and ORs; at most 2 (query_limits.max_connectives)" in message
    code, message = _error(_ask(lowered, "SELECT " + ", ".join(["ts"] * 30) + " FROM events"))
    assert code == 150 and "(query_limits.max_tokens)" in message
    parsed = config_from_dict(BrokerConfig, {"query_limits": {"max_in_values": 10}})
    assert parsed.query_limits == QueryLimits(max_in_values=10)
    for bad in ({"max_nesting": 33}, {"max_tokens": 0}, {"max_depth": 5}):  # sqlglot's own bound; unknown keys
        with pytest.raises(ConfigValidationError):
            config_from_dict(BrokerConfig, {"query_limits": bad})
