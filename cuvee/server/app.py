"""The server's HTTP API: health, peer download of committed segments, consumer status, force commit, bad records,
reload and segment metadata (``reload_routes``).

Query routes (``query_routes.query_router``) are mounted through ``extra_routers``. Errors are JSON
``{"code": <HTTP status>, "error": "<message>"}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from cuvee.metrics import metrics_router
from cuvee.node.fast_routes import FastRoutesApp
from cuvee.protocol.completion_http import SEGMENT_DOWNLOAD_PATH, SERVER_CONSUMING_SEGMENTS_INFO, SERVER_FORCE_COMMIT
from cuvee.server.compaction_routes import compaction_router
from cuvee.server.queryable import CommittedSegment
from cuvee.server.reload_routes import reload_router

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from cuvee.server.server import Server

CHUNK = 1 << 20


class ForceCommitBody(BaseModel):
    segments: list[str] = []


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "error": message}, status_code=status)


def build_server_app(server: Server, extra_routers: Sequence[APIRouter] = ()) -> FastAPI:
    app = FastRoutesApp(title=f"cuvee server {server.instance_id}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return _error(400, f"invalid request: {problems}")

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error", exc_info=exc)  # the details stay in the log: no exception text reaches a client
        return _error(500, "internal error; the server log has the details")

    @app.get("/health")
    def health() -> Any:
        if not server.is_serving:
            return _error(503, f"server {server.instance_id} is not serving")
        return {"status": "OK", "instanceId": server.instance_id}

    @app.get("/tables/{table}/segments")
    def held_segments(table: str) -> Any:
        """What this server serves for the table (for operators and tests)."""
        out = []
        for segment in server.registry.segments(table):
            item: dict[str, Any] = {"segmentName": segment.name, "isConsuming": segment.is_consuming,
                                    "numDocs": segment.num_docs}
            if isinstance(segment, CommittedSegment):
                item["crc"] = segment.crc
            out.append(item)
        return {"table": table, "segments": out, "currentState": {k: v.value for k, v in server.states.of(table).items()}}

    @app.get(SEGMENT_DOWNLOAD_PATH)
    def download_segment(table: str, segment: str) -> Any:
        with server.registry.acquire(table, [segment]) as acquired:
            held = acquired.segments[0] if acquired.segments else None
            if not isinstance(held, CommittedSegment):
                what = "is still consuming" if held is not None else "is not held"
                return _error(404, f"segment {table}/{segment} {what} on {server.instance_id}")
            archive = server.local.archive(table, held.segment)
            handle = open(archive, "rb")  # open while held: a later drop cannot pull the file from under us

        def chunks() -> Iterator[bytes]:
            with handle:
                while block := handle.read(CHUNK):
                    yield block

        headers = {"Content-Length": str(archive.stat().st_size)}
        return StreamingResponse(chunks(), media_type="application/octet-stream", headers=headers)

    @app.get(SERVER_CONSUMING_SEGMENTS_INFO)
    def consuming_info(table: str) -> Any:
        return {"segments": [c.info() for c in server.transitions.consuming(table)]}

    @app.post(SERVER_FORCE_COMMIT)
    def force_commit(table: str, body: ForceCommitBody) -> Any:
        consuming = {c.name: c for c in server.transitions.consuming(table)}
        names = body.segments or sorted(consuming)
        done = [name for name in names if name in consuming]
        for name in done:
            consuming[name].force_commit()
        return {"forceCommitted": done, "notConsuming": [n for n in names if n not in consuming]}

    @app.get("/tables/{table}/upsert")
    def upsert_state(table: str) -> Any:
        """An upsert table's key maps on this server: keys, bytes per key, valid docs per partition, and how many
        segments a restart preloaded from snapshots."""
        state = server.upserts.known().get(table)
        if state is None:
            return _error(404, f"{table[:256]} has no upsert state on {server.instance_id}")
        return {"table": table, **state.stats()}

    @app.get("/tables/{table}/badRecords")
    def bad_records(table: str) -> Any:
        out = []
        for consuming in server.transitions.consuming(table):
            info = consuming.info()
            out.append({"segmentName": consuming.name, "badRecords": info.get("badRecords", 0),
                        "recentBadRecords": info.get("recentBadRecords", [])})
        return {"segments": out}

    app.include_router(metrics_router(  # series of tables that no longer exist go
        server.metrics.registry, lambda: server.metrics.keep_tables(set(server.store.children(server.store.paths.tables)))))
    app.include_router(compaction_router(server))  # upsert compaction asks replicas for valid docs
    app.include_router(reload_router(server))  # a table reloaded under its current schema; a segment as served
    for router in extra_routers:
        app.include_router(router)
    return app
