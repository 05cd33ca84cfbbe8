"""Run a plan's two steps with DuckDB over Arrow tables: no files, no network, no shared state.

The server calls ``run_server_step`` with its segments' Arrow tables; the broker calls ``merge_partials`` with
the servers' answers. Each call takes its own cursor on a process-wide in-memory DuckDB database: a cursor
costs microseconds where a new database costs ~15 ms, and names registered on a cursor are private to it, so
concurrent queries never see each other's relations. DuckDB failures become QueryError 200
(QueryExecutionError), the code Pinot servers report.

The broker's merge runs under its query's deadline (``deadline``: a ``time.monotonic()`` value): the shared
watcher (``cuvee.node.deadlines``) interrupts the cursor then, and the Python functions a step calls read it from
the cursor's ``cuvee_deadline`` variable (``set_deadline``); either way the query fails with ``PastDeadlineError``.

There are two databases: a single-threaded one for small inputs and one using every core for large ones. A
trivial query on the multi-threaded one costs ~3 ms of waking and joining its workers where the single-threaded
one takes ~1 ms (measured on 2 cores): most of a small query's time. ``rows`` picks (``SMALL_INPUT_ROWS``).

Every Arrow table reaches DuckDB through ``register`` (``duckdb_readable``): DuckDB 1.5 fails with an internal
error filtering a dictionary-encoded binary column (segments hold BYTES dimensions so), and an internal error
invalidates its whole database. Should one happen anyway, ``engine_failure`` drops the invalidated databases so that
the next cursor gets a new one: one query fails, not every later query of the process.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.node.deadlines import DEADLINES, Handle
from cuvee.query import duckdb_functions
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.funnel_window import DEADLINE_VARIABLE, TOO_MANY_EVENTS
from cuvee.query.group_trim import (
    DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE,
    DEFAULT_NUM_GROUPS_LIMIT,
    GROUPS_RELATION,
    GroupCut,
    GroupTrim,
    cut,
)
from cuvee.query.rewrite import PARTIALS_RELATION, SERVER_RELATION, QueryPlan
from cuvee.query.virtual_columns import with_schema
from cuvee.query.wanted_keys import WantedKeys, WantedKeysError

log = logging.getLogger(__name__)


SMALL_INPUT_ROWS = 100_000  # inputs up to this many rows run on the single-threaded database
MEMORY_SHARE = 0.4  # of physical memory, for each query database: together the 80% DuckDB gives one by default
INGESTION_MEMORY_SHARE = 0.1  # for the ingestion transforms' database (batches of a fetch, never a whole table)


def memory_limit(share: float = MEMORY_SHARE) -> str | None:
    try:
        return f"{int(os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') * share)}B"
    except (ValueError, OSError, AttributeError):  # a platform without these: DuckDB's own default
        return None

_databases: dict[tuple[bool, bool], duckdb.DuckDBPyConnection] = {}
_database_lock = threading.Lock()
_large_threads = 0  # DuckDB threads of the database for large inputs (0: every core; set_query_threads)


def set_query_threads(threads: int) -> None:
    """The DuckDB threads a large input's work may use in this process (a server's ``query_threads``; 0: every
    core). Taken when that database is made: set it before the first query (a server does at start). A process
    holds one such database, so with several servers in one process (tests) the first one's value stands."""
    global _large_threads
    with _database_lock:
        if (False, False) in _databases or (False, True) in _databases:
            if threads != _large_threads:
                log.warning("query_threads %d not applied: this process's query database was made with %d",
                            threads, _large_threads)
            return
        _large_threads = threads


