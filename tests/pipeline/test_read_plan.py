"""The reader's pure parts: which Spark filters are taken and how they evaluate, time-range pruning, which segments
a half contributes (lineage, consuming, peers), partition grouping, and the hybrid split rule."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, IsNull, LessThan,
                                    LessThanOrEqual, Not, StringStartsWith)

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.cluster.time_boundary import hybrid_halves
from cuvee.config import Schema, TableType
from cuvee.pipeline.convert import to_spark
from cuvee.pipeline.predicates import Predicate, apply, from_spark, may_match
from cuvee.pipeline.controller_client import PipelineError
from cuvee.pipeline.read_plan import (HalfState, PlanCounts, SegmentSource, check_splittable, group_partitions,
                                      plan_sources)
from cuvee.protocol.query import TimeFilter

SCHEMA = Schema.from_json({
    "schemaName": "t",
    "dimensionFieldSpecs": [{"name": "i", "dataType": "INT"}, {"name": "s", "dataType": "STRING"},
                            {"name": "b", "dataType": "BOOLEAN"}, {"name": "f", "dataType": "DOUBLE"},
                            {"name": "mv", "dataType": "STRING", "singleValueField": False}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:TIMESTAMP",
                            "granularity": "1:MILLISECONDS"},
                           {"name": "ms", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})
UTC = dt.timezone.utc


def test_only_filters_arrow_evaluates_like_spark_are_taken() -> None:
    aware = dt.datetime(2026, 1, 1, tzinfo=UTC)
    assert from_spark(EqualTo(("i",), 3), SCHEMA) == Predicate("i", "=", 3)
    assert from_spark(GreaterThan(("ts",), aware), SCHEMA) == Predicate("ts", ">", 1767225600_000_000)
    assert from_spark(In(("s",), ("a", "b")), SCHEMA) == Predicate("s", "in", ("a", "b"))
    assert from_spark(IsNull(("f",)), SCHEMA) == Predicate("f", "is_null")
    for refused in (GreaterThan(("f",), 1.5),  # NaN ordering
                    EqualTo(("mv",), "a"),  # multi-value
                    EqualTo(("i",), "3"), EqualTo(("i",), True), EqualTo(("i",), 2**40),  # wrong kind, range
                    EqualTo(("ts",), aware.replace(tzinfo=None)),  # a naive (NTZ) literal
                    In(("i",), (1, None)), Not(EqualTo(("i",), 3)), StringStartsWith(("s",), "a"),
                    EqualTo(("nope",), 1), EqualTo(("s", "nested"), "a")):
        assert from_spark(refused, SCHEMA) is None, refused


def test_predicates_apply_with_sql_null_semantics() -> None:
    stored = pa.table({"i": pa.array([1, 2, None, 4], pa.int32()), "ts": pa.array([0, 1, 2, None], pa.timestamp("ms"))})
    fields = [SCHEMA.column("i"), SCHEMA.column("ts")]
    table = to_spark(stored, fields)
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert apply(table, [Predicate("i", ">=", 2)]).column("i").to_pylist() == [2, 4]
    assert apply(table, [Predicate("i", "in", (1, 4))]).column("i").to_pylist() == [1, 4]
    assert apply(table, [Predicate("i", "is_null")]).num_rows == 1
    assert apply(table, [Predicate("ts", "<=", 1000), Predicate("i", "not_null")]).column("i").to_pylist() == [1, 2]
    for spark_filter in (LessThan(("i",), 2), LessThanOrEqual(("i",), 2), GreaterThanOrEqual(("i",), 4),
                         IsNotNull(("ts",))):
        assert from_spark(spark_filter, SCHEMA) is not None


def test_time_range_pruning() -> None:
    ts, ms = SCHEMA.column("ts"), SCHEMA.column("ms")
    # a TIMESTAMP segment spanning [1000 ms, 2000 ms]: predicate values are microseconds
    assert may_match([Predicate("ts", ">", 2_000_999)], ts, 1000, 2000) is False
    assert may_match([Predicate("ts", ">", 2_000_998)], ts, 1000, 2000) is True
    assert may_match([Predicate("ts", "<", 1_000_000)], ts, 1000, 2000) is False
    assert may_match([Predicate("ts", "=", 1_500_000)], ts, 1000, 2000) is True
    assert may_match([Predicate("ts", "in", (5, 3_000_000))], ts, 1000, 2000) is False
    assert may_match([Predicate("ms", ">=", 2001)], ms, 1000, 2000) is False
    assert may_match([Predicate("ms", "<=", 1000)], ms, 1000, 2000) is True
    assert may_match([Predicate("i", "=", 1)], ms, 1000, 2000) is True  # other columns never prune
    assert may_match([Predicate("ms", ">", 5000)], ms, None, 2000) is True  # unknown range: read it


def record(name: str, status: SegmentStatus, low: int | None = None, high: int | None = None) -> SegmentRecord:
    return SegmentRecord(segment_name=name, status=status, creation_time_ms=0, crc=7, time_min=low, time_max=high,
                         size_bytes=100, download_uri=f"file:///deep/{name}.tar.gz")


def test_a_half_contributes_visible_committed_segments_and_consuming_ones_when_asked() -> None:
    records = {"a": record("a", SegmentStatus.UPLOADED, 0, 10), "b": record("b", SegmentStatus.UPLOADED, 20, 30),
               "hidden": record("hidden", SegmentStatus.UPLOADED, 0, 10),
               "c": record("c", SegmentStatus.IN_PROGRESS), "late": record("late", SegmentStatus.UPLOADED, 50, 60)}
    ideal = {"a": {"s1": "ONLINE"}, "b": {"s1": "ONLINE", "s2": "ONLINE"}, "hidden": {"s1": "ONLINE"},
             "c": {"s2": "CONSUMING"}, "orphan": {"s1": "ONLINE"}, "late": {"s1": "ONLINE"}}
    view = {"a": {"s1": "ONLINE"}, "b": {"s1": "ONLINE", "s2": "OFFLINE", "gone": "ONLINE"}, "c": {"s2": "CONSUMING"}}
    half = HalfState("t_OFFLINE", records, ideal, view, frozenset({"hidden"}), {"s1": "http://h1", "s2": "http://h2"},
                     TimeFilter("ms", "<=", 40))
    counts = PlanCounts()
    sources = plan_sources(half, include_consuming=False, predicates=[Predicate("ms", ">=", 15)],
                           time_spec=SCHEMA.column("ms"), counts=counts)
    assert [s.segment for s in sources] == ["b"]  # a: before 15; late: after the boundary; c: consuming
    assert sources[0].peers == ("http://h1",) and sources[0].time_filter == TimeFilter("ms", "<=", 40)
    assert (counts.pruned, counts.consuming_skipped, counts.without_record) == (2, 1, 1)
    with_consuming = plan_sources(half, include_consuming=True, predicates=[], time_spec=None)
    assert [(s.segment, s.consuming, s.peers) for s in with_consuming if s.consuming] == [("c", True, ("http://h2",))]


def test_partitions_are_balanced_by_bytes_and_hold_at_most_n_segments() -> None:
    sizes = [100, 90, 10, 10, 5, 1, 1]
    sources = [SegmentSource("t", f"s{i}", None, "", size, ()) for i, size in enumerate(sizes)]
    groups = group_partitions(sources, 3)
    assert len(groups) == 3 and all(len(g) <= 3 for g in groups)
    assert sorted(s.segment for g in groups for s in g) == sorted(s.segment for s in sources)
    assert {g[0].segment for g in groups} >= {"s0", "s1"}  # the two big ones apart
    assert group_partitions([], 4) == []
    assert len(group_partitions(sources)) == 7  # a small read: a task per segment
    many = [SegmentSource("t", f"m{i}", None, "", 1, ()) for i in range(100)]
    assert len(group_partitions(many)) == 25  # a large one: four segments per task
    with pytest.raises(ValueError):
        group_partitions(sources, 0)


def test_hybrid_split() -> None:
    assert hybrid_halves(None, "ts", True) == {TableType.REALTIME: None}
    assert hybrid_halves(100, "ts", False) == {TableType.OFFLINE: None}
    assert hybrid_halves(100, "ts", True) == {TableType.OFFLINE: TimeFilter("ts", "<=", 100),
                                              TableType.REALTIME: TimeFilter("ts", ">", 100)}


@pytest.mark.parametrize(("fmt", "shown"), [
    ("1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd", "STRING 1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd"),
    ("1:DAYS:SIMPLE_DATE_FORMAT:dd/MM/yyyy Z", "STRING 1:DAYS:SIMPLE_DATE_FORMAT"),
])
def test_a_hybrid_table_on_date_strings_is_refused_by_name_from_its_schema(fmt: str, shown: str) -> None:
    schema = Schema.from_json({"schemaName": "d", "dateTimeFieldSpecs": [
        {"name": "day", "dataType": "STRING", "format": fmt, "granularity": "1:DAYS"}]})
    # yyyyMMdd: the boundary's text "20130714" reads as a number; the schema says it is a date
    with pytest.raises(PipelineError, match=f"hybrid table 'd': its time column 'day' \\({shown}"):
        check_splittable("d", schema, "day")
    with pytest.raises(PipelineError, match="'gone' \\(not in the schema\\)"):
        check_splittable("d", schema, "gone")
    for column in ("ts", "ms"):  # epoch and TIMESTAMP columns split
        check_splittable("t", SCHEMA, column)
