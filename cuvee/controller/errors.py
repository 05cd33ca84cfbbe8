"""Errors the controller's operations raise; each carries the HTTP status the REST layer answers with.

The REST answer is always ``{"code": <status>, "error": "<message>"}`` (plus ``issues`` for invalid configs and
``leaderUrl`` for NOT_LEADER), see ``api_common``.
"""

from __future__ import annotations

from typing import Any

from cuvee.config.errors import ConfigValidationError
from cuvee.errors import CuveeError


class ApiError(CuveeError):
    status = 500

    def __init__(self, message: str, *, extra: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        return {"code": self.status, "error": self.message, **self.extra}


class BadRequest(ApiError):
    status = 400

    @classmethod
    def invalid(cls, exc: ConfigValidationError) -> BadRequest:
        """Every validation issue listed, in the message and as ``issues``."""
        return cls(str(exc), extra={"issues": exc.to_json()})


class Forbidden(ApiError):
    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class BadGateway(ApiError):
    """A server or the stream the controller had to ask failed."""

    status = 502


class NotLeader(ApiError):
    """A leader-only write reached a standby controller."""

    status = 503

    def __init__(self, leader_url: str | None):
        where = f"; the leader is {leader_url}" if leader_url else "; no leader is elected right now"
        super().__init__(f"this controller is not the leader{where}", extra={"leaderUrl": leader_url})
