"""Pinot's time boundary rule in the column's own unit."""

from __future__ import annotations

from cuvee.cluster.records import SegmentState
from cuvee.cluster.time_boundary import (DAY_MS, HOUR_MS, compute_time_boundary, expected_offline_segments,
                                         millis_per_value)
from cuvee.config import Schema


def schema(fmt: str | None, data_type: str = "LONG") -> Schema:
    spec = {"name": "ts", "dataType": data_type, "granularity": "1:MILLISECONDS"}
    if fmt:
        spec["format"] = fmt
    return Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "d", "dataType": "STRING"}],
                             "dateTimeFieldSpecs": [spec]})


def test_millis_daily_and_hourly() -> None:
    ends = [5 * DAY_MS, 9 * DAY_MS, None]
    assert compute_time_boundary(ends, 1, "DAILY") == 8 * DAY_MS
    assert compute_time_boundary(ends, 1, "HOURLY") == 9 * DAY_MS - HOUR_MS
    assert compute_time_boundary([None], 1, "DAILY") is None


def test_coarse_units() -> None:
    assert compute_time_boundary([100], DAY_MS, "HOURLY") == 99  # days: an hourly push still steps back a day
    assert compute_time_boundary([48], HOUR_MS, "HOURLY") == 47
    assert compute_time_boundary([7200], 1000, "DAILY") == 7200 - 86_400


def test_units_from_the_schema() -> None:
    assert millis_per_value(schema("1:MILLISECONDS:EPOCH"), "ts") == 1
    assert millis_per_value(schema("1:DAYS:EPOCH"), "ts") == DAY_MS
    assert millis_per_value(schema("5:MINUTES:EPOCH"), "ts") == 300_000
    assert millis_per_value(schema("TIMESTAMP", "TIMESTAMP"), "ts") == 1
    assert millis_per_value(schema("1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd", "STRING"), "ts") is None
    assert millis_per_value(schema("1:MILLISECONDS:EPOCH"), None) is None


def test_expected_offline_segments_come_from_the_ideal_state_with_a_grace_for_new_pushes() -> None:
    on, off = SegmentState.ONLINE, SegmentState.OFFLINE
    ideal = {"served": {"A": on}, "down": {"A": on}, "new": {"A": on}, "old_unloaded": {"A": on},
             "hidden": {"A": on}, "dropped": {"A": off}}
    view = {"served": {"A": on}, "hidden": {"A": on}, "stale": {"A": on}}
    pushed = {"served": 0, "down": 0, "new": 9_500, "old_unloaded": 1_000, "hidden": 0, "dropped": 0}
    got = expected_offline_segments(ideal, view, frozenset({"hidden"}), pushed, now_ms=10_000,
                                    new_segment_grace_ms=1_000)
    # down: its servers died (past grace, so counted and reported); new: still loading; stale: not in the ideal state
    assert got == {"served", "down", "old_unloaded"}
    unknown_push_time = expected_offline_segments({"x": {"A": on}}, {}, frozenset(), {}, 0, 10**9)
    assert unknown_push_time == {"x"}
