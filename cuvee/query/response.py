"""Pinot's broker response JSON, built from an Arrow result and the servers' execution statistics.

pinotdb reads ``resultTable.dataSchema.columnNames`` / ``columnDataTypes`` and ``resultTable.rows``, raises on any
entry of ``exceptions``, and checks ``numServersQueried`` against ``numServersResponded``; it parses TIMESTAMP
values as ISO strings and JSON values as JSON text. Values are therefore written the way Pinot writes them:
TIMESTAMP as Java's ``Timestamp.toString()`` (``2026-11-21 16:47:00.0``), BYTES as hex, BIG_DECIMAL as a string,
NaN and infinities as the strings Jackson writes, FLOAT with float32 precision (``0.1``, not ``0.100000001``).
On error Pinot omits ``resultTable``; so do we.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.query.errors import QueryError


@dataclass(frozen=True)
class ExecutionStats:
    """What servers report about one query; the broker adds them up across servers."""

    numDocsScanned: int = 0  # noqa: N815 - Pinot's JSON field names
    totalDocs: int = 0  # noqa: N815
    numEntriesScannedInFilter: int = 0  # noqa: N815
    numEntriesScannedPostFilter: int = 0  # noqa: N815
    numSegmentsQueried: int = 0  # noqa: N815
    numSegmentsProcessed: int = 0  # noqa: N815
    numSegmentsMatched: int = 0  # noqa: N815
    numConsumingSegmentsQueried: int = 0  # noqa: N815
    minConsumingFreshnessTimeMs: int = 0  # noqa: N815 - 0 when no consuming segment was queried, as in Pinot
    numGroupsLimitReached: bool = False  # noqa: N815

    @staticmethod
    def combine(stats: Iterable[ExecutionStats]) -> ExecutionStats:
        """Sums, except freshness (the oldest consuming segment wins) and the groups-limit flag (any)."""
        items = list(stats)
        sums = {f.name: sum(getattr(s, f.name) for s in items) for f in fields(ExecutionStats)
                if f.name not in ("minConsumingFreshnessTimeMs", "numGroupsLimitReached")}
        fresh = [s.minConsumingFreshnessTimeMs for s in items if s.numConsumingSegmentsQueried > 0]
        return ExecutionStats(**sums, minConsumingFreshnessTimeMs=min(fresh) if fresh else 0,
                              numGroupsLimitReached=any(s.numGroupsLimitReached for s in items))

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def pinot_type(arrow_type: pa.DataType) -> str:
    """Pinot's ``columnDataTypes`` name for an Arrow type (lists become ``<TYPE>_ARRAY``)."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return f"{pinot_type(arrow_type.value_type)}_ARRAY"
    if pa.types.is_boolean(arrow_type):
        return "BOOLEAN"
    if pa.types.is_int64(arrow_type) or pa.types.is_uint32(arrow_type) or pa.types.is_uint64(arrow_type):
        return "LONG"
    if pa.types.is_integer(arrow_type):
        return "INT"
    if pa.types.is_float16(arrow_type) or pa.types.is_float32(arrow_type):
        return "FLOAT"
    if pa.types.is_float64(arrow_type):
        return "DOUBLE"
    if pa.types.is_decimal(arrow_type):
        return "BIG_DECIMAL"
    if pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type):
        return "TIMESTAMP"
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) or pa.types.is_fixed_size_binary(
            arrow_type):
        return "BYTES"
    return "STRING"


def format_timestamp(value: dt.datetime | dt.date) -> str:
    """Java's ``java.sql.Timestamp.toString()``: at least one fractional digit, trailing zeros dropped."""
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    fraction = f"{value.microsecond:06d}".rstrip("0") or "0"
    return f"{value:%Y-%m-%d %H:%M:%S}.{fraction}"


def _json_value(value: Any, type_name: str) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        element = type_name.removesuffix("_ARRAY")
        return [_json_value(v, element) for v in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return float(str(np.float32(value))) if type_name == "FLOAT" else value
    if isinstance(value, (dt.datetime, dt.date)):
        return format_timestamp(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def result_table(table: pa.Table, column_names: Sequence[str] | None = None,
                 column_types: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``resultTable`` from an Arrow table; ``column_types`` overrides types by name (e.g. JSON columns)."""
    names = list(column_names) if column_names is not None else table.column_names
    if len(names) != table.num_columns:
        raise ValueError(f"{len(names)} column names for {table.num_columns} columns")
    overrides = column_types or {}
    types = [overrides.get(name) or pinot_type(column.type) for name, column in zip(names, table.columns)]
    columns = [[_json_value(v, t) for v in column.to_pylist()] for column, t in zip(table.columns, types)]
    rows = [list(row) for row in zip(*columns)] if columns else []
    return {"dataSchema": {"columnNames": names, "columnDataTypes": types}, "rows": rows}


def broker_response(*, request_id: str, time_used_ms: int, table: pa.Table | None = None,
                    column_names: Sequence[str] | None = None, column_types: Mapping[str, str] | None = None,
                    stats: ExecutionStats | None = None, num_servers_queried: int = 0,
                    num_servers_responded: int = 0, exceptions: Sequence[QueryError] = ()) -> dict[str, Any]:
    """The whole ``POST /query/sql`` answer. ``partialResult`` is true when a server did not answer or failed."""
    stats = stats or ExecutionStats()
    response: dict[str, Any] = {}
    if table is not None:
        response["resultTable"] = result_table(table, column_names, column_types)
    partial = (bool(exceptions) and table is not None) or num_servers_responded < num_servers_queried
    response.update({
        "numRowsResultSet": table.num_rows if table is not None else 0,
        "partialResult": partial,
        "exceptions": [e.to_json() for e in exceptions],
        "numGroupsLimitReached": stats.numGroupsLimitReached,
        "timeUsedMs": time_used_ms,
        "requestId": request_id,
        "numServersQueried": num_servers_queried,
        "numServersResponded": num_servers_responded,
    })
    response.update({k: v for k, v in stats.to_json().items() if k != "numGroupsLimitReached"})
    response["traceInfo"] = {}
    return response


def error_response(error: QueryError, *, request_id: str, time_used_ms: int) -> dict[str, Any]:
    """The answer to a query that failed before reaching any server (bad SQL, unknown table or column)."""
    return broker_response(request_id=request_id, time_used_ms=time_used_ms, exceptions=[error])
