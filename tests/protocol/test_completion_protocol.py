"""Completion protocol messages: JSON round trips, and clear ProtocolErrors for malformed input."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.protocol.completion import (
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
from cuvee.protocol.segment_name import LLCSegmentName

SEG = LLCSegmentName.parse("events__6__0__20261121T1647Z")

segments = st.builds(
    LLCSegmentName.create,
    st.sampled_from(["events", "t1", "my_table"]),
    st.integers(0, 64),
    st.integers(0, 10_000),
    st.integers(0, 4_000_000_000_000),
)
instances = st.text(min_size=1, max_size=20)
offsets = st.integers(0, 2**62)
requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(SegmentConsumed, segments, instances, offsets, st.integers(0, 10**9), st.sampled_from(list(StopReason))),
    st.builds(SegmentCommitStart, segments, instances, offsets),
    st.builds(
        SegmentCommitEnd,
        segments,
        instances,
        offsets,
        location=st.text(max_size=40),
        crc=st.integers(-(2**31), 2**32),
        total_docs=st.integers(0, 10**9),
        size_bytes=st.integers(0, 10**12),
        build_time_ms=st.integers(0, 10**7),
        time_min=st.none() | st.integers(-(2**40), 2**40),
        time_max=st.none() | st.integers(-(2**40), 2**40),
    ),
    st.builds(ExtendBuildTime, segments, instances, offsets, st.integers(1, 3600)),
    st.builds(SegmentStoppedConsuming, segments, instances, offsets, st.text(max_size=40)),
)
responses = st.builds(
    Response,
    st.sampled_from([s for s in ResponseStatus if s is not ResponseStatus.CATCH_UP]),
    st.none() | offsets,
    st.none() | st.integers(0, 10**6),
    st.none() | st.text(max_size=30),
) | st.builds(Response, st.just(ResponseStatus.CATCH_UP), offsets)


@given(requests)
def test_request_round_trip_through_json(request: Request) -> None:
    wire = orjson.loads(orjson.dumps(request.to_dict()))
    assert wire["type"] == request.kind.value
    assert request_from_dict(wire) == request


@given(responses)
def test_response_round_trip_through_json(response: Response) -> None:
    assert Response.from_dict(orjson.loads(orjson.dumps(response.to_dict()))) == response


def test_wire_shape_of_consumed() -> None:
    request = SegmentConsumed(SEG, "Server_1", 4000, 1000, StopReason.ROW_LIMIT)
    assert request.to_dict() == {
        "type": "segmentConsumed",
        "segment": "events__6__0__20261121T1647Z",
        "instance": "Server_1",
        "offset": 4000,
        "rows": 1000,
        "reason": "rowLimit",
        "messagesLost": 0,
    }
    assert request.kind is RequestKind.SEGMENT_CONSUMED
    lossy = SegmentConsumed(SEG, "Server_1", 4000, 900, StopReason.ROW_LIMIT, messages_lost=100)
    assert lossy.lossy and request_from_dict(lossy.to_dict()) == lossy
    older = {k: v for k, v in request.to_dict().items() if k != "messagesLost"}  # a sender without the field
    assert request_from_dict(older) == request and not request.lossy


def test_wire_shape_of_responses() -> None:
    assert Response(ResponseStatus.CATCH_UP, 40).to_dict() == {"status": "CATCH_UP", "offset": 40}
    commit = Response(ResponseStatus.COMMIT, 40, build_time_seconds=127)
    assert commit.to_dict() == {"status": "COMMIT", "offset": 40, "buildTimeSeconds": 127}
    assert Response(ResponseStatus.NOT_LEADER, leader_url="http://c2").to_dict() == {
        "status": "NOT_LEADER",
        "leaderUrl": "http://c2",
    }


def test_commit_end_optional_fields_default() -> None:
    wire = {"type": "segmentCommitEnd", "segment": SEG.name, "instance": "s", "offset": 5, "crc": 1, "totalDocs": 5,
            "sizeBytes": 10}
    request = request_from_dict(wire)
    assert request == SegmentCommitEnd(SEG, "s", 5, "", 1, 5, 10, 0, None, None)


GOOD = SegmentConsumed(SEG, "s1", 10, 10, StopReason.TIME_LIMIT).to_dict()


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"type": "segmentUpload"}, "field 'type' has unknown value 'segmentUpload'"),
        ({"type": None}, "field 'type' has unknown value None"),
        ({"reason": "bored"}, "field 'reason' has unknown value 'bored'"),
        ({"offset": "10"}, "field 'offset' must be an integer"),
        ({"offset": True}, "field 'offset' must be an integer"),
        ({"offset": -1}, "field 'offset' must be >= 0"),
        ({"rows": 1.5}, "field 'rows' must be an integer"),
        ({"instance": ""}, "field 'instance' must not be empty"),
        ({"instance": 3}, "field 'instance' must be a string"),
        ({"segment": "events_1_2_3"}, "field 'segment': segment name 'events_1_2_3' must have 4 parts"),
    ],
)
def test_bad_request_fields_are_named(change: dict[str, object], fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment.replace("(", r"\(")):
        request_from_dict(GOOD | change)


@pytest.mark.parametrize("missing", ["type", "segment", "instance", "offset", "rows", "reason"])
def test_missing_request_field_is_named(missing: str) -> None:
    wire = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ProtocolError, match=f"missing field '{missing}'"):
        request_from_dict(wire)


def test_extend_needs_positive_seconds_and_commit_end_needs_crc() -> None:
    extend = ExtendBuildTime(SEG, "s", 1, 10).to_dict() | {"extraSeconds": 0}
    with pytest.raises(ProtocolError, match="'extraSeconds' must be >= 1"):
        request_from_dict(extend)
    end = SegmentCommitEnd(SEG, "s", 1, "", 1, 1, 1).to_dict()
    del end["crc"]
    with pytest.raises(ProtocolError, match="segmentCommitEnd: missing field 'crc'"):
        request_from_dict(end)


@pytest.mark.parametrize(
    ("wire", "fragment"),
    [
        ({"status": "MAYBE"}, "unknown value 'MAYBE'"),
        ({}, "missing field 'status'"),
        ({"status": "CATCH_UP"}, "CATCH_UP needs field 'offset'"),
        ({"status": "HOLD", "offset": "x"}, "'offset' must be an integer"),
        ({"status": "NOT_LEADER", "leaderUrl": 5}, "'leaderUrl' must be a string"),
    ],
)
def test_bad_responses(wire: dict[str, object], fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        Response.from_dict(wire)


def test_non_objects_are_refused() -> None:
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        request_from_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        Response.from_dict("HOLD")  # type: ignore[arg-type]


def test_decisive_stop_reasons() -> None:
    assert {r for r in StopReason if r.decisive} == {StopReason.ROW_LIMIT, StopReason.END_OF_PARTITION_GROUP}
