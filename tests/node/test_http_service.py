from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, Request

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


def test_oversize_bodies_are_refused_with_413_and_the_service_keeps_serving() -> None:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    service = HttpService(app, name="t", max_body_bytes=1000).start()
    try:
        assert httpx.post(f"{service.url}/echo", content=b"x" * 1000).json() == {"bytes": 1000}
        declared = httpx.post(f"{service.url}/echo", content=b"x" * 5000)
        assert declared.status_code == 413 and declared.json()["code"] == 413

        def chunks():  # no Content-Length: the limit is enforced while reading
            for _ in range(10):
                yield b"y" * 500

        streamed = httpx.post(f"{service.url}/echo", content=chunks())
        assert streamed.status_code == 413
        assert httpx.post(f"{service.url}/echo", content=b"ok").json() == {"bytes": 2}
    finally:
        service.stop()


def test_the_listener_is_a_tcp_socket_so_responses_are_not_delayed_by_nagle() -> None:
    """asyncio sets TCP_NODELAY on accepted connections only when the listening socket's proto is TCP; without it
    each keep-alive response waited ~40 ms (measured in bench/e2e.py)."""
    import socket

    service = HttpService(FastAPI(), name="t")
    try:
        assert service._socket.proto == socket.IPPROTO_TCP
    finally:
        service.stop()
