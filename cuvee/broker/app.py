"""Pinot's broker HTTP API: ``POST /query/sql``, ``GET /query/sql?sql=``, ``POST /query`` (alias), ``GET /health``.

Query answers are always HTTP 200 with Pinot's JSON (errors in ``exceptions``), which is what pinotdb and
Pinot's UI expect. Only a request that is not a query at all gets an HTTP error, as JSON ``{"code", "error"}``:
a body that is not a JSON object (400) or one larger than the broker accepts (413, read no further).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from cuvee.auth.layer import principal_of
from cuvee.config import raw_table_name
from cuvee.metrics import metrics_router
from cuvee.node.fast_routes import FastRoutesApp, HotAnswer, HotRoute, HotRouter, json_error

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from cuvee.broker.broker import Broker


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "error": message}, status_code=status)


def encode(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)


_INLINE_ROWS = 100  # answers up to this many rows are encoded on the event loop (a thread hop costs more)
_JSON = b"application/json"


async def _json(doc: dict[str, Any]) -> Response:
    """Encoded on a worker thread when large: a large answer must not stall the event loop's other queries."""
    return Response(await _encoded(doc), media_type="application/json")


async def _encoded(doc: dict[str, Any]) -> bytes:
    if doc.get("numRowsResultSet", _INLINE_ROWS + 1) <= _INLINE_ROWS:
        return encode(doc)
    return await asyncio.to_thread(encode, doc)


def build_broker_app(broker: Broker) -> FastAPI:
    app = FastRoutesApp(title=f"cuvee broker {broker.instance_id}")
    limit = broker.config.max_body_bytes

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error", exc_info=exc)  # the details stay in the log: no exception text reaches a client
        return _error(500, "internal error; the broker log has the details")

    async def post_query(body: bytes, scope: dict[str, Any]) -> HotAnswer:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return json_error(400, f"the request body is not JSON: {exc}")
        if not isinstance(doc, dict):
            return json_error(400, "the request body must be a JSON object like {\"sql\": \"SELECT ...\"}")
        answer = await broker.handler.handle(doc.get("sql"), doc.get("queryOptions"), principal_of(scope))
        return 200, await _encoded(answer), _JSON

    app.include_router(metrics_router(  # series of tables that no longer exist go (labelled by raw name)
        broker.metrics.registry,
        lambda: broker.metrics.keep_tables({raw_table_name(name) for name in broker.view.snapshot.tables})))
    queries = HotRouter()  # every query crosses it: without FastAPI's layers (cuvee.node.fast_routes)
    for path in ("/query/sql", "/query"):
        queries.add_hot_route("POST", path, HotRoute(post_query, limit, f"request body over {limit} bytes; the broker "
                                                                     f"accepts SQL of at most "
                                                                     f"{broker.config.max_sql_bytes} bytes"))
    app.include_router(queries)

    @app.get("/query/sql")
    async def get_query(request: Request, sql: str | None = None,
                        queryOptions: str | None = None) -> Response:  # noqa: N803
        return await _json(await broker.handler.handle(sql, queryOptions, principal_of(request.scope)))

    @app.get("/health")
    def health() -> Response:
        if not broker.is_serving:
            return PlainTextResponse("broker is not serving yet", status_code=503)
        return PlainTextResponse("OK")

    @app.get("/debug/routingTable/{table}")
    def routing_table(table: str) -> Any:
        """Where this broker would send a query on ``table`` now (for operators and tests)."""
        return broker.routing_table(table)

    @app.get("/debug/timeBoundary/{table}")
    def time_boundary(table: str) -> Any:
        """A hybrid table's time boundary as this broker applies it (Pinot's broker endpoint); 404 if none."""
        found = broker.time_boundary(table)
        if found is None:
            return _error(404, f"table {table!r} is not a hybrid table with a time boundary")
        return found

    return app
