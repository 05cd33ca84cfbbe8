"""The console's routes on the controller: its static files, and ``POST /sql`` (Pinot's controller spells it so).

The static files hold no data and are public, so a browser can load the login form; every call the page makes
goes through the auth layer with the credentials the user typed.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from cuvee.console.sql_proxy import forward_query, live_brokers

if TYPE_CHECKING:
    from fastapi import FastAPI

    from cuvee.controller.controller import Controller

STATIC = files("cuvee.console") / "static"


def console_router(ctl: Controller, app: FastAPI) -> APIRouter:
    """Mounts the static files on ``app`` and returns the routes that go beside them."""
    app.mount("/console", StaticFiles(directory=str(STATIC), html=True), name="console")
    api = APIRouter()

    @api.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/console/")

    @api.post("/sql")
    async def sql(request: Request) -> JSONResponse:
        """``{"sql": ..., "queryOptions": ...}`` answered by a live broker, as its ``/query/sql`` answers."""
        body: Any = await _json(request)
        status, answer = await forward_query(
            live_brokers(ctl.store), body, request.headers.get("authorization"),
            timeout=ctl.config.console_query_timeout_seconds, verify=ctl.config.tls.client_verify())
        return JSONResponse(answer, status_code=status)

    return api


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None
