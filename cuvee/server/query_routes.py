"""``POST /query`` on a server: the broker's side of cuvee.protocol.query, mounted by the server's app.

The route reads the body itself (bounded), parses it strictly, and runs the executor on a worker thread so the
event loop keeps serving (a ``SELECT COUNT(*)`` of committed segments is answered at once from their row counts:
the hop costs more than the answer). Bad requests are HTTP 400 ``{"code", "error"}``; every query outcome, including SQL
errors and timeouts, is HTTP 200 with the Arrow answer and its statistics.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pyarrow as pa
from fastapi import APIRouter

from cuvee.node.fast_routes import HotAnswer, HotRoute, HotRouter, json_error

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
_ARROW = ARROW_STREAM_MEDIA_TYPE.encode()
# asyncio's own executor hop (anyio's, run_in_threadpool, added its limiter and cancel scope to every query), one
# for the process: in-process clusters start servers again and again; 40 queries at once, anyio's default limit
_WORKERS = ThreadPoolExecutor(max_workers=40, thread_name_prefix="query")


def query_router(registry: SegmentRegistry, *, executor: QueryExecutor | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, upserts: UpsertTables | None = None) -> APIRouter:
    """The server's query endpoint over ``registry`` (upsert tables read through ``upserts``' valid docs): a hot
    route (``cuvee.node.fast_routes``), every query crosses it."""
    run = executor or QueryExecutor(registry, upserts=upserts)

    async def query(body: bytes, _: dict[str, Any]) -> HotAnswer:
        try:
            parsed = ServerQueryRequest.decode(body)
        except QueryWireError as exc:
            return json_error(400, str(exc))
        answered = run.count_now(parsed)
        if answered is None:
            answered = await asyncio.get_running_loop().run_in_executor(_WORKERS, run.execute, parsed)
        result, stats = answered
        if stats.exceptions:
            log.info("query %s on %s: %s", parsed.request_id, parsed.table,
                     "; ".join(f"{e.error_code} {e.message}" for e in stats.exceptions))
        try:
            payload = encode_response(result, stats)
        except (QueryWireError, pa.ArrowException) as exc:  # a result Arrow IPC cannot carry: say so, keep serving
            failure = ServerException(int(QueryErrorCode.QUERY_EXECUTION), f"cannot send the result: {exc}")
            payload = encode_response(None, replace(stats, exceptions=(*stats.exceptions, failure)))
        return 200, payload, _ARROW

    router = HotRouter()
    router.add_hot_route("POST", SERVER_QUERY_PATH,
                         HotRoute(query, max_request_bytes, f"query request over {max_request_bytes} bytes"))
    return router
