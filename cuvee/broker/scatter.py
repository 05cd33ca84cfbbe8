"""Scatter one query to its servers in parallel and gather what each answered, within the deadline.

Every server gets its request at once (``httpx.AsyncClient``); each answer is awaited at most ``wait_seconds``.
A server that does not answer in time, cannot be reached, or answers something that is not the query contract
becomes an error in its ``ServerReply`` (Pinot's 427 for silence, 200 for a bad answer); the others are still
gathered, so the broker can merge what it has and say the result is partial.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import pyarrow as pa

from cuvee.protocol.query import (
    SERVER_QUERY_PATH,
    QueryWireError,
    ServerQueryRequest,
    ServerQueryStats,
    decode_response,
)
from cuvee.query import QueryError, QueryErrorCode

_MAX_ERROR_TEXT = 500


@dataclass(frozen=True)
class ServerCall:
    instance: str
    url: str  # the server's base URL
    request: ServerQueryRequest


@dataclass(frozen=True)
class ServerReply:
    """One server's answer: a result and stats, or ``error`` when it gave none we can use."""

    instance: str
    table: pa.Table | None = None
    stats: ServerQueryStats | None = None
    error: QueryError | None = None

    @property
    def responded(self) -> bool:
        return self.stats is not None


async def scatter(client: httpx.AsyncClient, calls: list[ServerCall], wait_seconds: float) -> list[ServerReply]:
    """Ask every server in parallel; one reply per call, in call order."""
    return list(await asyncio.gather(*(_ask(client, call, wait_seconds) for call in calls)))


async def _ask(client: httpx.AsyncClient, call: ServerCall, wait_seconds: float) -> ServerReply:
    where = f"server {call.instance} ({call.url})"
    try:
        response = await asyncio.wait_for(
            client.post(call.url + SERVER_QUERY_PATH, content=call.request.encode(),
                        headers={"content-type": "application/json"}),
            timeout=max(wait_seconds, 0.0))
    except (TimeoutError, httpx.TimeoutException):
        return _failed(call, QueryErrorCode.SERVER_NOT_RESPONDING,
                       f"{where} did not respond within {call.request.timeout_ms} ms")
    except httpx.HTTPError as exc:
        return _failed(call, QueryErrorCode.SERVER_NOT_RESPONDING,
                       f"{where} could not be reached ({type(exc).__name__})")
    if response.status_code != 200:
        return _failed(call, QueryErrorCode.QUERY_EXECUTION,
                       f"{where} answered HTTP {response.status_code}: {response.text[:_MAX_ERROR_TEXT]}")
    try:
        table, stats = decode_response(response.content)
    except QueryWireError as exc:
        return _failed(call, QueryErrorCode.QUERY_EXECUTION, f"{where} sent an unreadable answer: {exc}")
    return ServerReply(call.instance, table, stats)


def _failed(call: ServerCall, code: QueryErrorCode, message: str) -> ServerReply:
    return ServerReply(call.instance, error=QueryError(code, message))

