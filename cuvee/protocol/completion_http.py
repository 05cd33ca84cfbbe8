"""HTTP paths of the segment completion protocol (servers -> lead controller) and of the two server endpoints the
controller calls. Both sides import these constants, so a path cannot be spelled two ways.

Every completion call is ``POST <controller><path>`` with the request's ``to_dict()`` as the JSON body; the answer
is ``Response.to_dict()`` (HTTP 200, also for NOT_LEADER and FAILED). A malformed body gets HTTP 400 with
``{"code": 400, "error": "..."}``.
"""

from __future__ import annotations

from cuvee.protocol.completion import RequestKind

SEGMENT_CONSUMED = "/segmentConsumed"
SEGMENT_COMMIT_START = "/segmentCommitStart"
SEGMENT_COMMIT_END = "/segmentCommitEnd"
EXTEND_BUILD_TIME = "/extendBuildTime"
SEGMENT_STOPPED_CONSUMING = "/segmentStoppedConsuming"

COMPLETION_PATHS: dict[RequestKind, str] = {
    RequestKind.SEGMENT_CONSUMED: SEGMENT_CONSUMED,
    RequestKind.SEGMENT_COMMIT_START: SEGMENT_COMMIT_START,
    RequestKind.SEGMENT_COMMIT_END: SEGMENT_COMMIT_END,
    RequestKind.EXTEND_BUILD_TIME: EXTEND_BUILD_TIME,
    RequestKind.SEGMENT_STOPPED_CONSUMING: SEGMENT_STOPPED_CONSUMING,
}

# Served by every server; ``{table}`` is the name with type (``events_REALTIME``).
SERVER_CONSUMING_SEGMENTS_INFO = "/tables/{table}/consumingSegmentsInfo"
"""GET -> ``{"segments": [{"segmentName", "consumerState", "currentOffset", "partition", "lastConsumedTimestampMs"}]}``"""
SERVER_FORCE_COMMIT = "/tables/{table}/forceCommit"
"""POST ``{"segments": [names]}``: end those consuming segments with reason forceCommit and run the protocol."""
SERVER_RELOAD = "/tables/{table}/reload"
"""POST ``{"segments": [names] (none: all), "jobId"}``: serve the table under its current schema (see
``cuvee.server.reload_routes``) -> ``{"instanceId", "schemaVersion", "segments", "notHeld", "forceCommitted"}``."""
SERVER_SEGMENT_METADATA = "/tables/{table}/segments/{segment}/metadata"
"""GET -> a segment's metadata and its columns as served (``servedColumns``)."""

# The port name under which servers register their HTTP port in InstanceInfo.ports.
HTTP_PORT_NAME = "http"

# Server: a committed segment's archive, for peers (deep-store bypass) and the controller's repair upload.
SEGMENT_DOWNLOAD_PATH = "/tables/{table}/segments/{segment}"


def completion_path(kind: RequestKind) -> str:
    """The path a request of ``kind`` is POSTed to."""
    return COMPLETION_PATHS[kind]