def sandboxed_cursor(rows: int | None = None, *, exact_try: bool = False) -> duckdb.DuckDBPyConnection:
    """A private cursor on a process-wide in-memory DuckDB database, sandboxed: no files, no network, settings
    locked (user SQL and ingestion expressions run here). ``rows``: how many input rows the work reads (None:
    unknown, taken as large); small inputs get the single-threaded database. ``exact_try``: a database whose
    ``try(e)`` always catches ``e``'s errors (the ingestion transforms): DuckDB's common-subexpression elimination
    moves a subexpression that two expressions share out of their ``try`` (``try(CAST(r AS DOUBLE))`` beside
    ``try(CAST(r AS DOUBLE) * 2)`` raises on 'oops'), so that database runs without it. Close it when done."""
    small = rows is not None and rows <= SMALL_INPUT_ROWS
    with _database_lock:
        database = _databases.get((small, exact_try))
        if database is None:
            config: dict[str, str | bool | int] = {"enable_external_access": False}
            if exact_try:
                config["disabled_optimizers"] = "common_subexpressions"
            if small:
                config["threads"] = 1
            elif _large_threads:
                config["threads"] = _large_threads
            limit = memory_limit(INGESTION_MEMORY_SHARE if exact_try else MEMORY_SHARE)
            if limit is not None:
                config["memory_limit"] = limit
            database = duckdb.connect(config=config)
            duckdb_functions.register(database)  # Pinot's hashes and funnels, as Python functions
            database.execute("SET lock_configuration = true")
            _databases[(small, exact_try)] = database
        return database.cursor()


def _binary(kind: pa.DataType) -> bool:
    return (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)
            or pa.types.is_binary_view(kind))


def duckdb_readable(table: pa.Table) -> pa.Table:
    """``table`` as DuckDB can read it: its dictionary-encoded binary columns decoded (plain binary and dictionary
    strings read fine). DuckDB 1.5.6 raises "Attempted to dereference unique_ptr that is NULL!" filtering a
    dictionary of binary values, an internal error that invalidates the database for every later query. The same
    table (no copy) when it holds none; else a copy of those columns' values."""
    for index, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type) and _binary(field.type.value_type):
            values = field.type.value_type
            table = table.set_column(index, field.with_type(values), table.column(index).cast(values))
    return table


