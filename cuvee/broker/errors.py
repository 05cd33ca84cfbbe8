"""Errors that arrive as numeric Pinot codes over the wire from servers."""

from __future__ import annotations

from cuvee.query import QueryError, QueryErrorCode


def query_error(code: int, message: str) -> QueryError:
    """The error for a numeric code from a server; a code we do not know is reported as an execution error,
    keeping the server's code in the message so nothing is hidden."""
    try:
        return QueryError(QueryErrorCode(code), message)
    except ValueError:
        return QueryError(QueryErrorCode.QUERY_EXECUTION, f"(server error code {code}) {message}")
