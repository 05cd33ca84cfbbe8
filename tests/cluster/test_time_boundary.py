"""Pinot's time boundary rule in the column's own unit."""

from __future__ import annotations

from cuvee.cluster.time_boundary import DAY_MS, HOUR_MS, compute_time_boundary, millis_per_value
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