def register(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """``table`` bound as ``name`` on ``con``: the one way an Arrow table reaches DuckDB (``duckdb_readable``)."""
    con.register(name, duckdb_readable(table))


ENGINE_FAILED = ("the query failed inside the query engine (an internal error, logged on this server); the engine "
                 "was reset, so other queries run")


def engine_failure(exc: duckdb.Error) -> str | None:
    """What to answer when ``exc`` is DuckDB failing inside itself (an internal or fatal error), after which its
    database is invalidated: every later statement on it fails ("database has been invalidated"); None for any
    other error. Each process-wide database that no longer runs a statement is dropped then (the next
    ``sandboxed_cursor`` makes a new one, with its functions) and the failure is logged. The answer: a fatal
    error's reason (a full disk), else ``ENGINE_FAILED`` (an internal error's text names DuckDB's code, nothing a
    user can act on). Only after a failure: probing costs a statement per database."""
    if not isinstance(exc, (duckdb.InternalException, duckdb.FatalException)):
        return None
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    log.error("DuckDB failed inside itself: %s", first)
    with _database_lock:
        for key, database in list(_databases.items()):
            if not healthy(database):
                del _databases[key]  # not closed: cursors in flight still hold it, and fail on their own
                log.warning("a DuckDB database of this process was invalidated by that failure; a new one replaces it")
    reason = _FATAL.sub("", first).strip()
    if isinstance(exc, duckdb.InternalException) or not reason or "invalidated" in reason:
        return ENGINE_FAILED
    return f"the query engine failed: {reason[:300]}; it was reset, so other queries run"


_FATAL = re.compile(r"^FATAL Error: ")


def healthy(database: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``database`` still runs a statement (DuckDB invalidates a database after an internal error)."""
    try:
        database.execute("SELECT 1").fetchall()
        return True
    except duckdb.Error:
        return False


class PastDeadlineError(QueryError):
    """A step ran out of its query's time (the broker's usual timeout answer, 400, unless the caller says
    otherwise)."""

    def __init__(self, message: str = "the query ran out of its time") -> None:
        super().__init__(QueryErrorCode.BROKER_TIMEOUT, message)


def set_deadline(con: duckdb.DuckDBPyConnection, sql: str, deadline: float | None) -> None:
    """Tell the Python functions ``sql`` calls when its query's time is up (``time.monotonic()``): DuckDB cannot
    interrupt one mid-call, so they look (``cuvee.query.funnel_window``). SQL that calls none costs nothing."""
    if deadline is not None and DEADLINE_VARIABLE in sql:
        con.execute(f"SET VARIABLE {DEADLINE_VARIABLE} = CAST('{float(deadline)!r}' AS DOUBLE)")


REINTERRUPT_SECONDS = 0.05  # past its deadline a statement is interrupted again this often (DuckDB forgets an
# interrupt that comes before its statement starts)


def interrupt_quietly(con: duckdb.DuckDBPyConnection) -> None:
    """Interrupt ``con``'s statement; nothing when it finished and the cursor closed meanwhile."""
    try:
        con.interrupt()
    except duckdb.Error:
        pass


def interrupt_at(deadline: float, con: duckdb.DuckDBPyConnection) -> Handle:
    """Interrupt ``con`` at ``deadline`` (``time.monotonic()``) and again until the handle is cancelled: the one
    shared watcher every step uses (a timer thread per query cost each its start)."""
    return DEADLINES.watch(deadline, lambda: interrupt_quietly(con), every=REINTERRUPT_SECONDS)


def run_sql(sql: str, relation: str, table: pa.Table, others: Mapping[str, pa.Table] | None = None, *,
            deadline: float | None = None) -> pa.Table:
    """``sql`` over ``table`` bound as ``relation`` (and ``others`` under their names), as an Arrow table; past
    ``deadline`` (``time.monotonic()``), ``PastDeadlineError``."""
    if deadline is not None and time.monotonic() >= deadline:
        raise PastDeadlineError()
    con = sandboxed_cursor(_input_values(table))
    timer = interrupt_at(deadline, con) if deadline is not None else None
    try:
        set_deadline(con, sql, deadline)
        register(con, relation, table)
        for name, rows in (others or {}).items():
            register(con, name, rows)
        return con.sql(sql).to_arrow_table()
    except duckdb.Error as e:
        if deadline is not None and time.monotonic() >= deadline:
            raise PastDeadlineError() from None
        if (failure := engine_failure(e)) is not None:
            raise QueryError(QueryErrorCode.QUERY_EXECUTION, failure) from None
        raise duckdb_failure(e) from None
    finally:
        if timer is not None:
            timer.cancel()
        con.close()


def _input_values(table: pa.Table) -> int:
    """How much a step over ``table`` reads, to choose its database: its rows and the values in its list columns.
    A DISTINCTCOUNT's partial row holds its group's every distinct value: the broker's merge of 599 such rows
    holding 1M UserIDs took 220 ms on both cores and 358 ms on one, which their row count chose."""
    values = table.num_rows
    for column in table.columns:
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            values += sum(len(chunk.values) for chunk in column.chunks)
    return values


def _union(tables: Sequence[pa.Table], schema: pa.Schema | None) -> pa.Table:
    if not tables:
        if schema is None:
            raise ValueError("an empty union needs a schema")
        return schema.empty_table()
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables, promote_options="permissive")


