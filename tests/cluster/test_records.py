from __future__ import annotations

import pytest

from cuvee.cluster.records import (
    CurrentState,
    ExternalView,
    IdealState,
    InstanceInfo,
    RecordFormatError,
    SegmentRecord,
    SegmentState,
    SegmentStatus,
)

C, O = SegmentState.CONSUMING, SegmentState.ONLINE


def _segment() -> SegmentRecord:
    return SegmentRecord(
        segment_name="events__1__0__20261121T1647Z",
        status=SegmentStatus.IN_PROGRESS,
        creation_time_ms=1_700_000_000_000,
        partition=1,
        sequence=0,
        start_offset=42,
        row_threshold=5000,
        time_threshold_ms=3_600_000,
    )


@pytest.mark.parametrize(
    "record",
    [
        InstanceInfo("Server_a_1", "10.0.0.1", {"http": 8098, "query": 8099}, ("DefaultTenant_REALTIME",)),
        _segment(),
        _segment().committed(
            end_offset=99, total_docs=57, size_bytes=1234, crc=77, download_uri="file:///d/s", now_ms=5,
            time_min=1, time_max=9,
        ),
        IdealState("events_REALTIME", {"s0": {"a": C, "b": C}, "s1": {"a": O}}, paused=True),
        CurrentState("a", "events_REALTIME", {"s0": C, "s1": SegmentState.ERROR}),
        ExternalView("events_REALTIME", {"s0": {"a": C, "b": SegmentState.ERROR}}),
    ],
)
def test_round_trip_through_bytes(record: object) -> None:
    cls = type(record)
    data = record.encode()  # type: ignore[attr-defined]
    assert cls.decode(data) == record  # type: ignore[attr-defined]
    assert cls.decode(data).encode() == data  # type: ignore[attr-defined]


def test_encoding_is_deterministic_whatever_the_insertion_order() -> None:
    a = IdealState("t", {"s1": {"b": C, "a": C}, "s0": {"a": O}})
    b = IdealState("t", {"s0": {"a": O}, "s1": {"a": C, "b": C}})
    assert a.encode() == b.encode()


def test_committed_marks_done_and_keeps_the_start() -> None:
    done = _segment().committed(
        end_offset=142, total_docs=100, size_bytes=9, crc=3, download_uri="", now_ms=7
    )
    assert done.status is SegmentStatus.DONE and not done.is_consuming
    assert (done.start_offset, done.end_offset, done.commit_time_ms, done.download_uri) == (42, 142, 7, "")
    assert _segment().is_consuming


def test_ideal_state_helpers_return_new_records() -> None:
    ideal = IdealState("t", {"s0": {"b": C, "a": C}, "s1": {"a": O}})
    updated = ideal.with_segments_in("s2", ["c", "a"], C)
    assert "s2" not in ideal.segments
    assert updated.instances_of("s2") == ("a", "c")
    assert updated.consuming_counts() == {"a": 2, "b": 1, "c": 1}
    assert updated.segments_in(O) == ["s1"]
    assert updated.without_segment("s0").segments.keys() == {"s1", "s2"}


def test_ideal_state_cannot_target_error() -> None:
    with pytest.raises(ValueError, match="ERROR"):
        IdealState("t", {"s0": {"a": SegmentState.ERROR}})
    with pytest.raises(RecordFormatError, match="ERROR"):
        IdealState.decode(b'{"table": "t", "segments": {"s0": {"a": "ERROR"}}}')


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (SegmentRecord, b"{not json", "segment metadata: stored data is not JSON"),
        (SegmentRecord, b"[1, 2]", "segment metadata: expected a JSON object, got list"),
        (SegmentRecord, b'{"status": "DONE", "creationTimeMs": 1}', "field 'segmentName' is missing"),
        (SegmentRecord, b'{"segmentName": "s", "status": "LIVE", "creationTimeMs": 1}', "'LIVE', expected one of"),
        (SegmentRecord, b'{"segmentName": "s", "status": "DONE", "creationTimeMs": "x"}', "must be an integer"),
        (SegmentRecord, b'{"segmentName": "s", "status": "DONE", "creationTimeMs": true}', "must be an integer"),
        (IdealState, b'{"table": "t", "segments": {"s": ["a"]}}', "segment 's' must map instances to states"),
        (IdealState, b'{"table": "t", "segments": {"s": {"a": "ON"}}}', "segments.s.a"),
        (IdealState, b'{"table": "t", "paused": "yes"}', "field 'paused' must be true or false"),
        (InstanceInfo, b'{"id": "i", "host": "h", "ports": {"http": 70000}}', "port 'http'"),
        (InstanceInfo, b'{"id": "i", "host": "h", "tags": "x"}', "list of strings"),
        (CurrentState, b'{"instance": "i", "table": 3}', "field 'table' must be a string"),
        (ExternalView, b'{"table": "t", "segments": []}', "field 'segments' must be a JSON object"),
    ],
)
def test_malformed_records_say_what_is_wrong(cls: type, data: bytes, message: str) -> None:
    with pytest.raises(RecordFormatError) as info:
        cls.decode(data)
    assert message in str(info.value)
