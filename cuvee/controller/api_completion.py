"""The segment completion protocol endpoints (paths in ``cuvee.protocol.completion_http``).

POST bodies and answers are exactly ``cuvee.protocol.completion``'s dicts. A standby answers NOT_LEADER with the
current leader's URL; a malformed body is a 400.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body

from cuvee.controller.api_common import require_body
from cuvee.controller.errors import BadRequest
from cuvee.protocol.completion import ProtocolError, RequestKind, ResponseStatus, not_leader, request_from_dict
from cuvee.protocol.completion_http import COMPLETION_PATHS

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()
    for kind, path in COMPLETION_PATHS.items():
        api.add_api_route(path, _endpoint(ctl, kind), methods=["POST"], name=kind.value)
    return api


def _endpoint(ctl: Controller, kind: RequestKind) -> Any:
    def endpoint(body: Any = Body(None)) -> dict[str, Any]:
        doc = require_body(body)
        if not isinstance(doc, dict):
            raise BadRequest(f"{kind.value}: the body must be a JSON object")
        if doc.setdefault("type", kind.value) != kind.value:
            raise BadRequest(f"{kind.value}: body has type {doc['type']!r}; POST it to its own path")
        try:
            request = request_from_dict(doc)
        except ProtocolError as exc:
            raise BadRequest(str(exc)) from None
        if not ctl.is_leader:
            return not_leader(ctl.leader_url()).to_dict()
        response = ctl.completion.handle(request)
        if response.status is ResponseStatus.NOT_LEADER:
            response = not_leader(ctl.leader_url())
        return response.to_dict()

    return endpoint