def run_server_step(plan: QueryPlan, segments: Sequence[pa.Table], schema: pa.Schema | None = None,
                    lookups: Mapping[str, pa.Table] | None = None, *,
                    num_groups_limit: int = DEFAULT_NUM_GROUPS_LIMIT,
                    min_trim_size: int = DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE,
                    wanted: WantedKeys | None = None) -> pa.Table:
    """A server's partial result over the union of its segments (``schema`` types the union of none) and the
    dimension tables its LOOKUPs read (relation -> rows; default: none of their rows), its groups bounded as a
    server bounds them (``keep_groups``), or only the ``wanted`` ones (``wanted_groups``)."""
    if lookups is None:
        lookups = {lookup.relation: lookup.empty() for lookup in plan.lookups}
    partial = run_sql(plan.server_sql, SERVER_RELATION, _union(segments, schema), lookups)
    if plan.group_trim is None:
        return partial
    con = sandboxed_cursor(partial.num_rows)
    try:
        if wanted is not None:
            return wanted_groups(con, partial, wanted)
        return keep_groups(con, partial, plan.group_trim, num_groups_limit, min_trim_size)[0]
    except WantedKeysError as e:
        raise QueryError(QueryErrorCode.QUERY_EXECUTION, str(e)) from None
    except duckdb.Error as e:
        if (failure := engine_failure(e)) is not None:
            raise QueryError(QueryErrorCode.QUERY_EXECUTION, failure) from None
        raise QueryError(QueryErrorCode.QUERY_EXECUTION, str(e).splitlines()[0]) from None
    finally:
        con.close()


def keep_groups(con: duckdb.DuckDBPyConnection, groups: pa.Table, trim: GroupTrim, num_groups_limit: int,
                min_trim_size: int) -> tuple[pa.Table, GroupCut]:
    """A server's ``groups`` (its partial result) cut to what numGroupsLimit and the trim size leave, the first of
    its ranking ``trim.order_sql`` (run on ``con``; ranked only when some are cut), and what was done."""
    decided = cut(groups.num_rows, trim, num_groups_limit, min_trim_size)
    if decided.keep >= groups.num_rows:
        return groups, decided
    register(con, GROUPS_RELATION, groups)
    # the LIMIT on its own line: a trailing comment in the (checked) SELECT cannot swallow it
    return con.sql(f"{trim.order_sql}\nLIMIT {int(decided.keep)}").to_arrow_table(), decided


WANTED_RELATION = "cuvee_wanted"  # a second round's group keys (``cuvee.query.exact_trim``)


def wanted_groups(con: duckdb.DuckDBPyConnection, groups: pa.Table, wanted: WantedKeys) -> pa.Table:
    """The rows of a server's ``groups`` whose keys are among ``wanted``'s rows (its columns: ``__g<i>`` keys,
    read as ``groups``' types; WantedKeysError when they do not fit), all of them, untrimmed: the exact partials of
    the groups a broker's second round asks for (``cuvee.query.exact_trim``). A NULL key matches a NULL key, as
    groups do."""
    keys = wanted.typed(groups.schema)
    register(con, GROUPS_RELATION, groups)
    register(con, WANTED_RELATION, keys)
    on = " AND ".join(f"g.{key} IS NOT DISTINCT FROM w.{key}" for key in keys.column_names)
    return con.sql(f"SELECT g.* FROM {GROUPS_RELATION} AS g SEMI JOIN {WANTED_RELATION} AS w ON {on}").to_arrow_table()


def _named_columns(plan: QueryPlan, schema: pa.Schema) -> pa.Schema:
    """The columns of ``schema`` the server step can read (the planner quotes every column it names; a quoted name
    inside a string only keeps a column too many), at least one: DuckDB pays per column of an empty table too, and
    a wide table's (105 columns) cost 7-35 ms when every segment was pruned."""
    sql = plan.server_sql
    named = [field for field in schema if '"' + field.name.replace('"', '""') + '"' in sql]
    return pa.schema(named or list(schema)[:1])


def merge_partials(plan: QueryPlan, partials: Sequence[pa.Table], table_schema: pa.Schema, *,
                   deadline: float | None = None) -> pa.Table:
    """The final answer from the servers' partial results; past ``deadline`` (``time.monotonic()``: the merge is
    interrupted then), ``PastDeadlineError``.

    With no partials (no server had a segment, or none answered) the server step runs over an empty table of
    ``table_schema`` so that the answer still has typed columns (and COUNT(*) says 0).
    """
    if not partials:
        partials = [run_server_step(plan, [], _named_columns(plan, with_schema(table_schema)))]
    union = _union(partials, None)
    if plan.simple_merge is not None:
        merged = _simple_merge(plan, union)
        if merged is not None:
            return merged
    if plan.selection_order is not None:
        selected = _selection_merge(plan, plan.selection_order, union)
        if selected is not None:
            return selected
    return run_sql(plan.final_sql, PARTIALS_RELATION, union, deadline=deadline)


