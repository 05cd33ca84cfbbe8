"""Query errors carrying Pinot's numeric error codes.

Pinot clients (pinotdb, the Pinot UI, dashboards) branch on ``errorCode``, so every failure the broker reports
carries the code Pinot would have used, and a message that starts with Pinot's error name.
"""

from __future__ import annotations

import enum

from cuvee.errors import CuveeError


class QueryErrorCode(enum.IntEnum):
    """The subset of Pinot's ``QueryException`` codes that Cuvee produces."""

    SQL_PARSING = 150
    ACCESS_DENIED = 180
    TABLE_DOES_NOT_EXIST = 190
    QUERY_EXECUTION = 200
    SERVER_SEGMENT_MISSING = 235
    SERVER_TIMEOUT = 250
    BROKER_SEGMENT_UNAVAILABLE = 305
    BROKER_TIMEOUT = 400
    SERVER_NOT_RESPONDING = 427
    INTERNAL = 450
    MERGE_RESPONSE = 500
    QUERY_VALIDATION = 700
    UNKNOWN_COLUMN = 710

    @property
    def title(self) -> str:
        """Pinot's name for the error, the first line of its message."""
        return _TITLES[self]


_TITLES = {
    QueryErrorCode.SQL_PARSING: "SQLParsingError",
    QueryErrorCode.ACCESS_DENIED: "AccessDeniedError",
    QueryErrorCode.TABLE_DOES_NOT_EXIST: "TableDoesNotExistError",
    QueryErrorCode.QUERY_EXECUTION: "QueryExecutionError",
    QueryErrorCode.SERVER_SEGMENT_MISSING: "ServerSegmentMissingError",
    QueryErrorCode.SERVER_TIMEOUT: "ServerTimeoutError",
    QueryErrorCode.BROKER_SEGMENT_UNAVAILABLE: "BrokerSegmentUnavailableError",
    QueryErrorCode.BROKER_TIMEOUT: "BrokerTimeoutError",
    QueryErrorCode.SERVER_NOT_RESPONDING: "ServerNotRespondingError",
    QueryErrorCode.INTERNAL: "InternalError",
    QueryErrorCode.MERGE_RESPONSE: "MergeResponseError",
    QueryErrorCode.QUERY_VALIDATION: "QueryValidationError",
    QueryErrorCode.UNKNOWN_COLUMN: "UnknownColumnError",
}


class QueryError(CuveeError):
    """A query that cannot be answered; ``code`` is Pinot's error code, ``message`` the detail."""

    def __init__(self, code: QueryErrorCode, message: str) -> None:
        super().__init__(f"{code.title}: {message}")
        self.code = code
        self.message = message

    def to_json(self) -> dict[str, object]:
        """The entry of a broker response's ``exceptions`` list."""
        return {"errorCode": int(self.code), "message": f"{self.code.title}:\n{self.message}"}
