"""The segment completion protocol: every message servers send the lead controller, and every answer.

Both sides import this one module (like Pinot's ``SegmentCompletionProtocol``), so a message or status cannot be
spelled two ways. Requests and responses are frozen dataclasses; ``to_dict``/``request_from_dict``/
``Response.from_dict`` convert them to and from the plain JSON dicts the HTTP layer sends, and bad input raises
ProtocolError naming the field, never a bare KeyError.

Offsets are stream offsets (ints): the offset a replica would consume next, i.e. the segment's end offset if it
commits now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from cuvee.errors import CuveeError
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.partitioning import SegmentPartitions

# Servers re-send segmentConsumed this often while told HOLD; the controller's waits are derived from it.
DEFAULT_HOLD_MS = 3_000


class ProtocolError(CuveeError, ValueError):
    """A protocol message (dict from JSON) is malformed: unknown type or status, missing or mistyped field."""


class RequestKind(Enum):
    """A server call; the value is the message type on the wire (and the HTTP path's last part)."""

    SEGMENT_CONSUMED = "segmentConsumed"
    SEGMENT_COMMIT_START = "segmentCommitStart"
    SEGMENT_COMMIT_END = "segmentCommitEnd"
    EXTEND_BUILD_TIME = "extendBuildTime"
    SEGMENT_STOPPED_CONSUMING = "segmentStoppedConsuming"


class ResponseStatus(Enum):
    """The controller's answer."""

    HOLD = "HOLD"  # wait, then send segmentConsumed again
    CATCH_UP = "CATCH_UP"  # consume up to the response's offset, then send segmentConsumed again
    COMMIT = "COMMIT"  # you are the committer: build, then segmentCommitStart
    KEEP = "KEEP"  # the committed segment ends at your offset: keep your copy
    DISCARD = "DISCARD"  # your copy differs from the committed one: drop it and download
    NOT_LEADER = "NOT_LEADER"  # ask the lead controller (response.leader_url, if known)
    FAILED = "FAILED"  # the request failed: go back to HOLDING and send segmentConsumed again
    COMMIT_CONTINUE = "COMMIT_CONTINUE"  # commitStart accepted: upload, then segmentCommitEnd
    COMMIT_SUCCESS = "COMMIT_SUCCESS"  # the segment is committed with your copy
    PROCESSED = "PROCESSED"  # extendBuildTime / segmentStoppedConsuming recorded


class StopReason(Enum):
    """Why a replica stopped consuming a segment and sent segmentConsumed."""

    ROW_LIMIT = "rowLimit"
    TIME_LIMIT = "timeLimit"
    END_OF_PARTITION_GROUP = "endOfPartitionGroup"
    FORCE_COMMIT = "forceCommit"
    MEMORY_LIMIT = "memoryLimit"  # the segment reached its share of the server's consuming-memory budget

    @property
    def decisive(self) -> bool:
        """Every replica stops at the same offset for this reason, so the first report may win right away."""
        return self in (StopReason.ROW_LIMIT, StopReason.END_OF_PARTITION_GROUP)


# ---- field readers: each names the field and the message on error ----

_E = TypeVar("_E", bound=Enum)


def _get(d: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in d:
        raise ProtocolError(f"{what}: missing field {key!r}")
    return d[key]


def _int(d: Mapping[str, Any], key: str, what: str, *, minimum: int | None = 0, optional: bool = False) -> Any:
    if optional and d.get(key) is None:
        return None
    value = _get(d, key, what)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"{what}: field {key!r} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ProtocolError(f"{what}: field {key!r} must be >= {minimum}, got {value}")
    return value


def _str(d: Mapping[str, Any], key: str, what: str, *, optional: bool = False, default: str | None = None) -> Any:
    if key not in d or d[key] is None:
        if optional:
            return default
        raise ProtocolError(f"{what}: missing field {key!r}")
    value = d[key]
    if not isinstance(value, str):
        raise ProtocolError(f"{what}: field {key!r} must be a string, got {value!r}")
    return value


def _partitions(d: Mapping[str, Any], what: str) -> SegmentPartitions | None:
    doc = d.get("partitionMetadata")
    if doc is None:
        return None
    found = SegmentPartitions.from_json(doc)
    if found is None:
        raise ProtocolError(f"{what}: field 'partitionMetadata' must describe a segment's partitions "
                            "(column, functionName, numPartitions, partitions)")
    return found


def _enum(cls: type[_E], d: Mapping[str, Any], key: str, what: str) -> _E:
    value = _get(d, key, what)
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise ProtocolError(f"{what}: field {key!r} has unknown value {value!r} (expected one of {allowed})") from None


def _segment(d: Mapping[str, Any], what: str) -> LLCSegmentName:
    text = _str(d, "segment", what)
    try:
        return LLCSegmentName.parse(text)
    except InvalidSegmentNameError as exc:
        raise ProtocolError(f"{what}: field 'segment': {exc}") from None


def _instance(d: Mapping[str, Any], what: str) -> str:
    value = _str(d, "instance", what)
    if not value:
        raise ProtocolError(f"{what}: field 'instance' must not be empty")
    return value


def _base(kind: RequestKind, segment: LLCSegmentName, instance: str, offset: int) -> dict[str, Any]:
    return {"type": kind.value, "segment": segment.name, "instance": instance, "offset": offset}


# ---- requests ----


@dataclass(frozen=True, slots=True)
class SegmentConsumed:
    """A replica reached the end criterion at ``offset`` after ``rows`` rows, and asks what to do.
    ``messages_lost`` > 0: stream retention removed that many of the segment's messages before this replica read
    them, so its copy is incomplete (the controller prefers a complete replica as committer)."""

    segment: LLCSegmentName
    instance: str
    offset: int
    rows: int
    reason: StopReason
    messages_lost: int = 0

    kind = RequestKind.SEGMENT_CONSUMED

    @property
    def lossy(self) -> bool:
        return self.messages_lost > 0

    def to_dict(self) -> dict[str, Any]:
        extra = {"rows": self.rows, "reason": self.reason.value, "messagesLost": self.messages_lost}
        return _base(self.kind, self.segment, self.instance, self.offset) | extra


@dataclass(frozen=True, slots=True)
class SegmentCommitStart:
    """The committer has built the segment ending at ``offset`` and asks to start committing it."""

    segment: LLCSegmentName
    instance: str
    offset: int

    kind = RequestKind.SEGMENT_COMMIT_START

    def to_dict(self) -> dict[str, Any]:
        return _base(self.kind, self.segment, self.instance, self.offset)


@dataclass(frozen=True, slots=True)
class SegmentCommitEnd:
    """The committer uploaded the segment (``location`` is its deep store URI, or "" if only peers hold it) and
    asks the controller to commit its metadata. The rest describes the built segment for its metadata node."""

    segment: LLCSegmentName
    instance: str
    offset: int
    location: str
    crc: int
    total_docs: int
    size_bytes: int
    build_time_ms: int = 0
    time_min: int | None = None
    time_max: int | None = None
    # the partitions of the built segment's rows when the table has a segmentPartitionConfig (wire:
    # ``partitionMetadata``); None: not partitioned, or a server that does not send them
    partitions: SegmentPartitions | None = None

    kind = RequestKind.SEGMENT_COMMIT_END

    def to_dict(self) -> dict[str, Any]:
        out = _base(self.kind, self.segment, self.instance, self.offset) | {
            "location": self.location,
            "crc": self.crc,
            "totalDocs": self.total_docs,
            "sizeBytes": self.size_bytes,
            "buildTimeMs": self.build_time_ms,
        }
        if self.time_min is not None:
            out["timeMin"] = self.time_min
        if self.time_max is not None:
            out["timeMax"] = self.time_max
        if self.partitions is not None:
            out["partitionMetadata"] = self.partitions.to_json()
        return out


@dataclass(frozen=True, slots=True)
class ExtendBuildTime:
    """The committer is still building: extend its lease to ``extra_seconds`` from now."""

    segment: LLCSegmentName
    instance: str
    offset: int
    extra_seconds: int

    kind = RequestKind.EXTEND_BUILD_TIME

    def to_dict(self) -> dict[str, Any]:
        return _base(self.kind, self.segment, self.instance, self.offset) | {"extraSeconds": self.extra_seconds}


@dataclass(frozen=True, slots=True)
class SegmentStoppedConsuming:
    """A replica gave up consuming the segment (a permanent error, described by ``reason``)."""

    segment: LLCSegmentName
    instance: str
    offset: int
    reason: str

    kind = RequestKind.SEGMENT_STOPPED_CONSUMING

    def to_dict(self) -> dict[str, Any]:
        return _base(self.kind, self.segment, self.instance, self.offset) | {"reason": self.reason}


Request = SegmentConsumed | SegmentCommitStart | SegmentCommitEnd | ExtendBuildTime | SegmentStoppedConsuming


def request_from_dict(d: Mapping[str, Any]) -> Request:
    """The request a JSON dict describes; raises ProtocolError on any malformed part."""
    if not isinstance(d, Mapping):
        raise ProtocolError(f"a completion request must be a JSON object, got {type(d).__name__}")
    kind = _enum(RequestKind, d, "type", "completion request")
    what = kind.value
    segment, instance, offset = _segment(d, what), _instance(d, what), _int(d, "offset", what)
    match kind:
        case RequestKind.SEGMENT_CONSUMED:
            rows, reason = _int(d, "rows", what), _enum(StopReason, d, "reason", what)
            lost = _int(d, "messagesLost", what, optional=True) or 0
            return SegmentConsumed(segment, instance, offset, rows, reason, lost)
        case RequestKind.SEGMENT_COMMIT_START:
            return SegmentCommitStart(segment, instance, offset)
        case RequestKind.SEGMENT_COMMIT_END:
            return SegmentCommitEnd(
                segment,
                instance,
                offset,
                location=_str(d, "location", what, optional=True, default=""),
                crc=_int(d, "crc", what, minimum=None),
                total_docs=_int(d, "totalDocs", what),
                size_bytes=_int(d, "sizeBytes", what),
                build_time_ms=_int(d, "buildTimeMs", what, optional=True) or 0,
                time_min=_int(d, "timeMin", what, minimum=None, optional=True),
                time_max=_int(d, "timeMax", what, minimum=None, optional=True),
                partitions=_partitions(d, what),
            )
        case RequestKind.EXTEND_BUILD_TIME:
            return ExtendBuildTime(segment, instance, offset, _int(d, "extraSeconds", what, minimum=1))
        case RequestKind.SEGMENT_STOPPED_CONSUMING:
            text = _str(d, "reason", what, optional=True, default="")
            return SegmentStoppedConsuming(segment, instance, offset, text)


# ---- response ----


@dataclass(frozen=True, slots=True)
class Response:
    """The controller's answer. ``offset``: for CATCH_UP the offset to reach; otherwise the offset the answer is
    about (the winning one for COMMIT/KEEP). ``build_time_seconds``: for COMMIT, the lease the committer has to
    build and commit before it must call extendBuildTime. ``leader_url``: for NOT_LEADER, the leader if known."""

    status: ResponseStatus
    offset: int | None = None
    build_time_seconds: int | None = None
    leader_url: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value}
        if self.offset is not None:
            out["offset"] = self.offset
        if self.build_time_seconds is not None:
            out["buildTimeSeconds"] = self.build_time_seconds
        if self.leader_url is not None:
            out["leaderUrl"] = self.leader_url
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Response:
        if not isinstance(d, Mapping):
            raise ProtocolError(f"a completion response must be a JSON object, got {type(d).__name__}")
        what = "completion response"
        status = _enum(ResponseStatus, d, "status", what)
        if status is ResponseStatus.CATCH_UP and d.get("offset") is None:
            raise ProtocolError(f"{what}: CATCH_UP needs field 'offset'")
        return cls(
            status,
            offset=_int(d, "offset", what, optional=True),
            build_time_seconds=_int(d, "buildTimeSeconds", what, optional=True),
            leader_url=_str(d, "leaderUrl", what, optional=True),
        )


def hold(offset: int | None = None) -> Response:
    return Response(ResponseStatus.HOLD, offset)


def failed() -> Response:
    return Response(ResponseStatus.FAILED)


def processed() -> Response:
    return Response(ResponseStatus.PROCESSED)


def not_leader(leader_url: str | None = None) -> Response:
    return Response(ResponseStatus.NOT_LEADER, leader_url=leader_url)
