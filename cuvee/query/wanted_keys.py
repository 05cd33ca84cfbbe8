"""A broker's second-round group keys (``cuvee.query.exact_trim``) as they travel to a server: JSON text, bounded.

The keys come from outside the server (any client can POST /query), so they are plain JSON: per key column
(``__g<i>``) a list of strings or nulls, at most ``MAX_WANTED_ROWS`` rows, and the request body itself bounded by the
server's request limit. Nothing is decompressed or decoded before the query runs (an Arrow IPC stream, which this
replaced, could hold zstd buffers: 22 KB of base64 unpacked to 512 MiB on the server's event loop).

The broker writes each value in a text form Arrow reads back exactly: numbers, decimals, dates and timestamps as
Arrow's cast to string writes them (shortest round-trip floats, ``nan``, ``inf``, ``-0``; timestamps with their
fraction and offset), binaries in base64, times and durations as their integer count of units. The server casts
them to the types of its own partial's key columns (``typed``) — the types the broker read them from — so NULL, NaN,
-0.0, timestamps, binaries and decimals match a group's key exactly as the keys did before they travelled.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from cuvee.errors import CuveeError
from cuvee.query.group_trim import WANTED_KEY

MAX_WANTED_ROWS = 50_000  # keys in one second-round request; more candidates: the server is asked untrimmed
# the encoded keys of one request: half a server's default request limit (cuvee.server.query_routes'
# DEFAULT_MAX_REQUEST_BYTES, 16 MiB), the other half left to the SQL and segment list; more: asked untrimmed
MAX_WANTED_BYTES = 8 << 20
MAX_WANTED_COLUMNS = 256  # a GROUP BY's keys


class WantedKeysError(CuveeError, ValueError):
    """Wanted keys that are malformed, or that do not fit the server's group keys (the message says which)."""


@dataclass(frozen=True)
class WantedKeys:
    """Group keys by column: ``columns`` maps ``__g<i>`` to its values (text, or None for NULL), all as long."""

    columns: Mapping[str, tuple[str | None, ...]]

    def __post_init__(self) -> None:
        if not 0 < len(self.columns) <= MAX_WANTED_COLUMNS:
            raise WantedKeysError(f"wanted keys: 1 to {MAX_WANTED_COLUMNS} key columns, got {len(self.columns)}")
        if not all(isinstance(n, str) and WANTED_KEY.fullmatch(n) for n in self.columns):
            raise WantedKeysError("wanted keys must name group key columns __g<i> only")
        lengths = {len(values) for values in self.columns.values()}
        if len(lengths) != 1:
            raise WantedKeysError("wanted keys: every key column must hold as many values")
        if lengths.pop() > MAX_WANTED_ROWS:
            raise WantedKeysError(f"wanted keys: at most {MAX_WANTED_ROWS} rows")

    @property
    def num_rows(self) -> int:
        return len(next(iter(self.columns.values())))

    def to_json(self) -> dict[str, list[str | None]]:
        return {name: list(values) for name, values in self.columns.items()}

    def encoded_bytes(self) -> int:
        return len(orjson.dumps(self.to_json()))

    @classmethod
    def from_json(cls, doc: Any) -> WantedKeys:
        if not isinstance(doc, dict):
            raise WantedKeysError("wanted keys must be a JSON object of key columns")
        for values in doc.values():
            if not isinstance(values, list) or not all(v is None or isinstance(v, str) for v in values):
                raise WantedKeysError("wanted keys: each key column must be a list of strings or nulls")
        columns = {name: tuple(values) for name, values in doc.items()}  # checked by __post_init__ before use
        return cls(columns)

    def typed(self, schema: pa.Schema) -> pa.Table:
        """The keys as a table whose columns have the types of ``schema``'s (a server's partial result)."""
        arrays = []
        for name, values in self.columns.items():
            index = schema.get_field_index(name)
            if index < 0:
                raise WantedKeysError(f"wanted keys: {name} is not a group key of this query")
            arrays.append(_read(name, values, schema.field(index).type))
        return pa.table(arrays, names=list(self.columns))


def encode(keys: pa.Table) -> WantedKeys:
    """``keys`` (columns ``__g<i>``) as wanted keys; WantedKeysError for a key type with no exact text form (a
    list, a struct: the broker then asks untrimmed)."""
    return WantedKeys({name: tuple(_written(name, keys.column(name))) for name in keys.column_names})


def _written(name: str, column: pa.ChunkedArray) -> list[str | None]:
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if _binary(kind):
        return [None if v is None else base64.b64encode(v).decode() for v in column.to_pylist()]
    try:
        if _counted(kind):
            column = column.cast(pa.int64())
        return column.cast(pa.string()).to_pylist()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        raise WantedKeysError(f"wanted keys: {name} of type {kind} has no text form") from None


def _read(name: str, values: tuple[str | None, ...], kind: pa.DataType) -> pa.Array:
    target = kind.value_type if pa.types.is_dictionary(kind) else kind
    if pa.types.is_null(target):  # a key NULL in every group (Arrow casts no text to it)
        if any(v is not None for v in values):
            raise WantedKeysError(f"wanted keys: a value of {name} is not null")
        return pa.nulls(len(values))
    try:
        if _binary(target):
            return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in values], target)
        text = pa.array(values, pa.string())
        return (text.cast(pa.int64()) if _counted(target) else text).cast(target)
    except (binascii.Error, ValueError, pa.ArrowException):
        raise WantedKeysError(f"wanted keys: a value of {name} is not a {target}") from None


def _binary(kind: pa.DataType) -> bool:
    return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)


def _counted(kind: pa.DataType) -> bool:
    """Types Arrow casts to text but not back: written as their integer count of units."""
    return pa.types.is_time(kind) or pa.types.is_duration(kind)
