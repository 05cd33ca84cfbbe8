"""The console's routes on the controller: its static files, and ``POST /sql`` (Pinot's controller spells it so).

The static files hold no data and are public, so a browser can load the login form; every call the page makes
goes through the auth layer with the credentials the user typed.
"""

from __future__ import annotations

import asyncio
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from cuvee.console.sql_proxy import MAX_BODY_BYTES, forward_query, live_brokers
from cuvee.controller.api_common import error_response
from cuvee.node.http import read_json

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cuvee.controller.controller import Controller

STATIC = files("cuvee.console") / "static"


def console_router(ctl: Controller, app: FastAPI) -> APIRouter:
    """Mounts the static files on ``app`` and returns the routes that go beside them."""
    app.mount("/console", _FramelessStaticFiles(directory=str(STATIC), html=True), name="console")
    api = APIRouter()

    @api.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/console/")

    @api.post("/sql")
    async def sql(request: Request) -> JSONResponse:
        """``{"sql": ..., "queryOptions": ...}`` answered by a live broker, as its ``/query/sql`` answers."""
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return error_response(415, "send the query as JSON (Content-Type: application/json)")
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
            return error_response(413, f"the request body must declare its length and be at most {MAX_BODY_BYTES} "
                                       "bytes")
        body: Any = await _json(request)
        brokers = await asyncio.to_thread(live_brokers, ctl.store)  # metadata reads: never on the event loop
        status, answer = await forward_query(
            brokers, body, request.headers.get("authorization"),
            timeout=ctl.config.console_query_timeout_seconds, verify=ctl.config.tls.client_verify())
        return JSONResponse(answer, status_code=status)

    return api


class _FramelessStaticFiles(StaticFiles):
    """The console's files, never shown inside another site's frame (clickjacking)."""

    async def get_response(self, path: str, scope: Any) -> Any:
        response = await super().get_response(path, scope)
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Content-Security-Policy"] = ("default-src 'self'; frame-ancestors 'none'; "
                                                       "object-src 'none'; base-uri 'none'")
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


async def _json(request: Request) -> Any:
    try:
        return await read_json(request)
    except ValueError:
        return None
