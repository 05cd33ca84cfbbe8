"""Pruning on a server: committed segments ruled out by bloom filters, partitions and a hybrid half's time filter
are skipped and counted; consuming segments are always read; the answers stay those of every row."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.config import IndexingConfig, Schema
from cuvee.pruning.predicate import with_bound
from cuvee.protocol.query import ServerQueryRequest, ServerQueryStats, TimeFilter
from cuvee.query import TableInfo, merge_partials, plan_sql
from cuvee.segment.builder import build_segment
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.queryable import CommittedSegment
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas

TABLE = "hits_OFFLINE"
SCHEMA = Schema.from_json({
    "schemaName": "hits",
    "dimensionFieldSpecs": [{"name": "user", "dataType": "LONG"}, {"name": "city", "dataType": "STRING"}],
    "dateTimeFieldSpecs": [{"name": "day", "dataType": "LONG", "format": "1:DAYS:EPOCH", "granularity": "1:DAYS"}]})
INFO = TableInfo(TABLE, ("user", "city", "day"), frozenset())
INDEXING = IndexingConfig(bloom_filter_columns=("city",), extra={"segmentPartitionConfig": {
    "columnPartitionMap": {"user": {"functionName": "Modulo", "numPartitions": 2}}}})


def rows(users: list[int], cities: list[str], day: int) -> pa.Table:
    return pa.table({"user": pa.array(users, pa.int64()), "city": cities, "day": pa.array([day] * len(users))})


# segment a: even users 0..98, cities amsterdam and cairo, day 10; b: odd users 1..99, berlin and bern, day 11;
# c: consuming, users 0..9, every city, day 12
PARTS = {
    "a": rows(list(range(0, 100, 2)), ["amsterdam", "cairo"] * 25, 10),
    "b": rows(list(range(1, 100, 2)), ["berlin", "bern"] * 25, 11),
}
CONSUMING = rows(list(range(10)), ["amsterdam", "berlin", "bern", "cairo", "zurich"] * 2, 12)


class Consuming:
    """A consuming segment's view as the executor sees it (rows still coming: no stats)."""

    is_consuming = True
    last_ingestion_ms = 1234

    def __init__(self, name: str, table: pa.Table) -> None:
        self.name, self._table = name, table

    @property
    def num_docs(self) -> int:
        return self._table.num_rows

    def to_arrow(self) -> pa.Table:
        return self._table


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> SegmentRegistry:
    work: Path = tmp_path_factory.mktemp("pruning")
    held = SegmentRegistry()
    for name, part in PARTS.items():
        held.put(TABLE, CommittedSegment(build_segment(part, SCHEMA, INDEXING, work, name, table_name=TABLE,
                                                       time_column="day")))
    held.put(TABLE, Consuming("c", CONSUMING))
    return held


def ask(registry: SegmentRegistry, sql: str, time_filter: TimeFilter | None = None,
        segments: tuple[str, ...] = ("a", "b", "c")) -> tuple[list[list], ServerQueryStats]:
    plan = plan_sql(sql, lambda name, **_: INFO)
    prune = plan.prune_filter if time_filter is None else \
        with_bound(plan.prune_filter, time_filter.column, time_filter.op, time_filter.value)  # as the broker joins them
    request = ServerQueryRequest("1", TABLE, plan.server_sql, segments, 10_000, plan.docs_scanned_sql,
                                 plan.docs_column, time_filter, prune_filter=prune)
    result, stats = QueryExecutor(registry).execute(request)
    assert stats.exceptions == ()
    merged = merge_partials(plan, [result] if result is not None else [], SCHEMA.arrow_schema())
    return [list(row.values()) for row in merged.to_pylist()], stats


def test_a_bloom_filter_rules_out_a_value_min_max_lets_through(registry: SegmentRegistry) -> None:
    # 'bern' lies between amsterdam and cairo (segment a's min and max): only a's bloom filter knows it is absent
    answer, stats = ask(registry, "SELECT COUNT(*) FROM hits WHERE city = 'bern'")
    assert answer == [[25 + 2]]
    assert (stats.numSegmentsPrunedByServer, stats.numSegmentsProcessed, stats.totalDocs) == (1, 2, 110)
    answer, stats = ask(registry, "SELECT COUNT(*) FROM hits WHERE city IN ('berlin', 'zurich')")
    assert answer == [[25 + 4]] and stats.numSegmentsPrunedByServer == 1


