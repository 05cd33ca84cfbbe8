"""A role's few hot routes answered without FastAPI's middleware stack and router.

Every query crosses two of them (``POST /query/sql`` on the broker, ``POST /query`` on a server), and FastAPI's
layers (error and telemetry middleware, body limit, exception middleware, exit stack, router, request wrapper)
cost each such request ~0.3-0.5 ms of CPU under the GIL, measured with ``py-spy --gil`` on a process per role:
as much as the query itself for a small one. A hot route is a plain function of the request body; what stands in
front of the app stays in front of it (``cuvee.node.http``: the body size limit and the auth layer wrap the whole
app, so a hot route is authenticated like any other), and an exception escaping it is answered 500 without its
text, as the app's own handler does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

log = logging.getLogger(__name__)

Scope = dict[str, Any]
HotAnswer = tuple[int, bytes, bytes]  # status, body, content type
HotHandler = Callable[[bytes, Scope], Awaitable[HotAnswer]]


@dataclass(frozen=True)
class HotRoute:
    """``handler(body, scope)`` for ``method path``; a body over ``max_body_bytes`` is answered 413 unread."""

    handler: HotHandler
    max_body_bytes: int
    too_large: str  # the 413's message


def json_error(status: int, message: str) -> HotAnswer:
    return status, orjson.dumps({"code": status, "error": message}), b"application/json"


class HotRouter(APIRouter):
    """A router of hot routes. Included in a ``FastRoutesApp`` they skip its middleware; included in any other
    FastAPI app (tests build bare ones) they are ordinary Starlette routes with the same behaviour."""

    def __init__(self) -> None:
        super().__init__()
        self.hot: dict[tuple[str, str], HotRoute] = {}

    def add_hot_route(self, method: str, path: str, route: HotRoute) -> None:
        self.hot[(method.upper(), path)] = route

        async def endpoint(request: Request) -> Response:
            answer = await _answer(route, request.scope, request.receive)
            if answer is None:  # the client left: nobody reads this
                return Response(status_code=400)
            status, body, content_type = answer
            return Response(body, status_code=status, media_type=content_type.decode())

        self.routes.append(Route(path, endpoint, methods=[method.upper()]))


class FastRoutesApp(FastAPI):
    """A FastAPI app whose ``HotRouter`` routes skip its middleware stack (the rest go through it as usual)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hot: dict[tuple[str, str], HotRoute] = {}

    def include_router(self, router: APIRouter, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        super().include_router(router, *args, **kwargs)
        if isinstance(router, HotRouter) and not args and not kwargs:  # a prefix would move its paths
            self.hot.update(router.hot)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        route = self.hot.get((scope.get("method", ""), scope.get("path", ""))) if scope["type"] == "http" else None
        if route is None:
            await super().__call__(scope, receive, send)
            return
        answer = await _answer(route, scope, receive)
        if answer is not None:
            await _send(send, answer)


async def _answer(route: HotRoute, scope: Scope, receive: Any) -> HotAnswer | None:
    """The route's answer to the request (None: the client left before sending it all)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > route.max_body_bytes:
            return json_error(413, route.too_large)
        if not message.get("more_body", False):
            break
    try:
        return await route.handler(bytes(body), scope)
    except Exception as exc:  # a bug costs one request, and its text stays in the log
        log.error("internal error on %s %s", scope.get("method"), scope.get("path"), exc_info=exc)
        return json_error(500, "internal error; the log has the details")


async def _send(send: Any, answer: HotAnswer) -> None:
    status, body, content_type = answer
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
