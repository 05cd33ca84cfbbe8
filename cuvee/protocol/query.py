"""The broker ⇄ server query contract: one request per server per query, one Arrow answer.

``POST <server>/query`` with ``ServerQueryRequest.to_dict()`` as JSON. The server answers HTTP 200 with an Arrow
IPC stream (``application/vnd.apache.arrow.stream``): the partial result of ``sql`` over the listed segments,
and the execution statistics as JSON in the stream's schema metadata (key ``cuvee.stats``), so one body carries
both and no header size limit applies. A server that ran nothing (no segment held, or the query failed) sends a
stream whose schema has no fields; its statistics say why (``exceptions``, ``missingSegments``). A malformed
request gets HTTP 400 ``{"code": 400, "error": "..."}``.

Both sides parse strictly: a missing, mistyped or unknown field raises QueryWireError naming it.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import orjson
import pyarrow as pa

from cuvee.config.string_times import (MAX_MILLIS, MIN_MILLIS, StringTimes, in_range, render, render_literal,
                                       string_times)
from cuvee.errors import CuveeError
from cuvee.pruning.predicate import Predicate, PredicateWireError, from_json, to_json
from cuvee.query.wanted_keys import WantedKeys, WantedKeysError

SERVER_QUERY_PATH = "/query"
ARROW_STREAM_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
STATS_METADATA_KEY = b"cuvee.stats"


class QueryWireError(CuveeError, ValueError):
    """A query request or response does not follow this contract (the message names the field)."""


def _require(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in doc:
        raise QueryWireError(f"{what}: missing field {key!r}")
    value = doc[key]
    if isinstance(value, bool) and kind is not bool:
        raise QueryWireError(f"{what}: field {key!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise QueryWireError(f"{what}: field {key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", str: "a string", list: "a list", bool: "a boolean", dict: "an object"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _strings(doc: Mapping[str, Any], key: str, what: str) -> tuple[str, ...]:
    items = _require(doc, key, list, what)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise QueryWireError(f"{what}: {key}[{i}] must be a non-empty string, got {item!r}")
    return tuple(items)


def _optional_string(doc: Mapping[str, Any], key: str, what: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise QueryWireError(f"{what}: field {key!r} must be a string or null, got {value!r}")
    return value


def _no_unknown(doc: Mapping[str, Any], known: set[str], what: str) -> None:
    unknown = sorted(set(doc) - known)
    if unknown:
        raise QueryWireError(f"{what}: unknown field(s) {', '.join(map(repr, unknown))}")


TIME_FILTER_OPS = ("<=", ">")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class TimeFilter:
    """A hybrid table's half: only rows whose time ``column`` is ``<=`` (offline half) or ``>`` (realtime half)
    the time boundary ``value`` (epoch units of the column; TIMESTAMP columns in milliseconds). Structured, so a
    server builds the predicate itself and never runs SQL text it was not planned to run.

    ``format``: set for a column of formatted date strings (SIMPLE_DATE_FORMAT): its Java pattern, and ``value``
    is then epoch milliseconds; the server compares the strings with the boundary written in that pattern where
    the pattern sorts as time, else parses each value (``cuvee.config.string_times``). Sent only when set, so a
    filter on an epoch column reads as before on a server that predates the field."""

    column: str
    op: str
    value: int
    format: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise QueryWireError(f"time filter: column must be a non-empty string, got {self.column!r}")
        if self.op not in TIME_FILTER_OPS:
            raise QueryWireError(f"time filter: op must be one of {', '.join(TIME_FILTER_OPS)}, got {self.op!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, int) or not _INT64_MIN <= self.value <= _INT64_MAX:
            raise QueryWireError(f"time filter: value must be a 64-bit integer, got {self.value!r}")
        if self.format is not None:
            try:
                string_times(self.format)
            except ValueError as exc:
                raise QueryWireError(f"time filter: format: {exc}") from None
            if not in_range(self.value):
                raise QueryWireError(f"time filter: a date-string boundary must be epoch milliseconds from "
                                     f"{MIN_MILLIS} to {MAX_MILLIS} (years 0001 to 9999), got {self.value}")

    @property
    def string_times(self) -> StringTimes | None:
        """The column's date pattern, for a filter on formatted date strings."""
        return None if self.format is None else string_times(self.format)

    @property
    def stored_bound(self) -> int | str | None:
        """The boundary as the column's stored values compare with it (what segment min/max pruning can use):
        ``value`` for an epoch column, its text for a date pattern that sorts as time, None for one that does not."""
        times = self.string_times
        if times is None:
            return self.value
        return render(self.value, times.pattern) if times.sorts_as_time else None

    def text(self) -> str:
        """The filter as a reader would write it, the boundary in the column's own format (EXPLAIN shows it)."""
        times = self.string_times
        shown = str(self.value) if times is None else render_literal(self.value, times.pattern)
        return f"{self.column}{self.op}{shown}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"column": self.column, "op": self.op, "value": self.value}
        if self.format is not None:
            out["format"] = self.format
        return out

    @classmethod
    def from_dict(cls, doc: Any) -> TimeFilter:
        what = "time filter"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {"column", "op", "value", "format"}, what)
        return cls(_require(doc, "column", str, what), _require(doc, "op", str, what), _require(doc, "value", int, what),
                   _optional_string(doc, "format", what))


