"""Wire types shared by the controller and the servers: the segment completion protocol and LLC segment names."""

from cuvee.protocol.completion import (
    DEFAULT_HOLD_MS,
    ExtendBuildTime,
    ProtocolError,
    Request,
    RequestKind,
    Response,
    ResponseStatus,
    SegmentCommitEnd,
    SegmentCommitStart,
    SegmentConsumed,
    SegmentStoppedConsuming,
    StopReason,
    request_from_dict,
)
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

__all__ = [
    "DEFAULT_HOLD_MS",
    "ExtendBuildTime",
    "InvalidSegmentNameError",
    "LLCSegmentName",
    "ProtocolError",
    "Request",
    "RequestKind",
    "Response",
    "ResponseStatus",
    "SegmentCommitEnd",
    "SegmentCommitStart",
    "SegmentConsumed",
    "SegmentStoppedConsuming",
    "StopReason",
    "request_from_dict",
]