def test_partitions_rule_out_the_other_partitions_values(registry: SegmentRegistry) -> None:
    # user 7 is odd (partition 1): segment a holds partition 0 only, though 7 lies within its min and max
    answer, stats = ask(registry, "SELECT COUNT(*), MIN(city) FROM hits WHERE user = 7")
    assert answer == [[2, "bern"]] and stats.numSegmentsPrunedByServer == 1


def test_the_time_filter_of_a_hybrid_half_prunes_too(registry: SegmentRegistry) -> None:
    answer, stats = ask(registry, "SELECT COUNT(*) FROM hits", TimeFilter("day", ">", 10))
    assert answer == [[60]] and stats.numSegmentsPrunedByServer == 1
    answer, stats = ask(registry, "SELECT COUNT(*) FROM hits WHERE user < 2", TimeFilter("day", "<=", 10))
    assert answer == [[1]] and stats.numSegmentsPrunedByServer == 1


def test_consuming_segments_are_never_pruned_and_all_pruned_answers_empty(registry: SegmentRegistry) -> None:
    answer, stats = ask(registry, "SELECT COUNT(*), MAX(user) FROM hits WHERE user > 500")
    assert answer == [[0, None]]
    assert (stats.numSegmentsPrunedByServer, stats.numSegmentsProcessed) == (2, 1)
    answer, stats = ask(registry, "SELECT user, city FROM hits WHERE user > 500 LIMIT 5", segments=("a", "b"))
    assert answer == [] and (stats.numSegmentsPrunedByServer, stats.numSegmentsProcessed) == (2, 0)


def test_pruning_stops_at_the_query_deadline(registry: SegmentRegistry) -> None:
    """The deadline is checked before each segment is pruned: a clock past it after the first check times out."""
    plan = plan_sql("SELECT COUNT(*) FROM hits WHERE city IN ('x', 'y')", lambda name, **_: INFO)
    request = ServerQueryRequest("1", TABLE, plan.server_sql, ("a", "b"), 100, plan.docs_scanned_sql,
                                 plan.docs_column, None, prune_filter=plan.prune_filter)
    ticks = iter([0.0, 0.0, 5.0])  # started, first segment within the deadline, the second past it

    def clock() -> float:
        return next(ticks, 5.0)

    result, stats = QueryExecutor(registry, clock=clock).execute(request)
    assert result is None and stats.numSegmentsPrunedByServer == 1
    assert [e.message for e in stats.exceptions] == ["query timed out: 100 ms passed before it ran"]


def test_a_column_whose_type_a_forced_update_changed_is_not_pruned(tmp_path: Path) -> None:
    """Stored as STRING ('10', '9'), served as LONG: the stored stats (min '10', max '9') would rule out x = '010',
    which DuckDB casts to 10 against the served LONG."""
    old = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "x", "dataType": "STRING"}]})
    new = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "x", "dataType": "LONG"}]})

    class Source:
        def served_version(self, table: str) -> tuple[str, int]:
            return "t", 2

        def schema_at(self, name: str, version: int) -> Schema:
            return new

        def get(self, table: str) -> None:
            raise AssertionError("the served version is recorded")

    held = SegmentRegistry()
    held.put("t_OFFLINE", CommittedSegment(build_segment(pa.table({"x": ["10", "9"]}), old, IndexingConfig(),
                                                         tmp_path, "s0", table_name="t_OFFLINE")))
    schemas = ServedSchemas(Source())
    schemas.ensure("t_OFFLINE")
    info = TableInfo("t_OFFLINE", ("x",), frozenset(), frozenset(), (), frozenset({"x"}))
    plan = plan_sql("SELECT COUNT(*) FROM t WHERE x = '010'", lambda name, **_: info)
    assert plan.prune_filter is not None
    request = ServerQueryRequest("1", "t_OFFLINE", plan.server_sql, ("s0",), 10_000, plan.docs_scanned_sql,
                                 plan.docs_column, None, prune_filter=plan.prune_filter)
    result, stats = QueryExecutor(held, schemas=schemas).execute(request)
    assert stats.exceptions == () and stats.numSegmentsPrunedByServer == 0
    assert merge_partials(plan, [result], new.arrow_schema()).to_pylist() == [{"count(*)": 1}]