LOOKUP_RELATION = re.compile(r"cuvee_lookup_[1-9][0-9]{0,3}")  # cuvee.query.lookup.LOOKUP_PREFIX + n


@dataclass(frozen=True)
class DimLookup:
    """A dimension table the request's SQL reads (LOOKUP): the server registers the union of ``segments`` of
    ``table`` (every one the broker's routing knows; a server lacking one reports it) as ``relation``. ``schema``
    types the relation when there is no segment (sent only then, as an Arrow IPC schema)."""

    relation: str
    table: str
    segments: tuple[str, ...]
    schema: pa.Schema | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.relation, str) or not LOOKUP_RELATION.fullmatch(self.relation):
            raise QueryWireError(f"lookup: relation must be cuvee_lookup_<n>, got {self.relation!r}")
        if not isinstance(self.table, str) or not self.table:
            raise QueryWireError("lookup: table must be a non-empty string")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"relation": self.relation, "table": self.table, "segments": list(self.segments)}
        if self.schema is not None:
            out["schema"] = base64.b64encode(self.schema.serialize().to_pybytes()).decode()
        return out

    @classmethod
    def from_dict(cls, doc: Any) -> DimLookup:
        what = "lookup"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {"relation", "table", "segments", "schema"}, what)
        raw = _optional_string(doc, "schema", what)
        schema = None
        if raw is not None:
            try:
                schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw, validate=True)))
            except (binascii.Error, ValueError, pa.ArrowException) as exc:
                raise QueryWireError(f"{what}: schema is not a base64 Arrow schema ({exc})") from None
        return cls(_require(doc, "relation", str, what), _require(doc, "table", str, what),
                   _strings(doc, "segments", what), schema)


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
MAX_WIRE_INT = _INT32_MAX  # the largest value a request's integer fields carry


def _optional_int(doc: Mapping[str, Any], key: str, what: str, low: int) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _INT32_MAX:
        raise QueryWireError(f"{what}: field {key!r} must be an integer from {low} to {_INT32_MAX}, got {value!r}")
    return value


