"""``POST /sql`` on the controller: refused bodies, no broker, an unreachable broker skipped, the caller's own
credentials (not the cluster's) forwarded, and what the broker answers passed through as it is."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from fastapi import FastAPI, Request

from cuvee.console.sql_proxy import MAX_SQL_CHARS, forward_query
from cuvee.node.http import HttpService


def _forward(brokers: list[str], body: Any, authorization: str | None = None) -> tuple[int, Any]:
    return asyncio.run(forward_query(brokers, body, authorization, timeout=5, verify=True))


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_bodies_that_are_not_queries_are_refused_before_any_broker_is_asked() -> None:
    for body in (None, [], {"sql": 3}, {"sql": "  "}, {"query": "SELECT 1"}, {"sql": "x" * (MAX_SQL_CHARS + 1)}):
        status, answer = _forward([_closed_port_url()], body)
        assert status == 400 and answer["code"] == 400, body


def test_no_live_broker_and_no_reachable_broker_answer_503() -> None:
    status, answer = _forward([], {"sql": "SELECT 1"})
    assert (status, answer["code"]) == (503, 503) and "no live broker" in answer["error"]
    status, answer = _forward([_closed_port_url(), _closed_port_url()], {"sql": "SELECT 1"})
    assert status == 503 and "none of the 2 live brokers" in answer["error"]


def test_the_callers_credentials_and_the_query_reach_a_broker_and_its_answer_comes_back() -> None:
    seen: list[tuple[str | None, Any]] = []
    app = FastAPI()

    @app.post("/query/sql")
    async def query(request: Request) -> dict[str, Any]:
        seen.append((request.headers.get("authorization"), await request.json()))
        return {"resultTable": {"rows": [[7]]}, "exceptions": []}

    service = HttpService(app, name="fake-broker").start()
    try:
        status, answer = _forward([_closed_port_url(), service.url],
                                  {"sql": "SELECT COUNT(*) FROM t", "queryOptions": "timeoutMs=5", "extra": 1},
                                  "Basic dXNlcjpwdw==")
    finally:
        service.stop()
    assert status == 200 and answer["resultTable"]["rows"] == [[7]]
    assert seen == [("Basic dXNlcjpwdw==", {"sql": "SELECT COUNT(*) FROM t", "queryOptions": "timeoutMs=5"})]


def test_a_broker_that_does_not_know_the_caller_answers_502_not_401() -> None:
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/query/sql")
    async def query() -> JSONResponse:
        return JSONResponse({"code": 401, "error": "invalid credentials"}, status_code=401)

    service = HttpService(app, name="strict-broker").start()
    try:
        status, answer = _forward([service.url], {"sql": "SELECT 1"}, "Basic dXNlcjpwdw==")
    finally:
        service.stop()
    assert status == 502 and "did not accept your credentials" in answer["error"]


def test_principals_cannot_be_planted_while_auth_is_off(tmp_path) -> None:  # noqa: ANN001
    from fastapi.testclient import TestClient

    from cuvee.auth.config import AuthConfig
    from cuvee.cluster.store import ClusterStore
    from cuvee.controller import api_users
    from cuvee.controller.api_common import install_error_handlers
    from cuvee.metastore import open_metastore

    store = ClusterStore(open_metastore(f"sqlite:///{tmp_path / 'm.db'}"), "test")
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(api_users.router(lambda: store, AuthConfig(), lambda: None))
    answer = TestClient(app).post("/users", json={"username": "eve", "password": "long enough", "role": "ADMIN"})
    assert answer.status_code == 409 and "auth is off" in answer.json()["error"]
    assert store.children(store.paths.principals) == []
