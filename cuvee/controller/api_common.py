"""Shared REST plumbing: every error is JSON ``{"code": <status>, "error": "<message>"}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cuvee.auth.layer import principal_of
from cuvee.auth.policy import Permission, job_decision
from cuvee.cluster.errors import ClusterStateError
from cuvee.cluster.paths import check_name
from cuvee.config import TableType
from cuvee.controller.errors import ApiError, BadRequest, Forbidden
from cuvee.errors import UserError
from cuvee.spi.metastore import MetadataStoreError

log = logging.getLogger(__name__)


def error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"code": status, "error": message, **extra}, status_code=status)


def readable(request: Request, names: list[str]) -> list[str]:
    """The ``names`` (tables, or schemas named as their tables) the caller may READ: all of them when auth is off,
    for an admin or the cluster's own roles; else those the principal's table list holds."""
    principal = principal_of(request.scope)
    if principal is None or principal.internal:
        return names
    return [name for name in names if principal.may(Permission.READ, name)]


def readable_job(request: Request, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` if the caller may READ its table (the job-status routes' ``Need.JOB``), else 403."""
    decision = job_decision(principal_of(request.scope), str(job.get("tableName") or ""))
    if not decision.allowed:
        raise Forbidden(decision.reason)
    return job


def table_type_param(value: str | None, default: TableType | None = None) -> TableType | None:
    """Pinot's ``type`` query parameter (OFFLINE or REALTIME, any case); ``default`` when not given."""
    if value is None:
        return default
    try:
        return TableType(value.upper())
    except ValueError:
        raise BadRequest(f"type must be OFFLINE or REALTIME, got {value[:32]!r}") from None


def segment_param(name: str) -> str:
    """A segment name from a path (400 when it could not be one)."""
    try:
        return check_name("segment", name)
    except UserError as exc:
        raise BadRequest(str(exc)) from None


def require_body(body: Any) -> Any:
    if body is None:
        raise BadRequest("a JSON request body is required")
    return body


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(UserError)
    async def _user(_: Request, exc: UserError) -> JSONResponse:
        return error_response(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return error_response(400, f"bad request: {details}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(MetadataStoreError)
    async def _store(_: Request, exc: MetadataStoreError) -> JSONResponse:
        log.warning("metadata store failure: %s", exc)
        return error_response(503, "metadata store unavailable; retry later (the controller log has the details)")

    @app.exception_handler(ClusterStateError)
    async def _cluster(_: Request, exc: ClusterStateError) -> JSONResponse:
        return error_response(409, str(exc))

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error", exc_info=exc)
        return error_response(500, "internal error; the controller log has the details")
