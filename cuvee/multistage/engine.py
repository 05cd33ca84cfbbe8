"""The broker's stage: the query over the leaves' relations, in DuckDB, under a memory bound.

A database of its own, apart from the ones merging partials (``cuvee.query.execute``): its memory limit is the
broker's ``multistage_memory_mb``, so one large join cannot take the memory every other query merges in. Sandboxed
like those (no files, no network, no spilling to disk, settings locked). A stage that does not fit is refused in
words that point to where it fits: the Spark data source reads a table on a cluster of any size.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

import duckdb
import pyarrow as pa

from cuvee.query import duckdb_functions
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.execute import (
    ENGINE_FAILED,
    duckdb_failure,
    healthy,
    interrupt_at,
    interrupt_quietly,
    register,
    set_deadline,
    user_message,
)

log = logging.getLogger(__name__)

SPARK_HINT = ("run it on Spark with Cuvee's data source (spark.read.format(\"cuvee\"), docs/pipeline.md), which "
              "reads tables on a cluster of any size")

_BATCH_ROWS = 64 * 1024
_databases: dict[tuple[int, int], duckdb.DuckDBPyConnection] = {}
_lock = threading.Lock()


def _database(memory_mb: int, threads: int) -> duckdb.DuckDBPyConnection:
    with _lock:
        database = _databases.get((memory_mb, threads))
        if database is None:
            database = duckdb.connect(config={"enable_external_access": False, "memory_limit": f"{memory_mb}MB",
                                              "threads": threads, "temp_directory": ""})
            duckdb_functions.register(database)  # as the servers' databases do: the same functions in every stage
            database.execute("SET lock_configuration = true")
            _databases[(memory_mb, threads)] = database
        return database


def _forget_if_broken(key: tuple[int, int]) -> None:
    """Drop the stage database of ``key`` when it no longer runs a statement: the next stage gets a new one."""
    with _lock:
        database = _databases.get(key)
        if database is not None and not healthy(database):
            del _databases[key]


class Stage:
    """One broker stage in flight; ``interrupt`` (any thread) stops it at the query's deadline."""

    def __init__(self, memory_mb: int, threads: int = 2) -> None:
        self.memory_mb = memory_mb
        self._key = (memory_mb, threads)
        self._cursor = _database(memory_mb, threads).cursor()

    def run(self, sql: str, relations: Mapping[str, pa.Table], deadline: float | None = None) -> pa.Table:
        """The answer of ``sql`` over ``relations`` (name → Arrow table); QueryError for anything that fails.
        ``deadline`` (``time.monotonic()``): when the Python functions it calls give up (``set_deadline``); the
        caller interrupts the stage then."""
        held = sum(table.nbytes for table in relations.values())
        if held > self.memory_mb * 1024 * 1024:
            raise QueryError(QueryErrorCode.QUERY_VALIDATION,
                             f"the rows this query joins take {held // (1024 * 1024)} MiB at the broker, more than "
                             f"its multistage_memory_mb ({self.memory_mb}); narrow the query, or {SPARK_HINT}")
        if deadline is not None and time.monotonic() >= deadline:  # started late (a busy pool): an interrupt
            self.close()  # sent before the statement began is lost, so it must not begin
            raise QueryError(QueryErrorCode.BROKER_TIMEOUT, "the broker stage ran out of the query's time")
        timer = interrupt_at(deadline, self._cursor) if deadline is not None else None
        try:
            set_deadline(self._cursor, sql, deadline)
            for name, table in relations.items():
                register(self._cursor, name, table)
            answer = self._bounded_answer(self._cursor.execute(sql))
        except duckdb.OutOfMemoryException:
            raise self._too_big() from None
        except (duckdb.InternalException, duckdb.FatalException) as exc:  # DuckDB failed inside: invalidated
            log.error("DuckDB failed inside itself in a broker stage: %s", str(exc).splitlines()[0] if str(exc)
                      else type(exc).__name__)
            _forget_if_broken(self._key)
            raise QueryError(QueryErrorCode.QUERY_EXECUTION, f"the broker stage failed: {ENGINE_FAILED}") from None
        except duckdb.Error as exc:
            if isinstance(exc, duckdb.InterruptException) or (deadline is not None and time.monotonic() >= deadline):
                raise QueryError(QueryErrorCode.BROKER_TIMEOUT, "the broker stage ran out of the query's "
                                                                "time") from None
            raise self._failed(exc) from None
        finally:
            if timer is not None:
                timer.cancel()
            self.close()
        return _pinot_types(answer)

    @staticmethod
    def _failed(exc: duckdb.Error) -> QueryError:
        if isinstance(exc, duckdb.BinderException):
            return _binder_error(str(exc))
        failure = duckdb_failure(exc)
        if failure.code != QueryErrorCode.QUERY_EXECUTION:
            return failure
        return QueryError(QueryErrorCode.QUERY_EXECUTION, f"the broker stage failed: {failure.message[:300]}")

    def _bounded_answer(self, result: duckdb.DuckDBPyConnection) -> pa.Table:
        """The answer, fetched in batches and counted against the bound as they come (DuckDB's memory limit covers
        its own buffers, not the Arrow answer it hands over)."""
        reader = result.to_arrow_reader(_BATCH_ROWS)
        batches: list[pa.RecordBatch] = []
        held = 0
        for batch in reader:
            held += batch.nbytes
            if held > self.memory_mb * 1024 * 1024:
                raise self._too_big()
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema)

    def _too_big(self) -> QueryError:
        return QueryError(QueryErrorCode.QUERY_VALIDATION,
                          f"the query needs more than the broker's multistage_memory_mb ({self.memory_mb}) to "
                          f"run; narrow it, or {SPARK_HINT}")

    def interrupt(self) -> None:
        interrupt_quietly(self._cursor)

    def close(self) -> None:
        try:
            self._cursor.close()
        except duckdb.Error:
            pass


def _pinot_types(table: pa.Table) -> pa.Table:
    """The answer in types Pinot's response has: DuckDB's wide sums (HUGEINT, DECIMAL) whole numbers LONG when
    they fit, else DOUBLE; intervals and other types without a Pinot counterpart as their text (STRING)."""
    for i, field in enumerate(table.schema):
        column = table.column(i)
        if pa.types.is_interval(field.type) or pa.types.is_duration(field.type) or pa.types.is_time(field.type):
            table = table.set_column(i, field.name, pa.array([None if v is None else str(v)
                                                              for v in column.to_pylist()], pa.string()))
            continue
        if not pa.types.is_decimal(field.type):
            continue
        if field.type.scale == 0:
            try:
                converted = column.cast(pa.int64())
            except pa.ArrowInvalid:  # beyond a LONG
                converted = column.cast(pa.float64())
        else:
            converted = column.cast(pa.float64())
        table = table.set_column(i, field.name, converted)
    return table


def _binder_error(text: str) -> QueryError:
    """DuckDB's binder words as a user's: an unknown column is Pinot's 710; the rest 150 with the first line."""
    first = user_message(text.splitlines()[0]) if text else "the query does not bind"
    for marker in ('Referenced column "', 'does not have a column named "'):
        if marker in first:
            name = first.split(marker, 1)[1].split('"', 1)[0]
            return QueryError(QueryErrorCode.UNKNOWN_COLUMN, f"Unknown columnName '{name}' found in the query")
    return QueryError(QueryErrorCode.SQL_PARSING, first[:300])
