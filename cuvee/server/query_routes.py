"""``POST /query`` on a server: the broker's side of cuvee.protocol.query, mounted by the server's app.

The route reads the body itself (bounded), parses it strictly, and runs the executor on a worker thread so the
event loop keeps serving. Bad requests are HTTP 400 ``{"code", "error"}``; every query outcome, including SQL
errors and timeouts, is HTTP 200 with the Arrow answer and its statistics.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pyarrow as pa

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from cuvee.protocol.query import (
    ARROW_STREAM_MEDIA_TYPE,
    SERVER_QUERY_PATH,
    QueryWireError,
    ServerException,
    ServerQueryRequest,
    encode_response,
)
from cuvee.query import QueryErrorCode
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.registry import SegmentRegistry
from cuvee.upsert.table import UpsertTables

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 16 << 20


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "error": message}, status_code=status)


def query_router(registry: SegmentRegistry, *, executor: QueryExecutor | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, upserts: UpsertTables | None = None) -> APIRouter:
    """The server's query endpoint over ``registry`` (upsert tables read through ``upserts``' valid docs)."""
    run = executor or QueryExecutor(registry, upserts=upserts)
    router = APIRouter()

    async def query(request: Request) -> Response:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_request_bytes:
                return _error(413, f"query request over {max_request_bytes} bytes")
        try:
            parsed = ServerQueryRequest.decode(bytes(body))
        except QueryWireError as exc:
            return _error(400, str(exc))
        result, stats = await run_in_threadpool(run.execute, parsed)
        if stats.exceptions:
            log.info("query %s on %s: %s", parsed.request_id, parsed.table,
                     "; ".join(f"{e.error_code} {e.message}" for e in stats.exceptions))
        try:
            payload = encode_response(result, stats)
        except (QueryWireError, pa.ArrowException) as exc:  # a result Arrow IPC cannot carry: say so, keep serving
            failure = ServerException(int(QueryErrorCode.QUERY_EXECUTION), f"cannot send the result: {exc}")
            payload = encode_response(None, replace(stats, exceptions=(*stats.exceptions, failure)))
        return Response(payload, media_type=ARROW_STREAM_MEDIA_TYPE)

    # a plain Starlette route: FastAPI's dependency machinery cost every query ~0.3 ms and this route needs none
    router.routes.append(Route(SERVER_QUERY_PATH, query, methods=["POST"]))
    return router
