"""Scatter one query to its servers in parallel and gather what each answered, within the deadline.

Every server gets its request at once (an ``aiohttp.ClientSession``: this one hop of every query took ~2 ms of
CPU in ``httpx.AsyncClient`` against ~1 ms here, measured with py-spy on a process per role; the rest of Cuvee
speaks HTTP through httpx); each answer is awaited at most ``wait_seconds``.
A server that does not answer in time, cannot be reached, or answers something that is not the query contract
becomes an error in its ``ServerReply`` (Pinot's 427 for silence, 200 for a bad answer); the others are still
gathered, so the broker can merge what it has and say the result is partial.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass

import aiohttp
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
_IDLE_SECONDS = 2.0
DEFAULT_MAX_RESPONSE_BYTES = 512 * 1024 * 1024


class _TooLarge(Exception):
    """A server's answer passed ``max_bytes``; args[0] is the size known so far."""


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


def server_session(*, headers: dict[str, str], verify: ssl.SSLContext | bool, connect_timeout: float,
                   max_connections: int) -> aiohttp.ClientSession:
    """The broker's pool towards its servers (open it on the event loop that uses it; close it there)."""
    # idle connections are dropped after 2 s: a server (uvicorn) closes its side after 5, and a POST sent on a
    # connection it is closing fails (aiohttp's default keeps them 15 s)
    connector = aiohttp.TCPConnector(limit=max_connections, keepalive_timeout=_IDLE_SECONDS,
                                     ssl=verify if isinstance(verify, ssl.SSLContext) else (None if verify else False))
    return aiohttp.ClientSession(connector=connector, headers=headers, auto_decompress=False,
                                 timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout))


async def scatter(client: aiohttp.ClientSession, calls: list[ServerCall], wait_seconds: float, *,
                  max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> list[ServerReply]:
    """Ask every server in parallel; one reply per call, in call order. An answer over ``max_bytes`` is not read
    further (the broker's memory is bounded whatever a server sends)."""
    return list(await asyncio.gather(*(_ask(client, call, wait_seconds, max_bytes) for call in calls)))


async def _post(client: aiohttp.ClientSession, call: ServerCall, max_bytes: int) -> tuple[int, bytes]:
    """One server call, sent again once if the connection it went out on was closed under it (a kept-alive
    connection the server closed meanwhile; the query only reads, so asking twice is safe)."""
    for attempt in (1, 2):
        try:
            async with client.post(call.url + SERVER_QUERY_PATH, data=call.request.encode(),
                                   headers={"content-type": "application/json"}) as response:
                return response.status, await _body(response, max_bytes)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _body(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    length = response.content_length
    if length is not None:
        if length > max_bytes:
            raise _TooLarge(length)
        return await response.read()  # the usual case: one read of a known size
    body = bytearray()
    async for chunk in response.content.iter_chunked(1 << 20):
        body += chunk
        if len(body) > max_bytes:
            raise _TooLarge(len(body))
    return bytes(body)


async def _ask(client: aiohttp.ClientSession, call: ServerCall, wait_seconds: float, max_bytes: int) -> ServerReply:
    where = f"server {call.instance} ({call.url})"
    try:
        status, content = await asyncio.wait_for(_post(client, call, max_bytes), timeout=max(wait_seconds, 0.0))
    except _TooLarge as exc:
        return _failed(call, QueryErrorCode.QUERY_EXECUTION,
                       f"{where} answered more than max_server_response_bytes ({max_bytes:,} bytes; "
                       f"{exc.args[0]:,} or more): add filters, a LIMIT or an aggregation, or raise the bound")
    except TimeoutError:
        return _failed(call, QueryErrorCode.SERVER_NOT_RESPONDING,
                       f"{where} did not respond within {call.request.timeout_ms} ms")
    except aiohttp.ClientError as exc:
        return _failed(call, QueryErrorCode.SERVER_NOT_RESPONDING,
                       f"{where} could not be reached ({type(exc).__name__})")
    if status != 200:
        text = content[:_MAX_ERROR_TEXT].decode("utf-8", errors="replace")
        return _failed(call, QueryErrorCode.QUERY_EXECUTION, f"{where} answered HTTP {status}: {text}")
    try:
        table, stats = decode_response(content)
    except QueryWireError as exc:
        return _failed(call, QueryErrorCode.QUERY_EXECUTION, f"{where} sent an unreadable answer: {exc}")
    return ServerReply(call.instance, table, stats)


def _failed(call: ServerCall, code: QueryErrorCode, message: str) -> ServerReply:
    return ServerReply(call.instance, error=QueryError(code, message))

