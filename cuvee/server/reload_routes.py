"""A table's reload on this server, and what the server serves of a segment.

``POST /tables/{table}/reload`` (the controller's ``POST /segments/{t}/reload`` records the table's served schema
version, then sends it to every server holding the table's segments): the table is served under that version from
now on (``ServedSchemas.refresh``: a column added since a segment was built answers its default value there, at
read time, see ``cuvee.evolution.serving``), and each of its consuming segments (those listed, or all) built
under a schema whose columns differ from the served ones in any way (a column added or removed, a data type,
single/multi-value or field type changed by a forced update: ``columns_differ``) is force-committed, as Pinot
reloads a consuming segment: its successor consumes under the current schema, so the new columns get their values
from the stream, and changed types decode as the schema now says, from then on. Every replica of a consuming
segment builds it under the version its record names, so all of them decide the same. Internal (the auth
policy's default for server routes).

``GET /tables/{table}/segments/{segment}/metadata``: the segment's metadata and each column as served: from the
segment, as its default value (``default``), or stored but no longer in the schema (``notServed``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from cuvee.evolution.compatibility import columns_differ
from cuvee.protocol.completion_http import SERVER_RELOAD, SERVER_SEGMENT_METADATA
from cuvee.server.consuming.fsm_types import ConsumerState
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.tables import TableNotFoundError

if TYPE_CHECKING:
    from cuvee.server.server import Server

log = logging.getLogger(__name__)

MAX_LISTED = 10_000


class ReloadBody(BaseModel):
    segments: list[str] = []  # none: every segment of the table held here
    jobId: str | None = None  # noqa: N815 - the controller's job, for the log


def reload_router(server: Server) -> APIRouter:
    api = APIRouter()

    @api.post(SERVER_RELOAD)
    def reload(table: str, body: ReloadBody) -> Any:
        if len(body.segments) > MAX_LISTED:
            return _error(400, f"at most {MAX_LISTED} segments a reload")
        try:
            served = server.schemas.refresh(table)
        except TableNotFoundError as exc:
            return _error(404, str(exc)[:512])
        held = {s.name: s for s in server.registry.segments(table)}
        names = [n for n in body.segments if n in held] if body.segments else sorted(held)
        committed = []
        for consuming in server.transitions.consuming(table):
            schema = getattr(consuming, "schema", None)
            differ = columns_differ(schema, served.schema) if consuming.name in names and schema is not None else []
            if not differ:
                continue
            state = getattr(consuming, "state", ConsumerState.CONSUMING)
            if state is not ConsumerState.CONSUMING and getattr(consuming, "force_requested", False):
                # force-committed already, for the same reason (the follower's pass saw the served version first)
                committed.append(consuming.name)
                continue
            if state is not ConsumerState.CONSUMING:  # its end is reached or fixed: its commit is under way
                log.info("reload %s: %s consumes under other columns than served (%s) and already ends (%s): its "
                         "successor is made under the served version", body.jobId, consuming.name,
                         ", ".join(differ[:10]), state.value)
                continue
            log.info("reload %s: %s consumes under other columns than served (%s): force-committed", body.jobId,
                     consuming.name, ", ".join(differ[:10]))
            consuming.force_commit()
            committed.append(consuming.name)
        log.info("reload %s of %s on %s: schema version %d, %d segment(s), force-committed %s", body.jobId, table,
                 server.instance_id, served.version, len(names), committed)
        return {"instanceId": server.instance_id, "schemaVersion": served.version, "segments": names,
                "notHeld": [n for n in body.segments if n not in held], "forceCommitted": committed}

    @api.get(SERVER_SEGMENT_METADATA)
    def segment_metadata(table: str, segment: str) -> Any:
        held = server.registry.get(table, segment)
        if held is None:
            return _error(404, f"segment {table[:256]}/{segment[:256]} is not held on {server.instance_id}")
        served = server.schemas.get(table)
        if isinstance(held, CommittedSegment):
            stored = {name: meta.data_type for name, meta in held.segment.metadata.columns.items()}
            doc: dict[str, Any] = {**held.segment.metadata.to_json(), "isConsuming": False,
                                   "sizeBytes": held.segment.size_bytes}
        else:
            schema = getattr(held.consuming, "schema", None) if isinstance(held, ConsumingView) else None
            stored = {f.name: f.data_type.value for f in schema.fields} if schema is not None else {}
            doc = {"segmentName": segment, "isConsuming": True, "totalDocs": held.num_docs}
        doc["instanceId"] = server.instance_id
        doc["schemaVersion"] = served.version if served is not None else None
        doc["servedColumns"] = (served.describe(stored) if served is not None else
                                [{"name": n, "storedDataType": t, "source": "segment"} for n, t in stored.items()])
        return doc

    return api


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "error": message}, status_code=status)
