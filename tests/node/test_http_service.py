from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from cuvee.node.http import HttpService, HttpServiceError


def test_serves_on_a_free_port_and_stops() -> None:
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "OK"}

    service = HttpService(app, name="t").start()
    try:
        assert service.port > 0
        assert httpx.get(f"{service.url}/health").json() == {"status": "OK"}
    finally:
        service.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{service.url}/health", timeout=1)


def test_a_taken_port_is_a_clear_error() -> None:
    first = HttpService(FastAPI(), name="first")
    try:
        with pytest.raises(HttpServiceError, match="cannot listen"):
            HttpService(FastAPI(), port=first.port, name="second")
    finally:
        first.stop()