def _selection_merge(plan: QueryPlan, order: tuple[tuple[str, bool, bool], ...],
                     partials: pa.Table) -> pa.Table | None:
    """A selection's rows merged in Arrow as its final SQL would: sorted by partial columns (ties in any order,
    as there), then OFFSET and LIMIT. DuckDB cost ~2 ms for the ten
    rows of one column and ~18 ms for ten rows of 105 (``SELECT *``), most of those queries' broker time. None (the
    SQL decides) when a sort key is not a plain scalar or is a float (where NaN's place would have to match)."""
    keys = []
    for column, descending, nulls_first in order:
        kind = partials.schema.field(column).type
        if pa.types.is_floating(kind) or not any(plain(kind) for plain in _PLAIN):
            return None
        keys.append((column, "descending" if descending else "ascending", "at_start" if nulls_first else "at_end"))
    offset, limit = plan.offset, plan.limit if plan.limit is not None else partials.num_rows
    if keys:
        rows = pc.sort_indices(partials, sort_keys=keys)
        picked = partials.take(rows.slice(offset, limit))
    else:
        picked = partials.slice(offset, limit)
    columns = [picked.column(f"__c{i}") for i in range(len(plan.column_names))]
    return pa.Table.from_arrays(columns, names=list(plan.column_names))


def _simple_merge(plan: QueryPlan, partials: pa.Table) -> pa.Table | None:
    """A one-row aggregation of COUNT/SUM/MIN/MAX/AVG merged in Arrow as the final SQL would (``_FINALS`` in
    cuvee.query.rewrite): ~3 ms of DuckDB planning and running saved on every such query, most of a
    ``SELECT COUNT(*)``'s time at the broker. None (the SQL decides) when a float partial holds a NaN, which
    DuckDB orders above every number and Arrow skips."""
    assert plan.simple_merge is not None
    try:
        return _simple_columns(plan, partials)
    except (TypeError, ValueError, pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a type Arrow does not reduce
        return None  # alike (a multi-value column's lists): the final SQL decides


_PLAIN = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
          pa.types.is_large_string, pa.types.is_temporal, pa.types.is_boolean)


def _simple_columns(plan: QueryPlan, partials: pa.Table) -> pa.Table | None:
    assert plan.simple_merge is not None
    columns: list[pa.Array] = []
    for kind, refs in plan.simple_merge:
        values = [partials.column(ref) for ref in refs]
        if kind == "distinctcount":
            counted = _distinct_count(values[0])
            if counted is None:
                return None
            columns.append(counted)
            continue
        if not all(any(plain(v.type) for plain in _PLAIN) for v in values):
            return None
        if any(pa.types.is_floating(v.type) and pc.any(pc.is_nan(v)).as_py() for v in values):
            return None
        if kind in ("count", "countsum"):  # countsum: distinct counts of values on one server each, INTEGER
            total = pc.sum(values[0]).as_py()
            columns.append(pa.array([int(total or 0)], pa.int64() if kind == "count" else pa.int32()))
        elif kind == "sum":
            columns.append(pa.array([_double(pc.sum(values[0]).as_py())], pa.float64()))
        elif kind == "avg":
            total, count = pc.sum(values[0]).as_py(), pc.sum(values[1]).as_py()
            columns.append(pa.array([_double(total) / float(count) if total is not None and count else None],
                                    pa.float64()))
        else:
            found = pc.min(values[0]) if kind == "min" else pc.max(values[0])
            columns.append(pa.array([found.as_py()], found.type))
    return pa.table(columns, names=list(plan.column_names))


