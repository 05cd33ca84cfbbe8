"""Routes that read a JSON body themselves (a metadata push, the console's queries) read it with ``read_json``:
JSON nested 100,000 deep is a ValueError like any bad JSON (the routes' 400), not Starlette's RecursionError (500)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

DEEP = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


def _request(body: bytes) -> Request:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)


def test_json_nested_past_the_parsers_bound_is_a_value_error() -> None:
    from cuvee.node.http import read_json

    with pytest.raises(ValueError, match="depth"):
        asyncio.run(read_json(_request(DEEP)))
    assert asyncio.run(read_json(_request(b'{"a": [1, {"b": null}]}'))) == {"a": [1, {"b": None}]}


def test_the_controller_answers_400_to_a_metadata_push_nested_100000_deep(tmp_path: Any) -> None:
    from cuvee.testing.cluster import InProcessCluster

    with InProcessCluster(tmp_path, servers=0) as cluster:
        for path in ("/segments?tableName=events", "/sql"):
            response = cluster.http.post(f"{cluster.controller_url}{path}", content=DEEP,
                                         headers={"Content-Type": "application/json"})
            assert response.status_code == 400, (path, response.status_code, response.text[:200])
            assert "Recursion" not in response.text
        assert cluster.http.get(f"{cluster.controller_url}/health").status_code == 200
