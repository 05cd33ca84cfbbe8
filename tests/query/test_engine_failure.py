"""DuckDB failing inside itself (``cuvee.query.execute``): dictionary-encoded binary columns never reach it encoded,
and should an internal error invalidate a process-wide database anyway, that query fails with a clear error and the
next one runs on a new database, with Pinot's functions registered again.

The failure is DuckDB's own (1.5.6): a filter over a dictionary of binary values bound without ``duckdb_readable``
raises "Attempted to dereference unique_ptr that is NULL!" and invalidates the database."""

from __future__ import annotations

import copy
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from cuvee.config import Schema, TableConfig
from cuvee.config.schema import DataType
from cuvee.evolution import serving
from cuvee.multistage.engine import Stage
from cuvee.query import execute
from cuvee.query.errors import QueryError
from cuvee.query.execute import ENGINE_FAILED, duckdb_readable, run_sql
from cuvee.server.query_executor import QueryExecutor
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableContext
from tests.broker.helpers import SCHEMA_DOC, TABLE, TABLE_DOC, committed, event_rows, segment_name
from tests.server.test_query_executor import request

FILTER = "SELECT count(*) AS n FROM t WHERE b = from_hex('abcd')"


def _blobs(rows: int = 120) -> pa.Table:
    """A dictionary-encoded binary column, as segments hold a BYTES dimension."""
    ids = pa.array([i % 2 for i in range(rows)], pa.int32())
    return pa.table({"b": pa.DictionaryArray.from_arrays(ids, pa.array([b"\xab\xcd", b"\xff"], pa.binary())),
                     "v": pa.array(range(rows), pa.int64())})


@pytest.fixture
def unguarded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A binding path that hands DuckDB the columns as they are (the failure ``duckdb_readable`` prevents)."""
    monkeypatch.setattr(execute, "duckdb_readable", lambda table: table)


def test_dictionary_binary_columns_are_decoded_and_filter() -> None:
    table = _blobs()
    readable = duckdb_readable(table)
    assert readable.schema.field("b").type == pa.binary() and readable.column("b").equals(table.column("b").cast(
        pa.binary()))
    for kind in (pa.large_binary(), pa.binary(2)):
        encoded = pa.table({"b": pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()),
                                                                pa.array([b"\xab\xcd"], kind))})
        assert duckdb_readable(encoded).schema.field("b").type == kind
    strings = pa.table({"s": pa.array(["a", "b"]).dictionary_encode(), "b": pa.array([b"x", b"y"])})
    assert duckdb_readable(strings) is strings  # nothing to decode: the same table, no copy
    assert run_sql(FILTER, "t", table).to_pylist() == [{"n": 60}]
    assert run_sql(FILTER, "t", table).to_pylist() == [{"n": 60}]  # and the database still runs


def test_an_internal_error_fails_its_query_only_and_a_new_database_serves_the_next(unguarded: None) -> None:
    with pytest.raises(QueryError) as failed:
        run_sql(FILTER, "t", _blobs())  # the real DuckDB failure: the database is invalidated
    assert failed.value.message == ENGINE_FAILED
    assert "unique_ptr" not in failed.value.message and "Error" not in failed.value.message
    # the next query, over other rows, runs: on a new database with Pinot's functions (hashes) registered
    rows = pa.table({"v": pa.array([1, 2, 3], pa.int64())})
    assert run_sql("SELECT sum(v) AS s, cuvee_fnv1a_32(from_hex('61')) AS h FROM t", "t", rows).to_pylist() == [
        {"s": 6, "h": -468965076}]


def test_a_failed_database_is_replaced_only_when_invalidated(unguarded: None) -> None:
    con = execute.sandboxed_cursor(10)
    database = execute._databases[(True, False)]
    con.close()
    assert execute.engine_failure(duckdb.ConversionException("not a failure inside DuckDB")) is None
    assert execute._databases[(True, False)] is database
    assert execute.engine_failure(duckdb.InternalException("a failure another database had")) == ENGINE_FAILED
    assert execute._databases[(True, False)] is database  # it still runs: kept
    full = duckdb.FatalException("FATAL Error: could not write file: No space left on device")
    assert execute.engine_failure(full) == ("the query engine failed: could not write file: No space left on "
                                           "device; it was reset, so other queries run")  # a reason worth saying
    with pytest.raises(QueryError):
        run_sql(FILTER, "t", _blobs())
    assert execute._databases.get((True, False)) is not database


def _executor(tmp_path: Path) -> tuple[QueryExecutor, list[str]]:
    """A server over one segment built before its schema gained ``blob`` (BYTES, default ``abcd``)."""
    registry = SegmentRegistry()
    registry.put(TABLE, committed(tmp_path, segment_name(0, 0), event_rows(300, 0, 1)))
    evolved = copy.deepcopy(SCHEMA_DOC)
    evolved["dimensionFieldSpecs"].append({"name": "blob", "dataType": "BYTES", "defaultNullValue": "abcd"})

    class Source:
        def served_version(self, table: str) -> tuple[str, int]:
            return "events", 3

        def schema_at(self, name: str, version: int) -> Schema:
            return Schema.from_json(evolved)

        def get(self, table: str) -> TableContext:
            return TableContext(TableConfig.from_json(TABLE_DOC), Schema.from_json(evolved), "events")

    schemas = ServedSchemas(Source())
    schemas.ensure(TABLE)
    return QueryExecutor(registry, schemas=schemas), [segment_name(0, 0)]


BLOB_FILTER = "SELECT COUNT(*) AS n FROM cuvee_segments WHERE blob = from_hex('abcd')"
LATER = ["SELECT COUNT(*) AS n FROM cuvee_segments WHERE v > 0", "SELECT SUM(v) AS s FROM cuvee_segments"]


def test_an_added_bytes_column_default_is_served_plain_and_filters(unguarded: None, tmp_path: Path) -> None:
    executor, names = _executor(tmp_path)
    blobs, stats = executor.execute(request(BLOB_FILTER, names))
    assert not stats.exceptions and blobs is not None and blobs.to_pylist() == [{"n": 300}]
    for sql in LATER:
        after, stats = executor.execute(request(sql, names))
        assert not stats.exceptions and after is not None, stats.exceptions


def test_a_server_answers_the_failing_query_with_a_clear_error_and_the_next_ones(
        unguarded: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serving, "_DICTIONARY_TYPES", {DataType.STRING, DataType.JSON, DataType.BYTES})
    executor, names = _executor(tmp_path)  # the default dictionary-encoded, bound as it is: DuckDB fails
    failed, stats = executor.execute(request(BLOB_FILTER, names))
    assert failed is None and [e.message for e in stats.exceptions] == [ENGINE_FAILED]
    for sql in LATER:
        after, stats = executor.execute(request(sql, names))
        assert not stats.exceptions and after is not None, stats.exceptions
    assert after.to_pylist()[0]["s"] is not None


def test_the_broker_stage_answers_a_failure_clearly_and_runs_the_next_stage(unguarded: None) -> None:
    with pytest.raises(QueryError) as failed:
        Stage(64).run(FILTER, {"t": _blobs()})
    assert failed.value.message == f"the broker stage failed: {ENGINE_FAILED}"
    assert Stage(64).run("SELECT sum(v) AS s FROM t", {"t": _blobs()}).column("s").to_pylist()[0] == sum(range(120))
