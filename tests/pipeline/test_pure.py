"""The pipeline's pure parts, no Spark: conversion with bad rows, time buckets and partitions, grouping into
segments, and what a write replaces."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.config import Schema, TableConfig
from cuvee.lineage import LineageState, SegmentLineage
from cuvee.lineage.model import LineageEntry
from cuvee.lineage.rules import INPUT_KEY
from cuvee.pipeline.convert import convert_batch
from cuvee.pipeline.ingest import guess_format, input_identity
from cuvee.pipeline.replace import plan_replace
from cuvee.pipeline.segments import BUCKET, PART, BuildSpec, bucket_and_partition, build_groups, grouped
from tests.offline.support import SCHEMA, offline_table

DAY = 86_400_000


def schema() -> Schema:
    return Schema.from_json(SCHEMA)


def test_conversion_sets_bad_rows_aside_with_their_reason() -> None:
    batch = pa.RecordBatch.from_pydict({"id": ["1", "x", "3"], "country": ["us", "fr", "de"],
                                        "amount": ["1.5", "2", "z"], "ts": ["100", "200", "300"], "other": [1, 2, 3]})
    out = convert_batch(batch, schema(), None)
    assert out.batch.to_pydict() == {"id": [1], "country": ["us"], "amount": [1.5], "ts": [100]}
    assert len(out.bad) == 2 and "'x'" in out.bad[0] and "'z'" in out.bad[1]


def test_a_row_whose_transform_fails_is_set_aside_as_bad_unless_continue_on_error() -> None:
    from cuvee.decode.transform import compile_ingestion

    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "raw": ["1.5", "oops", "2"], "ts": [100, 200, 300]})
    outs = {}
    for continue_on_error in (False, True):
        table = TableConfig.from_json({**offline_table(), "ingestionConfig": {
            "transformConfigs": [{"columnName": "amount", "transformFunction": "CAST(raw AS DOUBLE)"}],
            "continueOnError": continue_on_error}})
        outs[continue_on_error] = convert_batch(batch, schema(), compile_ingestion(schema(), table.ingestion))
    assert outs[False].batch.column("amount").to_pylist() == [1.5, 2.0] and len(outs[False].bad) == 1
    assert "ingestion transform failed: the transform of column 'amount'" in outs[False].bad[0]
    assert outs[True].batch.column("amount").to_pylist() == [1.5, None, 2.0] and outs[True].bad == []


def test_spark_timestamps_become_epoch_millis_and_missing_columns_nulls() -> None:
    at = datetime.datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=datetime.timezone.utc)
    batch = pa.RecordBatch.from_pydict({"ID": pa.array([7], pa.int32()),
                                        "ts": pa.array([at], pa.timestamp("us", tz="UTC"))})
    out = convert_batch(batch, schema(), None)
    assert out.batch.to_pydict() == {"id": [7], "country": [None], "amount": [None], "ts": [1767225600123]}


def test_buckets_follow_the_push_frequency_and_partitions_the_config() -> None:
    table = TableConfig.from_json({**offline_table(), "tableIndexConfig": {"segmentPartitionConfig": {
        "columnPartitionMap": {"id": {"functionName": "Modulo", "numPartitions": 4}}}}})
    batch = pa.RecordBatch.from_pydict({"id": [1, 6, 7], "ts": [5, DAY + 1, None]})
    buckets, parts = bucket_and_partition(batch, table, schema())
    assert buckets.to_pylist() == [0, 1, -1] and parts.to_pylist() == [1, 2, 3]
    hourly = TableConfig.from_json(offline_table(segmentPushFrequency="HOURLY"))
    assert bucket_and_partition(batch, hourly, schema())[0].to_pylist() == [0, 24, -1]


def test_groups_build_one_named_segment_each(tmp_path: Path) -> None:
    spec = BuildSpec(offline_table(), SCHEMA, tmp_path.as_uri(), "abcd1234", rows_per_segment=2)
    batch = pa.RecordBatch.from_pydict({"id": [1, 2, 3, 4], "country": ["a", "b", "c", "d"], "amount": [1.0] * 4,
                                        "ts": [10, 11, DAY, DAY + 5], BUCKET: [0, 0, 1, 1],
                                        PART: pa.array([0, 0, 0, 0], pa.int32())})
    built = list(build_groups(iter([batch.slice(0, 3), batch.slice(3)]), spec))  # a group split across batches
    assert [b["segmentName"] for b in built] == ["sales_10_11_0_abcd1234", f"sales_{DAY}_{DAY + 5}_0_abcd1234"]
    assert all((tmp_path / "sales_OFFLINE" / f"{b['segmentName']}.tar.zst").is_file() for b in built)
    assert [b["totalDocs"] for b in built] == [2, 2]
    again = list(build_groups(iter([batch]), spec))
    assert [b["crc"] for b in again] == [b["crc"] for b in built]  # the same rows give the same bytes


def test_rows_are_grouped_by_bucket_then_partition_stably() -> None:
    ordered = pa.table({"v": [1, 2, 3, 4], BUCKET: [0, 0, 1, 1], PART: pa.array([0, 1, 0, 0], pa.int32())})
    assert grouped(ordered) is ordered  # already grouped: not copied
    mixed = pa.table({"v": [1, 2, 3, 4, 5], BUCKET: [1, 0, 1, 0, 0], PART: pa.array([0, 1, 0, 0, 1], pa.int32())})
    out = grouped(mixed)
    assert out.column("v").to_pylist() == [4, 2, 5, 1, 3]
    assert list(zip(out.column(BUCKET).to_pylist(), out.column(PART).to_pylist())) == [(0, 0), (0, 1), (0, 1),
                                                                                     (1, 0), (1, 0)]


def test_what_a_write_replaces() -> None:
    built = [{"segmentName": "s_new", "crc": 1}, {"segmentName": "s_same", "crc": 2}]
    existing = {"s_same": 2, "s_old": 3, "s_other": 4}
    lineage = SegmentLineage("t_OFFLINE", {"e": LineageEntry((), ("s_old",), LineageState.COMPLETED, 1,
                                                             {INPUT_KEY: "k"})})
    append = plan_replace(built, existing, lineage, refresh=False, input_key="k")
    assert (append.segments_from, append.segments_to, append.unchanged) == (("s_old",), ("s_new",), ("s_same",))
    refresh = plan_replace(built, existing, lineage, refresh=True, input_key="k")
    assert refresh.segments_from == ("s_old", "s_other")
    # a name pushed by a run that died (hidden by its IN_PROGRESS entry) is pushed again, never "unchanged"
    dead = SegmentLineage("t_OFFLINE", {"d": LineageEntry((), ("s_same",), LineageState.IN_PROGRESS, 1, {})})
    assert plan_replace(built, existing, dead, refresh=False, input_key="k").segments_to == ("s_new", "s_same")
    assert plan_replace(built, {"s_new": 1, "s_same": 2}, SegmentLineage("t"), refresh=False,
                        input_key="k").nothing_to_do


def test_input_identity_and_formats(tmp_path: Path) -> None:
    f = tmp_path / "a.parquet"
    f.write_bytes(b"x")
    table, schema = TableConfig.from_json(offline_table()), Schema.from_json(SCHEMA)

    def identity() -> tuple[str, str]:
        return input_identity(str(f), [f.as_uri()], table, schema)

    key, fp = identity()
    assert identity() == (key, fp)
    f.write_bytes(b"xy")
    assert identity()[1] != fp and identity()[0] == key
    fp = identity()[1]
    table = TableConfig.from_json(offline_table(replication=3))  # another config builds other segments
    assert identity() == (key, identity()[1]) and identity()[1] != fp
    assert guess_format("/d/*.csv") == "csv" and guess_format("x.jsonl") == "json"
    with pytest.raises(Exception, match="--format"):
        guess_format("/data/dir")


class _Controller:
    """Just what push_replace reads before it decides; any write would fail the test."""

    def ideal_state(self, table: str) -> dict[str, dict[str, str]]:
        return {"sales_a": {"s": "ONLINE"}}

    def lineage(self, table: str) -> SegmentLineage:
        return SegmentLineage("sales_OFFLINE")


def test_a_run_that_built_nothing_never_empties_the_table_and_duplicate_names_push_nothing(tmp_path: Path) -> None:
    from cuvee.pipeline.controller_client import PipelineError
    from cuvee.pipeline.ingest import push_replace

    deep = tmp_path.as_uri()
    with pytest.raises(PipelineError, match="refusing to replace 1 segment"):
        push_replace(_Controller(), "sales", [], refresh=True, input_key="k", deep_store_uri=deep)  # type: ignore[arg-type]
    twice = [{"segmentName": "sales_b", "crc": 1, "downloadUri": f"{deep}/x"}] * 2
    with pytest.raises(PipelineError, match="two segments named sales_b"):
        push_replace(_Controller(), "sales", twice, refresh=True, input_key="k", deep_store_uri=deep)  # type: ignore[arg-type]