def _distinct_count(lists: pa.ChunkedArray) -> pa.Array | None:
    """The number of distinct values in the servers' distinct-value lists (NULLs left out by the servers), as the
    final SQL's INTEGER; None (the SQL decides) for floats, whose NaN and -0.0 Arrow's hashing may not equate as
    DuckDB does, and for types Arrow does not hash alike."""
    if not (pa.types.is_list(lists.type) or pa.types.is_large_list(lists.type)):
        return None
    kind = lists.type.value_type
    if pa.types.is_floating(kind) or not any(plain(kind) for plain in _PLAIN):
        return None
    values = pa.chunked_array([chunk.flatten() for chunk in lists.chunks], kind)
    return pa.array([pc.count_distinct(values, mode="only_valid").as_py()], pa.int32())


def _double(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


_DUCKDB_NOISE = re.compile(r"\s*(You might need to add explicit type casts\.|LINE \d+:.*|Candidate functions:.*)$",
                           re.DOTALL)
_DUCKDB_KIND = re.compile(r"^(Binder|Conversion|Catalog|Parser|Invalid Input|Not implemented|Out of Range) Error: ")
_PYTHON_FUNCTION = re.compile(r"^Python exception occurred while executing the UDF: (\w+: )?")  # ours say what failed


def check_plan(plan: QueryPlan, table_schema: pa.Schema) -> None:
    """Bind both steps of ``plan`` over the table's columns without running them: what DuckDB cannot bind (a
    function that does not take these argument types, a comparison of incompatible types) is refused before any
    server is asked, with Pinot's 700 (QueryValidationError) and a message naming the problem instead of an
    execution failure on every server. Nothing is evaluated (the steps become views; a constant a query computes
    is not folded here), so the check costs a millisecond whatever the query asks. Failures that need rows (a bad
    cast of one value) still happen at execution."""
    con = sandboxed_cursor(0)
    try:
        register(con, SERVER_RELATION, with_schema(table_schema).empty_table())  # and Pinot's virtual columns
        for lookup in plan.lookups:  # LOOKUP's dimension tables, typed by their schemas (the broker adds them)
            register(con, lookup.relation, lookup.empty())
        con.execute(f"CREATE TEMP VIEW {PARTIALS_RELATION} AS {plan.server_sql}")
        con.sql(plan.final_sql)  # a relation: bound here, run only when fetched (never)
        if plan.whole_sql is not None:  # the same query in one step, for a single server
            con.sql(plan.whole_sql)
        if plan.group_trim is not None:  # how servers rank their groups, over their partials
            con.execute(f"CREATE TEMP VIEW {GROUPS_RELATION} AS SELECT * FROM {PARTIALS_RELATION}")
            con.sql(plan.group_trim.order_sql)
    except duckdb.Error as exc:
        if (failure := engine_failure(exc)) is not None:
            raise QueryError(QueryErrorCode.QUERY_EXECUTION, failure) from None
        raise QueryError(QueryErrorCode.QUERY_VALIDATION, f"the query cannot run on this table: "
                                                          f"{user_message(str(exc).splitlines()[0])}") from None
    finally:
        con.close()


def duckdb_failure(exc: duckdb.Error) -> QueryError:
    """A failed statement as the client sees it: 700 when a bound on the query's own data was passed (a windowed
    funnel's events per group), else 200 with DuckDB's first line in our words."""
    first = user_message(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
    if TOO_MANY_EVENTS in first:
        return QueryError(QueryErrorCode.QUERY_VALIDATION, first[first.index(TOO_MANY_EVENTS):][:300])
    return QueryError(QueryErrorCode.QUERY_EXECUTION, first)


def user_message(duckdb_text: str) -> str:
    """DuckDB's first error line without its engine wording: the kind prefix and the hints that name DuckDB's
    internals go; what is left names the function or the types."""
    text = _DUCKDB_NOISE.sub("", _PYTHON_FUNCTION.sub("", _DUCKDB_KIND.sub("", duckdb_text.strip())))
    text = text.replace("STRING_LITERAL", "STRING").replace("INTEGER_LITERAL", "INT").replace("VARCHAR", "STRING")
    return text.strip() or "it cannot be bound"
