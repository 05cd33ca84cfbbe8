"""The broker's scatter asks a server again, once, when the connection its call went out on is closed under it (a
kept-alive connection the server was closing: a review reproduced a 427 after ~5 s idle); twice is an error."""

from __future__ import annotations

import asyncio

from cuvee.broker.scatter import ServerCall, scatter, server_session
from cuvee.protocol.query import ServerQueryRequest, ServerQueryStats, encode_response
from cuvee.query import QueryErrorCode


async def _serve(closes: int) -> tuple[asyncio.AbstractServer, list[int]]:
    """A server that drops the first ``closes`` requests without answering, then answers every one."""
    seen: list[int] = []
    body = encode_response(None, ServerQueryStats(numSegmentsQueried=1))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
            if not head:
                break
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            seen.append(1)
            if len(seen) <= closes:
                writer.close()
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.apache.arrow.stream\r\n"
                         b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def test_a_call_whose_connection_closes_is_sent_once_more_and_a_second_close_is_427() -> None:
    async def scenario(closes: int) -> tuple[object, int]:
        server, seen = await _serve(closes)
        port = server.sockets[0].getsockname()[1]
        call = ServerCall("Server_x", f"http://127.0.0.1:{port}",
                          ServerQueryRequest("1", "t_OFFLINE", "SELECT 1", ("s",), 5000))
        async with server, server_session(headers={}, verify=True, connect_timeout=2, max_connections=4) as client:
            [reply] = await scatter(client, [call], 5)
        return reply, len(seen)

    reply, asked = asyncio.run(scenario(1))
    assert reply.error is None and reply.stats is not None and asked == 2
    reply, asked = asyncio.run(scenario(2))
    assert reply.error is not None and reply.error.code is QueryErrorCode.SERVER_NOT_RESPONDING and asked == 2


def test_an_answer_over_max_bytes_is_not_read_and_fails_that_server() -> None:
    """Known sizes are refused from the header; chunked answers as soon as they pass the bound."""
    body = encode_response(None, ServerQueryStats(numSegmentsQueried=1))

    async def scenario(chunked: bool, max_bytes: int) -> object:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            if chunked:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for _ in range(64):  # endless in spirit: 64 chunks of 64 KiB
                    writer.write(b"10000\r\n" + b"x" * 65536 + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        call = ServerCall("Server_x", f"http://127.0.0.1:{port}",
                          ServerQueryRequest("1", "t_OFFLINE", "SELECT 1", ("s",), 5000))
        async with server, server_session(headers={}, verify=True, connect_timeout=2, max_connections=4) as client:
            [reply] = await scatter(client, [call], 5, max_bytes=max_bytes)
        return reply

    small = asyncio.run(scenario(False, len(body)))
    assert small.error is None  # exactly the bound is fine
    for chunked, bound in ((False, len(body) - 1), (True, 1_000_000)):
        reply = asyncio.run(scenario(chunked, bound))
        assert reply.error is not None and reply.error.code is QueryErrorCode.QUERY_EXECUTION
        assert "max_server_response_bytes" in reply.error.message