@dataclass(frozen=True)
class Colocation:
    """A colocated join's share (``cuvee.multistage.colocated_join``): the ``partitions`` this server answers
    for under one partition function; every listed segment of a table in ``columns`` (table -> its partition
    column) must hold rows of those partitions only, as its held copy's own metadata records. A copy that does
    not (one refreshed since the broker placed the join) makes the server refuse rather than join it against
    the wrong partitions' rows."""

    function: str
    num_partitions: int
    partitions: tuple[int, ...]
    columns: Mapping[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.function, str) or not self.function:
            raise QueryWireError("colocation: function must be a non-empty string")
        if not 1 <= self.num_partitions <= _INT32_MAX or len(self.partitions) > self.num_partitions or \
                any(not 0 <= p < self.num_partitions for p in self.partitions):
            raise QueryWireError("colocation: partitions must be distinct numbers below numPartitions")
        if not 1 <= len(self.columns) <= 2:
            raise QueryWireError("colocation: columns names one or two tables")

    def admits(self, table: str, held: Any) -> bool:
        """Whether a held segment of ``table`` whose recorded partitions are ``held`` (a ``SegmentPartitions``,
        None when unknown) belongs to this share."""
        return held is not None and table in self.columns and (held.column, held.function, held.num_partitions) \
            == (self.columns[table], self.function, self.num_partitions) and set(held.partitions) <= set(self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "numPartitions": self.num_partitions, "partitions": list(self.partitions),
                "columns": dict(self.columns)}

    @classmethod
    def from_dict(cls, doc: Any) -> Colocation:
        what = "colocation"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {"function", "numPartitions", "partitions", "columns"}, what)
        parts = doc.get("partitions")
        columns = doc.get("columns")
        if not isinstance(parts, list) or any(type(p) is not int for p in parts) or len(set(parts)) != len(parts):
            raise QueryWireError(f"{what}: partitions must be a list of distinct integers")
        if not isinstance(columns, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in columns.items()):
            raise QueryWireError(f"{what}: columns must map table names to column names")
        return cls(_require(doc, "function", str, what), _require(doc, "numPartitions", int, what), tuple(parts),
                   dict(columns))


@dataclass(frozen=True)
class GroupLimits:
    """A GROUP BY's bound on the groups a server sends back (``cuvee.query.group_trim``): ``order_sql`` (one SELECT
    over ``cuvee_groups``, the server's groups) ranks them; the server keeps the first ``numGroupsLimit`` and, when
    ``trim_rows`` (LIMIT + OFFSET) is set, the first max(5 × trim_rows, minServerGroupTrimSize). ``exact``: the
    ranking is by group keys, so a trim is not reported as ``groupsTrimmed``. The two sizes are the query's
    options; None: the server's configuration."""

    order_sql: str
    trim_rows: int | None = None
    exact: bool = False
    num_groups_limit: int | None = None
    min_trim_size: int | None = None
    # a broker's second round (``cuvee.query.exact_trim``): send exactly the groups whose keys are these rows
    # (columns ``__g<i>``), none cut; on the wire bounded JSON text (``cuvee.query.wanted_keys``), only when set
    wanted: WantedKeys | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.order_sql, str) or not self.order_sql:
            raise QueryWireError("group limits: orderSql must be a non-empty string")
        if self.wanted is not None and not isinstance(self.wanted, WantedKeys):
            raise QueryWireError("group limits: wanted must be group keys")
        if self.trim_rows is not None and self.trim_rows < 0:
            raise QueryWireError(f"group limits: trimRows must not be negative, got {self.trim_rows}")
        if self.num_groups_limit is not None and self.num_groups_limit < 1:
            raise QueryWireError(f"group limits: numGroupsLimit must be positive, got {self.num_groups_limit}")

    def to_dict(self) -> dict[str, Any]:
        out = {"orderSql": self.order_sql, "trimRows": self.trim_rows, "exact": self.exact,
               "numGroupsLimit": self.num_groups_limit, "minServerGroupTrimSize": self.min_trim_size}
        if self.wanted is not None:  # absent unless set: a server that predates it refuses it
            out["wanted"] = self.wanted.to_json()
        return out

    @classmethod
    def from_dict(cls, doc: Any) -> GroupLimits:
        what = "group limits"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {"orderSql", "trimRows", "exact", "numGroupsLimit", "minServerGroupTrimSize", "wanted"}, what)
        wanted = None
        if doc.get("wanted") is not None:
            try:
                wanted = WantedKeys.from_json(doc["wanted"])
            except WantedKeysError as exc:
                raise QueryWireError(f"{what}: {exc}") from None
        return cls(order_sql=_require(doc, "orderSql", str, what), wanted=wanted,
                   trim_rows=_optional_int(doc, "trimRows", what, 0),
                   exact=_require(doc, "exact", bool, what),
                   num_groups_limit=_optional_int(doc, "numGroupsLimit", what, 1),
                   min_trim_size=_optional_int(doc, "minServerGroupTrimSize", what, _INT32_MIN))


