"""``GET /tables/{table}/segments/{segment}/validDocIds``: what an upsert compaction may keep of a committed
segment served here (``TableUpsert.kept_docs``), with the CRC of the copy those docs belong to. Internal (the
auth policy's default for server routes): the compaction job asks every replica and compares their answers.

The docs travel as a serialised roaring bitmap (pyroaring's portable format, base64): a few bytes per run of
docs, so a segment of millions of docs answers in kilobytes.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pyroaring import BitMap

if TYPE_CHECKING:
    from cuvee.server.server import Server

VALID_DOC_IDS_PATH = "/tables/{table}/segments/{segment}/validDocIds"
BITMAP_FORMAT = "roaring-base64"


def compaction_router(server: Server) -> APIRouter:
    api = APIRouter()

    @api.get(VALID_DOC_IDS_PATH)
    def valid_doc_ids(table: str, segment: str) -> Any:
        state = server.upserts.known().get(table)
        if state is None:
            return _error(404, f"{table[:256]} has no upsert state on {server.instance_id}")
        found = state.kept_docs(segment)
        if found is None:
            return _error(404, f"{table[:256]}/{segment[:256]}: no committed copy tracked on {server.instance_id}")
        crc, total, kept, counts = found
        bits = BitMap(kept.astype("uint32").tolist())
        return {"segmentName": segment, "instanceId": server.instance_id, "crc": crc, "totalDocs": total,
                "keptDocs": len(bits), **counts, "format": BITMAP_FORMAT,
                "bitmap": base64.b64encode(bits.serialize()).decode("ascii")}

    return api


def decode_bitmap(text: str) -> list[int]:
    """The doc ids of a ``bitmap`` field."""
    return list(BitMap.deserialize(base64.b64decode(text)))


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"code": status, "error": message}, status_code=status)
