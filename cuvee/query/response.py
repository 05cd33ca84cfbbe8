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
import pyarrow.compute as pc

from cuvee.query.errors import QueryError


_FLAGS = ("numGroupsLimitReached", "groupsTrimmed")


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
    numSegmentsPrunedByBroker: int = 0  # noqa: N815 - left out of the routing by their partitions (the broker's)
    numSegmentsPrunedByServer: int = 0  # noqa: N815 - committed segments their metadata ruled out (cuvee.pruning)
    numGroupsLimitReached: bool = False  # noqa: N815 - a server dropped groups beyond numGroupsLimit
    groupsTrimmed: bool = False  # noqa: N815 - a server trimmed groups and the trim was not exact (Pinot 1.4)

    @staticmethod
    def combine(stats: Iterable[ExecutionStats]) -> ExecutionStats:
        """Sums, except freshness (the oldest consuming segment wins) and the group flags (any server's)."""
        items = list(stats)
        sums = {f.name: sum(getattr(s, f.name) for s in items) for f in fields(ExecutionStats)
                if f.name not in ("minConsumingFreshnessTimeMs", *_FLAGS)}
        fresh = [s.minConsumingFreshnessTimeMs for s in items if s.numConsumingSegmentsQueried > 0]
        flags = {flag: any(getattr(s, flag) for s in items) for flag in _FLAGS}
        return ExecutionStats(**sums, minConsumingFreshnessTimeMs=min(fresh) if fresh else 0, **flags)

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
    """One Python value as Pinot writes it (the fallback for the rare types not converted by whole column)."""
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


def _floats(array: pa.Array, type_name: str) -> list[Any]:
    """Floats with NaN and infinities as Jackson's strings; FLOAT rounded to its shortest float32 text."""
    doubles = array.cast(pa.float64())
    values = doubles
    if type_name == "FLOAT":  # Arrow writes float32 in its shortest round-trip form, as str(np.float32(x)) does
        values = pc.cast(array, pa.float32(), safe=False).cast(pa.string()).cast(pa.float64())
    out = values.to_pylist()
    raw = doubles.fill_null(0.0).to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(~np.isfinite(raw)).tolist():  # only the non-finite cells are touched one by one
        out[i] = "NaN" if math.isnan(raw[i]) else ("Infinity" if raw[i] > 0 else "-Infinity")
    return out


def _timestamps(array: pa.Array) -> list[Any]:
    """``format_timestamp`` for a whole column: UTC wall clock, microseconds, trailing zeros of the fraction dropped."""
    if pa.types.is_date(array.type):
        array = array.cast(pa.timestamp("s"))
    unit = array.type.unit
    wall = array.cast(pa.int64()).cast(pa.timestamp(unit))  # tz-aware: its UTC instant; naive: as written
    if unit == "ns":  # Python datetimes, which this used to go through, hold microseconds
        wall = pc.floor_temporal(wall, unit="microsecond")
    # Arrow's text for microseconds is "YYYY-MM-DD HH:MM:SS.ffffff"; drop the fraction's trailing zeros, keep one digit
    text = pc.utf8_rtrim(wall.cast(pa.timestamp("us")).cast(pa.string()), characters="0")
    text = pc.if_else(pc.ends_with(text, "."), pc.binary_join_element_wise(text, "0", ""), text)
    return text.to_pylist()


def _hex(array: pa.Array) -> list[Any]:
    """BYTES as lower-case hex: the whole data buffer hexed at once, offsets doubled."""
    if pa.types.is_fixed_size_binary(array.type):
        array = array.cast(pa.binary())
    array = array.cast(pa.large_binary())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset:array.offset + len(array) + 1]
    if len(offsets) == 0:
        return []
    start, end = int(offsets[0]), int(offsets[-1])
    data = array.buffers()[2]
    digits = (data[start:end].to_pybytes() if data is not None else b"").hex().encode()
    text = pa.LargeStringArray.from_buffers(len(array), pa.py_buffer(((offsets - start) * 2).astype(np.int64)),
                                            pa.py_buffer(digits))
    if array.null_count:
        text = pc.if_else(array.is_valid(), text, pa.scalar(None, pa.large_string()))
    return text.to_pylist()


def _lists(array: pa.ListArray | pa.LargeListArray, type_name: str) -> list[Any]:
    """Lists: the flattened elements converted as one column, then cut back into rows."""
    offsets = array.offsets.to_numpy(zero_copy_only=False)
    start = int(offsets[0]) if len(offsets) else 0
    end = int(offsets[-1]) if len(offsets) else 0
    elements = _values(array.values.slice(start, end - start), type_name.removesuffix("_ARRAY"))
    bounds = (offsets - start).tolist()
    valid = array.is_valid().to_pylist() if array.null_count else [True] * len(array)
    return [elements[a:b] if ok else None for a, b, ok in zip(bounds, bounds[1:], valid)]


def _values(array: pa.Array, type_name: str) -> list[Any]:
    """One Arrow array as JSON-ready Python values, converted by whole column where the type needs it."""
    kind = array.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _lists(array, type_name)
    if pa.types.is_floating(kind):
        return _floats(array, type_name)
    if pa.types.is_timestamp(kind) or pa.types.is_date(kind):
        return _timestamps(array)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind):
        return _hex(array)
    if (pa.types.is_integer(kind) or pa.types.is_boolean(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind) or pa.types.is_null(kind)):
        return array.to_pylist()  # already what JSON needs
    return [_json_value(v, type_name) for v in array.to_pylist()]  # decimals and rarer types, cell by cell


def _column(column: pa.ChunkedArray, type_name: str) -> list[Any]:
    values: list[Any] = []
    for chunk in column.chunks:
        values.extend(_values(chunk, type_name))
    return values


def result_table(table: pa.Table, column_names: Sequence[str] | None = None,
                 column_types: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``resultTable`` from an Arrow table; ``column_types`` overrides types by name (e.g. JSON columns).

    CPU-bound on large answers (whole columns are converted with Arrow compute, never cell by cell): call it off
    the event loop."""
    names = list(column_names) if column_names is not None else table.column_names
    if len(names) != table.num_columns:
        raise ValueError(f"{len(names)} column names for {table.num_columns} columns")
    overrides = column_types or {}
    types = [overrides.get(name) or pinot_type(column.type) for name, column in zip(names, table.columns)]
    columns = [_column(column, t) for column, t in zip(table.columns, types)]
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
        "groupsTrimmed": stats.groupsTrimmed,
        "timeUsedMs": time_used_ms,
        "requestId": request_id,
        "numServersQueried": num_servers_queried,
        "numServersResponded": num_servers_responded,
    })
    response.update({k: v for k, v in stats.to_json().items() if k not in _FLAGS})
    response["traceInfo"] = {}
    return response


def error_response(error: QueryError, *, request_id: str, time_used_ms: int) -> dict[str, Any]:
    """The answer to a query that failed before reaching any server (bad SQL, unknown table or column)."""
    return broker_response(request_id=request_id, time_used_ms=time_used_ms, exceptions=[error])