@dataclass(frozen=True)
class ServerQueryRequest:
    """What the broker asks one server: run ``sql`` (the planner's server step, over ``cuvee_segments``) on these
    segments of ``table`` (name with type) within ``timeout_ms``, over the rows ``time_filter`` keeps (a hybrid
    table's half; None: every row). Pinot's numDocsScanned (rows passing WHERE) is
    the sum of ``sql``'s column ``docs_column``, which the server drops from its answer, or else the count a second
    query ``docs_scanned_sql`` returns; with neither (no WHERE) it is the segments' total."""

    request_id: str
    table: str
    sql: str
    segments: tuple[str, ...]
    timeout_ms: int
    docs_scanned_sql: str | None = None
    docs_column: str | None = None
    time_filter: TimeFilter | None = None
    skip_upsert: bool = False  # queryOptions skipUpsert=true: an upsert table's every row, not only the latest
    lookups: tuple[DimLookup, ...] = ()  # the dimension tables ``sql`` reads (LOOKUP)
    groups: GroupLimits | None = None  # a GROUP BY's bound on the groups sent back; None: every group
    colocation: Colocation | None = None  # a colocated join's share: what its segments' copies must hold
    # a selection's rows by position (``QueryPlan.top_sql``): the server may run ``sql`` over those rows only
    top_sql: str | None = None
    # ``sql`` answers the query in one step (``QueryPlan.whole_sql``): numDocsScanned is this column's value, the
    # same on every row, which the server drops (the answer's last column); with no row, ``docs_scanned_sql`` counts
    docs_total_column: str | None = None
    # a selection's LIMIT plus OFFSET (``sql`` answers at most this many rows): an answer with fewer rows holds
    # every row passing WHERE, so numDocsScanned is their count and ``docs_scanned_sql`` is not run
    selection_limit: int | None = None
    # the selection has no ORDER BY: a server stops at ``selection_limit`` rows, and an answer that full reports
    # its rows as numDocsScanned (Pinot's early termination), instead of counting every row passing WHERE again
    stops_at_limit: bool = False
    # queryOptions enableNullHandling=true: a missing value reads as NULL; else as its column's default null value
    # (Pinot's answer without null handling: cuvee.query.null_defaults)
    null_handling: bool = False
    # what of WHERE segment metadata can rule out (``cuvee.pruning``): the server skips committed segments whose
    # stats, partitions or bloom filters prove no row passes; None: every segment is read
    prune_filter: Predicate | None = None

    def __post_init__(self) -> None:
        if not self.table or not self.sql:
            raise QueryWireError("server query request: table and sql must be non-empty")
        if self.selection_limit is not None and self.selection_limit < 0:
            raise QueryWireError(f"server query request: selectionLimit must be 0 or more, got "
                                 f"{self.selection_limit}")
        if self.timeout_ms <= 0:
            raise QueryWireError(f"server query request: timeoutMs must be positive, got {self.timeout_ms}")

    def to_dict(self) -> dict[str, Any]:
        return {"requestId": self.request_id, "table": self.table, "sql": self.sql, "segments": list(self.segments),
                "timeoutMs": self.timeout_ms, "docsScannedSql": self.docs_scanned_sql,
                "docsColumn": self.docs_column,
                "timeFilter": self.time_filter.to_dict() if self.time_filter is not None else None,
                **({"skipUpsert": True} if self.skip_upsert else {}),  # absent unless set: older servers refuse it
                **({"lookups": [lookup.to_dict() for lookup in self.lookups]} if self.lookups else {}),
                **({"groups": self.groups.to_dict()} if self.groups is not None else {}),
                **({"colocation": self.colocation.to_dict()} if self.colocation is not None else {}),
                **({"topSql": self.top_sql} if self.top_sql is not None else {}),
                **({"docsTotalColumn": self.docs_total_column} if self.docs_total_column is not None else {}),
                **({"selectionLimit": self.selection_limit} if self.selection_limit is not None else {}),
                **({"nullHandling": True} if self.null_handling else {}),
                **({"stopsAtLimit": True} if self.stops_at_limit else {}),
                **({"pruneFilter": to_json(self.prune_filter)} if self.prune_filter is not None else {})}

    @classmethod
    def from_dict(cls, doc: Any) -> ServerQueryRequest:
        what = "server query request"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {"requestId", "table", "sql", "segments", "timeoutMs", "docsScannedSql", "docsColumn",
                          "timeFilter", "skipUpsert", "lookups", "groups", "colocation", "topSql",
                          "docsTotalColumn", "selectionLimit", "nullHandling", "pruneFilter",
                          "stopsAtLimit"}, what)
        skip_upsert = doc.get("skipUpsert", False)
        if not isinstance(skip_upsert, bool):
            raise QueryWireError(f"{what}: skipUpsert must be a boolean")
        null_handling = doc.get("nullHandling", False)
        stops_at_limit = doc.get("stopsAtLimit", False)
        if not isinstance(stops_at_limit, bool):
            raise QueryWireError(f"{what}: stopsAtLimit must be a boolean")
        if not isinstance(null_handling, bool):
            raise QueryWireError(f"{what}: nullHandling must be a boolean")
        docs_sql = _optional_string(doc, "docsScannedSql", what)
        docs_column = _optional_string(doc, "docsColumn", what)
        raw_filter = doc.get("timeFilter")
        time_filter = TimeFilter.from_dict(raw_filter) if raw_filter is not None else None
        raw_lookups = doc.get("lookups", [])
        if not isinstance(raw_lookups, list):
            raise QueryWireError(f"{what}: lookups must be a list")
        lookups = tuple(DimLookup.from_dict(item) for item in raw_lookups)
        if len({lookup.relation for lookup in lookups}) != len(lookups):
            raise QueryWireError(f"{what}: lookups name a relation twice")
        raw_groups = doc.get("groups")
        groups = GroupLimits.from_dict(raw_groups) if raw_groups is not None else None
        raw_prune = doc.get("pruneFilter")
        try:
            prune_filter = from_json(raw_prune) if raw_prune is not None else None
        except PredicateWireError as exc:
            raise QueryWireError(f"{what}: {exc}") from None
        raw_colocation = doc.get("colocation")
        colocation = Colocation.from_dict(raw_colocation) if raw_colocation is not None else None
        return cls(request_id=_require(doc, "requestId", str, what), table=_require(doc, "table", str, what),
                   sql=_require(doc, "sql", str, what), segments=_strings(doc, "segments", what),
                   timeout_ms=_require(doc, "timeoutMs", int, what), docs_scanned_sql=docs_sql,
                   docs_column=docs_column, time_filter=time_filter, skip_upsert=skip_upsert, lookups=lookups,
                   groups=groups, colocation=colocation, top_sql=_optional_string(doc, "topSql", what),
                   docs_total_column=_optional_string(doc, "docsTotalColumn", what),
                   selection_limit=_optional_int(doc, "selectionLimit", what, 0), null_handling=null_handling,
                   prune_filter=prune_filter, stops_at_limit=stops_at_limit)

    def encode(self) -> bytes:
        return orjson.dumps(self.to_dict())

    @classmethod
    def decode(cls, body: bytes) -> ServerQueryRequest:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise QueryWireError(f"server query request: not JSON ({exc})") from None
        return cls.from_dict(doc)


