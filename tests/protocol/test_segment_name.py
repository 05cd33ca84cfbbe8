"""LLCSegmentName: parse/format round trip, ordering, next(), and clear errors for malformed names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

# 2026-11-21 16:47:00 UTC
T = 1_795_279_620_000


def test_parse_and_format_the_design_example() -> None:
    name = LLCSegmentName.parse("events__6__0__20261121T1647Z")
    assert (name.table, name.partition, name.sequence, name.created_ms) == ("events", 6, 0, T)
    assert str(name) == name.name == "events__6__0__20261121T1647Z"
    assert name.created_text == "20261121T1647Z"


def test_create_floors_to_the_minute_so_names_round_trip() -> None:
    name = LLCSegmentName.create("events", 6, 0, T + 59_999)
    assert name.created_ms == T
    assert LLCSegmentName.parse(name.name) == name


def test_next_segment_of_the_partition() -> None:
    name = LLCSegmentName.parse("mytable__17__427__20190225T1537Z")
    nxt = name.next(1_551_130_020_000)  # 2019-02-25 21:27 UTC
    assert nxt.name == "mytable__17__428__20190225T2127Z"
    assert nxt > name


def test_ordering_by_table_partition_sequence() -> None:
    names = [
        LLCSegmentName.create("b", 0, 0, 0),
        LLCSegmentName.create("a", 1, 0, 0),
        LLCSegmentName.create("a", 0, 2, 0),
        LLCSegmentName.create("a", 0, 10, 0),
    ]
    assert [n.name for n in sorted(names)] == [
        "a__0__2__19700101T0000Z",
        "a__0__10__19700101T0000Z",
        "a__1__0__19700101T0000Z",
        "b__0__0__19700101T0000Z",
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("events", "4 parts"),
        ("events__6__0", "4 parts"),
        ("a__b__6__0__20261121T1647Z", "4 parts"),
        ("__6__0__20261121T1647Z", "empty table"),
        ("events__x__0__20261121T1647Z", "partition 'x'"),
        ("events__-1__0__20261121T1647Z", "partition '-1'"),
        ("events__6__01__20261121T1647Z", "sequence '01'"),
        ("events__6__0__2026-11-21T16:47Z", "yyyyMMdd"),
        ("events__6__0__20261321T1647Z", "not a valid date"),
        ("events__6__0__20261121T2561Z", "not a valid date"),
    ],
)
def test_malformed_names_say_what_is_wrong(text: str, fragment: str) -> None:
    with pytest.raises(InvalidSegmentNameError, match=fragment):
        LLCSegmentName.parse(text)
    assert not LLCSegmentName.is_llc(text)


def test_offline_names_are_not_llc() -> None:
    assert not LLCSegmentName.is_llc("events_100_200_0")
    assert LLCSegmentName.is_llc("events__0__0__20261121T1647Z")


@pytest.mark.parametrize(
    "args",
    [("a__b", 0, 0, 0), ("t_", 0, 0, 0), ("", 0, 0, 0), ("t", -1, 0, 0), ("t", 0, True, 0), ("t", 0, 0, 1), ("t", 0, 0, -60_000)],
)
def test_invalid_fields_are_refused(args: tuple[str, int, int, int]) -> None:
    with pytest.raises(InvalidSegmentNameError):
        LLCSegmentName(*args)


def test_parse_refuses_non_strings() -> None:
    with pytest.raises(InvalidSegmentNameError, match="must be a string"):
        LLCSegmentName.parse(42)  # type: ignore[arg-type]


@given(
    st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True).filter(lambda t: "__" not in t and t[-1] != "_"),
    st.integers(0, 10_000),
    st.integers(0, 10**9),
    st.integers(0, 4_102_444_800_000),  # up to 2100
)
def test_round_trip_property(table: str, partition: int, sequence: int, now_ms: int) -> None:
    name = LLCSegmentName.create(table, partition, sequence, now_ms)
    assert LLCSegmentName.parse(name.name) == name
    assert name.created_ms <= now_ms < name.created_ms + 60_000
    assert name.next(now_ms).sequence == sequence + 1
