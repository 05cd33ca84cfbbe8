"""Merging rows: concat passes through, rollup groups dimensions (multi-value too) and aggregates metrics as
configured, dedup keeps distinct rows, time rounding."""

from __future__ import annotations

import pyarrow as pa

from cuvee.config import Schema
from cuvee.maintenance.config import Aggregation, MergeType
from cuvee.maintenance.rows import merge_rows

SCHEMA = Schema.from_json({
    "schemaName": "t",
    "dimensionFieldSpecs": [{"name": "country", "dataType": "STRING"},
                            {"name": "tags", "dataType": "STRING", "singleValueField": False}],
    "metricFieldSpecs": [{"name": "clicks", "dataType": "LONG"}, {"name": "price", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})


def rows() -> pa.Table:
    return pa.table({"country": ["us", "us", "fr", "us"], "tags": [["a"], ["a"], ["b", "c"], ["a"]],
                     "clicks": pa.array([1, 2, 3, 4], pa.int64()), "price": [1.5, 0.5, 2.0, 9.0],
                     "ts": pa.array([1000, 1500, 1000, 4000], pa.int64())}, schema=SCHEMA.arrow_schema())


def test_concat_passes_rows_through() -> None:
    assert merge_rows(rows(), SCHEMA, MergeType.CONCAT) is not None
    assert merge_rows(rows(), SCHEMA, MergeType.CONCAT).equals(rows())


def test_rollup_with_rounding_and_aggregations() -> None:
    merged = merge_rows(rows(), SCHEMA, MergeType.ROLLUP, time_column="ts", round_units=1000,
                        aggregations={"price": Aggregation.MAX})
    assert merged.schema == SCHEMA.arrow_schema()
    got = sorted(merged.to_pylist(), key=lambda r: (r["country"], r["ts"]))
    assert got == [{"country": "fr", "tags": ["b", "c"], "clicks": 3, "price": 2.0, "ts": 1000},
                   {"country": "us", "tags": ["a"], "clicks": 3, "price": 1.5, "ts": 1000},
                   {"country": "us", "tags": ["a"], "clicks": 4, "price": 9.0, "ts": 4000}]


def test_dedup_keeps_distinct_rows() -> None:
    doubled = pa.concat_tables([rows(), rows()])
    assert sorted(map(str, merge_rows(doubled, SCHEMA, MergeType.DEDUP).to_pylist())) == sorted(
        map(str, rows().to_pylist()))


def test_an_overflowing_sum_keeps_the_rows_and_times_before_1970_round_down() -> None:
    schema = Schema.from_json({**SCHEMA.to_json(), "metricFieldSpecs": [{"name": "clicks", "dataType": "INT"},
                                                                        {"name": "price", "dataType": "DOUBLE"}]})
    big = pa.table({"country": ["us", "us"], "tags": [["a"], ["a"]], "clicks": pa.array([2**31 - 1, 5], pa.int32()),
                    "price": [1.0, 2.0], "ts": pa.array([1000, 1000], pa.int64())}, schema=schema.arrow_schema())
    assert merge_rows(big, schema, MergeType.ROLLUP).equals(big)
    early = pa.table({"country": ["us"], "tags": [["a"]], "clicks": pa.array([1], pa.int64()), "price": [1.0],
                      "ts": pa.array([-1500], pa.int64())}, schema=SCHEMA.arrow_schema())
    assert merge_rows(early, SCHEMA, MergeType.CONCAT, time_column="ts", round_units=1000).column("ts").to_pylist() \
        == [-2000]
