"""A window's rows as a RealtimeToOfflineSegmentsTask Spark task keeps them (the time column in its own unit,
rows without a time in no window), and the tables the job refuses before doing anything."""

from __future__ import annotations

import datetime as dt

from typing import Any

import pyarrow as pa
import pytest

from cuvee.config import Schema, TableConfig, TableType
from cuvee.maintenance.rto_job import hybrid_table, in_window
from cuvee.pipeline.controller_client import PipelineError
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


class _Client:
    """What ``hybrid_table`` asks of the controller."""

    def __init__(self, halves: dict[Any, TableConfig], schema: Schema):
        self.halves, self._schema = halves, schema

    def tables(self, name: str) -> dict[Any, TableConfig]:
        return self.halves

    def schema(self, name: str) -> Schema:
        return self._schema


def _halves(time_column: str = "ts", offline_time: str = "ts", offline: bool = True) -> dict[Any, TableConfig]:
    realtime = TableConfig.from_json({
        "tableName": "t", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": time_column},
        "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "t",
                                                "stream.log.dir": "/nonexistent"}},
        "task": {"taskTypeConfigsMap": {"RealtimeToOfflineSegmentsTask": {"bucketTimePeriod": "6h"}}}})
    found = {TableType.REALTIME: realtime}
    if offline:
        found[TableType.OFFLINE] = TableConfig.from_json({
            "tableName": "t", "tableType": "OFFLINE", "segmentsConfig": {"timeColumnName": offline_time}})
    return found


def test_the_job_refuses_tables_it_cannot_move_clearly() -> None:
    schema = Schema.from_json({"schemaName": "t", "dateTimeFieldSpecs": [
                                   {"name": "ts", "dataType": "LONG", "format": "1:SECONDS:EPOCH",
                                    "granularity": "1:SECONDS"},
                                   {"name": "day", "dataType": "STRING", "format": "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd",
                                    "granularity": "1:DAYS"}]})
    found = hybrid_table(_Client(_halves(), schema), "t")  # type: ignore[arg-type]
    assert found.step_ms == 1000.0 and found.task.bucket_ms == 6 * 3_600_000
    with pytest.raises(PipelineError, match="create the OFFLINE half first"):
        hybrid_table(_Client(_halves(offline=False), schema), "t")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="one time column"):
        hybrid_table(_Client(_halves(offline_time="day"), schema), "t")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match="no epoch values"):
        hybrid_table(_Client(_halves("day", "day"), schema), "t")  # type: ignore[arg-type]
