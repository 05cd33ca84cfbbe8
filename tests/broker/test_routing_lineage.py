"""Lineage and hybrid tables in routing, pure: hidden segments are never routed, a lineage switch changes the
routed set in one step, and a hybrid table's halves split at Pinot's time boundary (or degrade to one half)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.broker.cluster_view import TableEntry
from cuvee.broker.hybrid import query_targets
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.cluster.time_boundary import DAY_MS, HOUR_MS
from cuvee.lineage.model import LineageEntry, LineageState, SegmentLineage
from cuvee.lineage.rules import hidden_segments
from cuvee.protocol.query import TimeFilter
from cuvee.query import TableInfo
from tests.broker.helpers import segment_name

ON, CO, OFF = SegmentState.ONLINE, SegmentState.CONSUMING, SegmentState.OFFLINE
ALL = frozenset({"A", "B"})
OLD, NEW = ("t_0", "t_1"), ("t_2",)


def entry(name: str, segments: Mapping[str, Mapping[str, SegmentState]], *, hidden: frozenset[str] = frozenset(),
          end_times: Mapping[str, int | None] | None = None, override: int | None = None, step_ms: float = 1.0,
          push_frequency: str = "DAILY") -> TableEntry:
    return TableEntry(name, TableInfo(name, ("ts",), frozenset()), pa.schema([("ts", pa.int64())]),
                      ExternalView(name, {s: dict(r) for s, r in segments.items()}), hidden=hidden, time_column="ts",
                      step_ms=step_ms, push_frequency=push_frequency, end_times=dict(end_times or {}),
                      boundary_override=override)


def routed(e: TableEntry, request: int = 0) -> set[str]:
    return {s for segs in e.route(ALL, request).servers.values() for s in segs}


def lineage(state: LineageState) -> SegmentLineage:
    return SegmentLineage("t_OFFLINE", {"e1": LineageEntry(OLD, NEW, state, 1)})


@pytest.mark.parametrize(("state", "served"), [
    (None, set(OLD)),                       # NEW pushed outside any replace: lineage hides nothing
    (LineageState.IN_PROGRESS, set(OLD)),   # being pushed: the new set is not read yet
    (LineageState.COMPLETED, set(NEW)),     # switched: the old set is never read again
    (LineageState.REVERTED, set(OLD)),      # abandoned: back to the old set
])
def test_lineage_switches_the_routed_set_in_one_step(state: LineageState | None, served: set[str]) -> None:
    view = {s: {"A": ON, "B": ON} for s in OLD + NEW}
    hidden = hidden_segments(lineage(state)) if state is not None else frozenset()
    e = entry("t_OFFLINE", view, hidden=hidden)
    for request in range(4):
        got = routed(e, request)
        if state is None:
            assert got == set(OLD + NEW)
        else:
            assert got == served, "a query sees exactly one of the two sets, never both, never neither"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([segment_name(p, q) for p in range(2) for q in range(4)] + ["off_1", "off_2"]),
                       st.dictionaries(st.sampled_from(["A", "B", "C"]), st.sampled_from([ON, CO, OFF]), min_size=1),
                       min_size=1),
       st.data())
def test_hidden_segments_are_never_routed(view: dict, data: st.DataObject) -> None:
    hidden = frozenset(data.draw(st.sets(st.sampled_from(sorted(view)))))
    e = entry("t_REALTIME", view, hidden=hidden)
    table = e.route(ALL, data.draw(st.integers(0, 5)))
    touched = routed(e) | set(table.unavailable) | set(table.held_back)
    assert not touched & hidden
    assert e.view.segments == view, "the external view itself is untouched"


def test_a_hidden_consuming_segment_is_not_read_nor_does_it_block_its_successor() -> None:
    s0, s1 = segment_name(0, 0), segment_name(0, 1)
    e = entry("t_REALTIME", {s0: {"A": CO}, s1: {"A": CO}}, hidden=frozenset({s0}))
    assert routed(e) == {s1} and e.route(ALL).held_back == ()


# ---- hybrid tables ------------------------------------------------------------------------------------------

RT = {segment_name(0, 0): {"A": CO}}


def offline(end_times: Mapping[str, int | None], states: Mapping[str, SegmentState] | None = None,
            **kwargs: object) -> TableEntry:
    view = {s: {"A": (states or {}).get(s, ON)} for s in end_times}
    return entry("t_OFFLINE", view, end_times=end_times, **kwargs)  # type: ignore[arg-type]


def test_hybrid_halves_split_at_max_end_time_minus_a_day() -> None:
    realtime = entry("t_REALTIME", RT)
    off = offline({"o1": 5 * DAY_MS, "o2": 9 * DAY_MS + 7, "o3": None})
    targets = query_targets(realtime, off)
    boundary = 8 * DAY_MS + 7
    assert [(t.entry.name, t.time_filter) for t in targets] == [
        ("t_OFFLINE", TimeFilter("ts", "<=", boundary)), ("t_REALTIME", TimeFilter("ts", ">", boundary))]


def test_boundary_ignores_hidden_and_not_online_segments_and_follows_the_unit() -> None:
    realtime = entry("t_REALTIME", RT)
    off = offline({"o1": 100, "o2": 500, "o3": 900}, {"o3": OFF}, hidden=frozenset({"o2"}))
    assert off.time_boundary == 100 - DAY_MS  # o2 replaced by lineage, o3 served nowhere
    minutes = offline({"o1": 1000}, step_ms=60_000, push_frequency="HOURLY")
    assert minutes.time_boundary == 1000 - HOUR_MS // 60_000  # HOURLY push, a unit finer than days: minus an hour
    assert offline({"o1": 1000}, step_ms=60_000).time_boundary == 1000 - DAY_MS // 60_000
    days = offline({"o1": 1000}, step_ms=DAY_MS, push_frequency="HOURLY")
    assert days.time_boundary == 999  # a day unit is never finer than a day: minus one day
    assert query_targets(realtime, offline({"o1": 1000}, override=42))[0].time_filter == TimeFilter("ts", "<=", 42)


def test_hybrid_degrades_to_one_half_without_a_boundary_or_without_realtime_segments() -> None:
    realtime = entry("t_REALTIME", RT)
    unknown = offline({"o1": None})
    assert [(t.entry.name, t.time_filter) for t in query_targets(realtime, unknown)] == [("t_REALTIME", None)]
    not_served = offline({"o1": 100}, {"o1": OFF})
    assert [(t.entry.name, t.time_filter) for t in query_targets(realtime, not_served)] == [("t_REALTIME", None)]
    empty = entry("t_REALTIME", {})
    assert [(t.entry.name, t.time_filter) for t in query_targets(empty, offline({"o1": 100}))] == [("t_OFFLINE", None)]


def test_one_half_alone_is_read_unfiltered() -> None:
    realtime, off = entry("t_REALTIME", RT), offline({"o1": 100})
    assert [(t.entry, t.time_filter) for t in query_targets(realtime, None)] == [(realtime, None)]
    assert [(t.entry, t.time_filter) for t in query_targets(None, off)] == [(off, None)]
    assert query_targets(None, None) == []


def test_a_strict_entry_routes_each_partition_to_one_replica() -> None:
    segments = [segment_name(0, i) for i in range(4)]
    view = {s: {"A": ON, "B": ON} for s in segments}
    strict = dataclasses.replace(entry("t_REALTIME", view), strict=True)
    for request in range(4):
        assert len({inst for inst, segs in strict.route(ALL, request).servers.items() if segs}) == 1
    assert len(entry("t_REALTIME", view).route(ALL, 1).servers) == 2
