"""A window's rows as a RealtimeToOfflineSegmentsTask Spark task keeps them: the time column in its own unit,
rows without a time in no window."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from cuvee.maintenance.rto_job import in_window
from cuvee.maintenance.rto_plan import MoveWindow

D = 86_400_000
DAY1 = MoveWindow(D, 2 * D, ("s",), 0)


def test_millis_and_nulls() -> None:
    rows = pa.table({"ts": pa.array([D - 1, D, 2 * D - 1, 2 * D, None], pa.int64()), "v": [1, 2, 3, 4, 5]})
    assert in_window(rows, "ts", DAY1, 1.0).column("v").to_pylist() == [2, 3]


def test_epoch_seconds_and_days() -> None:
    seconds = pa.table({"t": pa.array([86_399, 86_400, 172_799, 172_800], pa.int64())})
    assert in_window(seconds, "t", DAY1, 1000.0).column("t").to_pylist() == [86_400, 172_799]
    days = pa.table({"t": pa.array([0, 1, 2], pa.int32())})
    assert in_window(days, "t", DAY1, float(D)).column("t").to_pylist() == [1]


def test_timestamp_columns_compare_in_milliseconds() -> None:
    def at(ms: int) -> dt.datetime:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).replace(tzinfo=None)

    rows = pa.table({"ts": pa.array([at(D - 1), at(D), at(2 * D - 1), at(2 * D)], pa.timestamp("ms"))})
    kept = in_window(rows, "ts", DAY1, 1.0).column("ts").cast(pa.int64()).to_pylist()
    assert kept == [D, 2 * D - 1]


def test_an_empty_segment_keeps_nothing() -> None:
    rows = pa.table({"ts": pa.array([], pa.int64())})
    assert in_window(rows, "ts", DAY1, 1.0).num_rows == 0