@dataclass(frozen=True)
class ServerException:
    """One error a server reports: Pinot's numeric code and a message (without Pinot's title line)."""

    error_code: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"errorCode": self.error_code, "message": self.message}

    @classmethod
    def from_dict(cls, doc: Any) -> ServerException:
        what = "server query exception"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be an object, got {doc!r}")
        _no_unknown(doc, {"errorCode", "message"}, what)
        return cls(_require(doc, "errorCode", int, what), _require(doc, "message", str, what))


_COUNTS = ("numDocsScanned", "totalDocs", "numSegmentsQueried", "numSegmentsProcessed", "numSegmentsMatched",
           "numConsumingSegmentsQueried", "numConsumingSegmentsProcessed", "minConsumingFreshnessTimeMs",
           "timeUsedMs")
_FLAGS = ("numGroupsLimitReached", "groupsTrimmed")
_OPTIONAL_COUNTS = ("numSegmentsPrunedByServer",)  # sent only when not 0: a broker that predates them refuses them


@dataclass(frozen=True)
class ServerQueryStats:
    """Pinot's per-server execution statistics (field names are the JSON names).

    ``minConsumingFreshnessTimeMs`` is the oldest "last ingested" wall time among the consuming segments queried
    (0 when none was); ``missingSegments`` are the requested segments this server does not hold.
    """

    numDocsScanned: int = 0  # noqa: N815 - Pinot's JSON names
    totalDocs: int = 0  # noqa: N815
    numSegmentsQueried: int = 0  # noqa: N815
    numSegmentsProcessed: int = 0  # noqa: N815
    numSegmentsMatched: int = 0  # noqa: N815
    numConsumingSegmentsQueried: int = 0  # noqa: N815
    numConsumingSegmentsProcessed: int = 0  # noqa: N815
    minConsumingFreshnessTimeMs: int = 0  # noqa: N815
    timeUsedMs: int = 0  # noqa: N815
    missingSegments: tuple[str, ...] = ()  # noqa: N815
    exceptions: tuple[ServerException, ...] = field(default_factory=tuple)
    numGroupsLimitReached: bool = False  # noqa: N815 - groups beyond numGroupsLimit were dropped
    groupsTrimmed: bool = False  # noqa: N815 - groups beyond the trim size were dropped, and that may change the answer
    numSegmentsPrunedByServer: int = 0  # noqa: N815 - committed segments skipped by their metadata (``cuvee.pruning``)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        out["missingSegments"] = list(self.missingSegments)
        out["exceptions"] = [e.to_dict() for e in self.exceptions]
        for flag in _FLAGS:  # sent only when set: a broker that predates them refuses unknown fields
            if getattr(self, flag):
                out[flag] = True
        for name in _OPTIONAL_COUNTS:
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, doc: Any) -> ServerQueryStats:
        what = "server query stats"
        if not isinstance(doc, dict):
            raise QueryWireError(f"{what}: must be a JSON object, got {type(doc).__name__}")
        _no_unknown(doc, {f.name for f in fields(cls)}, what)
        counts = {name: _require(doc, name, int, what) for name in _COUNTS}
        optional = {name: _require(doc, name, bool, what) for name in _FLAGS if name in doc}
        optional.update({name: _require(doc, name, int, what) for name in _OPTIONAL_COUNTS if name in doc})
        raw_exceptions = _require(doc, "exceptions", list, what)
        return cls(**counts, **optional, missingSegments=_strings(doc, "missingSegments", what),
                   exceptions=tuple(ServerException.from_dict(e) for e in raw_exceptions))


def encode_response(result: pa.Table | None, stats: ServerQueryStats) -> bytes:
    """The HTTP body: ``result`` (None: no result) as an Arrow IPC stream with ``stats`` in its schema metadata."""
    table = result if result is not None else pa.schema([]).empty_table()
    if table.num_columns == 0 and result is not None:
        raise QueryWireError("a server query result must have at least one column")
    schema = table.schema.with_metadata({STATS_METADATA_KEY: orjson.dumps(stats.to_dict())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_response(body: bytes | pa.Buffer) -> tuple[pa.Table | None, ServerQueryStats]:
    """The partial result (None when the server ran nothing) and the statistics of one server's answer."""
    try:
        reader = pa.ipc.open_stream(body)
        table = reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise QueryWireError(f"server query response: not an Arrow IPC stream ({exc})") from None
    metadata = table.schema.metadata or {}
    raw = metadata.get(STATS_METADATA_KEY)
    if raw is None:
        raise QueryWireError(f"server query response: schema metadata lacks {STATS_METADATA_KEY.decode()!r}")
    try:
        stats = ServerQueryStats.from_dict(orjson.loads(raw))
    except orjson.JSONDecodeError as exc:
        raise QueryWireError(f"server query response: stats are not JSON ({exc})") from None
    if table.num_columns == 0:
        return None, stats
    return table.replace_schema_metadata(None), stats

