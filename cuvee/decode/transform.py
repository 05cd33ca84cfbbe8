"""Ingestion transforms and filter (a table's ``ingestionConfig``), applied to each decoded batch before it is
appended to a segment.

Pinot's ``transformConfigs`` compute a schema column from others (``{"columnName": "day", "transformFunction":
"toDateTime(ts, 'yyyy-MM-dd')"}``) and ``filterConfig.filterFunction`` drops the rows it is true for. Cuvee takes
both as SQL expressions: DuckDB's functions, plus the Pinot scalar functions queries translate (``toEpochSeconds``,
``fromEpochDays``, ``toDateTime``, ``plus``...). They read the schema's columns as decoded (before any transform)
and, like Pinot's, fields of the message that are not in the schema: those are decoded as strings
(``decode_schema``; cast them, e.g. ``CAST(amount_raw AS DOUBLE)``) and not stored. Groovy scripts are refused when
the table is created (``ingestion_issues``), as is anything DuckDB cannot bind against the schema, each with the
JSON path of the offending entry.

Both are compiled once into one DuckDB statement that runs over each Arrow batch (vectorised, no per-row Python) on
a cursor of the sandboxed database queries use (no files, no network). A transform or filter that fails on a row
(a cast of 'oops' to a number) follows Pinot's ``ingestionConfig.continueOnError``: unset or false (Pinot's
default), the row is skipped and reported as failed (the caller counts it as a bad row); true, the row is kept with
NULL in that column (DuckDB's ``try``) and a failing filter keeps it. Which rows failed is told in the same pass:
``try((e) IS NULL) IS NULL`` is true exactly where ``e`` raised (a NULL that ``e`` gives without failing, from a
missing field, stays a value). Rows dropped by the filter are counted by the caller, never silent; their offsets are
still consumed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from cuvee.config.errors import ConfigIssue
from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.config.sections import IngestionConfig
from cuvee.query.errors import QueryError
from cuvee.query.execute import engine_failure, register, sandboxed_cursor
from cuvee.query.functions import DIALECT, READ_DIALECT, translate_scalar
from cuvee.query.parse import refuse_internal_functions

log = logging.getLogger(__name__)
T = TypeVar("T")

_BATCH = "ingested_batch"
_NUMBERS = (DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE)
_ROW = "__cuvee_row"
_FAILED = "__cuvee_failed_"  # + the expression's number: true where it raised
_REASON_CHARS = 300


class TransformConfigError(ValueError):
    """An ingestion expression that cannot run; ``issues`` carry the JSON paths."""

    def __init__(self, issues: list[ConfigIssue]):
        super().__init__("; ".join(f"{i.path}: {i.message}" for i in issues))
        self.issues = issues


@dataclass(frozen=True)
class TransformResult:
    """The rows kept, their stream offsets, the offsets of the rows the filter dropped, and the rows skipped because
    a transform or the filter failed on them (``continueOnError`` unset or false): (position in the input batch,
    DuckDB's reason)."""

    batch: pa.RecordBatch
    offsets: np.ndarray
    dropped_offsets: np.ndarray
    failed: tuple[tuple[int, str], ...] = ()


class RowTransformer:
    """Compiled ingestion expressions for one schema. ``apply`` takes a batch decoded with ``decode_schema`` and
    returns the schema's columns only. Thread-compatible (one DuckDB connection per call)."""

    def __init__(self, schema: Schema, ingestion: IngestionConfig):
        compiled = _compile(schema, ingestion)
        if compiled.issues:
            raise TransformConfigError(compiled.issues)
        self._sql, self._checks, self.decode_schema = compiled.statement, compiled.checks, compiled.schema

    def apply(self, batch: pa.RecordBatch, offsets: np.ndarray) -> TransformResult:
        if batch.num_rows == 0:
            return TransformResult(batch, offsets, offsets[:0])
        rows = pa.array(np.arange(batch.num_rows, dtype=np.int64))
        source = pa.Table.from_batches([batch]).append_column(_ROW, rows)
        out, failed = _on_cursor(lambda con: self._run(con, source))
        if failed:
            out = out.filter(pa.array(~np.isin(out.column(_ROW).to_numpy(), [row for row, _ in failed])))
        kept = out.column(_ROW).to_numpy()
        target = pa.schema([batch.schema.field(name) for name in out.column_names if name != _ROW])
        out = out.drop_columns([_ROW]).cast(target).combine_chunks()
        dropped = np.ones(batch.num_rows, dtype=bool)
        dropped[kept] = False
        for row, _ in failed:
            dropped[row] = False
        if out.num_rows:
            kept_batch = out.to_batches()[0]
        else:
            kept_batch = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in target], schema=target)
        offsets = np.asarray(offsets)
        return TransformResult(kept_batch, offsets[kept], offsets[dropped], tuple(failed))


    def _run(self, con: duckdb.DuckDBPyConnection, source: pa.Table) -> tuple[pa.Table, list[tuple[int, str]]]:
        """The statement over ``source``: its rows, and the rows that failed with why."""
        register(con, _BATCH, source)
        out = con.sql(self._sql).to_arrow_table()
        if not self._checks:
            return out, []
        flags = [out.column(f"{_FAILED}{i}").to_numpy(zero_copy_only=False) for i in range(len(self._checks))]
        out = out.drop_columns([f"{_FAILED}{i}" for i in range(len(self._checks))])
        return out, _reasons(con, out.column(_ROW).to_numpy(), flags, self._checks)


def _on_cursor(work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    """``work`` on a cursor of the ingestion database, closed after. Should DuckDB fail inside itself (its database
    invalidated, here or by a statement on another thread), the database is replaced and ``work`` runs once more
    there: a batch's rows are stored, not turned into bad records, and a table's setup does not fail for it."""
    try:
        return _with_cursor(work)
    except duckdb.Error as exc:
        if engine_failure(exc) is None:
            raise
    log.warning("ingestion expressions met a failed DuckDB database; running them again on a new one")
    return _with_cursor(work)


def _with_cursor(work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    con = sandboxed_cursor(exact_try=True)
    try:
        return work(con)
    finally:
        con.close()


def _reasons(con: duckdb.DuckDBPyConnection, rows: np.ndarray, flags: list[np.ndarray],
             checks: tuple[tuple[str, str], ...]) -> list[tuple[int, str]]:
    """Each failed row (position in the batch) with why: the first expression that raised on it, and DuckDB's
    message for it, read by running that expression alone on the first row it failed on (one statement per
    failing expression and batch, however many rows failed)."""
    reasons: dict[int, str] = {}
    for (label, strict), flag in zip(checks, flags):
        failing = rows[flag]
        if not failing.size:
            continue
        try:
            con.sql(f"SELECT {strict} FROM {_BATCH} WHERE {_ROW} = {int(failing[0])}").fetchall()
            message = "it failed"
        except duckdb.Error as exc:
            message = str(exc).splitlines()[0][:_REASON_CHARS]
        except Exception:  # noqa: BLE001 - DuckDB cut its message inside a UTF-8 character (UnicodeDecodeError):
            message = "it failed (DuckDB's message could not be read)"  # the rows are known, only the text is lost
        for row in failing.tolist():
            reasons.setdefault(row, f"{label}: {message}" if row == failing[0] else f"{label} failed")
    return sorted(reasons.items())



def compile_ingestion(schema: Schema, ingestion: IngestionConfig) -> RowTransformer | None:
    """The table's transformer, or None when it configures no transform, no filter and no length limit."""
    if not _needs_transformer(schema, ingestion):
        return None
    return RowTransformer(schema, ingestion)


def ingestion_issues(schema: Schema, ingestion: IngestionConfig) -> list[ConfigIssue]:
    """Why the transforms or filter cannot run against ``schema`` (empty when they can)."""
    if not _needs_transformer(schema, ingestion):
        return []
    return _compile(schema, ingestion).issues


def _needs_transformer(schema: Schema, ingestion: IngestionConfig) -> bool:
    return bool(ingestion.transform_configs or ingestion.filter_function is not None
                or any(_length_rule(spec) for spec in schema.fields))


def _length_rule(spec: FieldSpec) -> bool:
    return spec.length_limit is not None and spec.length_strategy != "NO_ACTION"


def _limited(spec: FieldSpec, sql: str) -> str:
    """``sql`` (a value of column ``spec``) with the schema's maxLength applied (Pinot's SanitizationTransformer):
    STRING and JSON in characters (code points: Pinot counts UTF-16 units, so a character outside the BMP counts
    twice there), BYTES in bytes; a longer value trimmed or replaced by the default null value."""
    n = spec.length_limit

    def limit(v: str) -> str:
        if spec.data_type is DataType.BYTES:
            too_long, trimmed = f"octet_length({v}) > {n}", f"{v}[1:{n}]"
        else:  # STRING and JSON: characters, as Pinot's sanitization counts a Java String (never a cut mid-character)
            too_long, trimmed = f"length({v}) > {n}", f"left({v}, {n})"
        if spec.length_strategy == "SUBSTITUTE_DEFAULT_VALUE":
            default = spec.null_value
            trimmed = f"from_hex('{default.hex()}')" if isinstance(default, bytes) else \
                "'" + str(default).replace("'", "''") + "'"
        return f"CASE WHEN {too_long} THEN {trimmed} ELSE {v} END"

    if spec.single_value:
        return limit(f"({sql})")
    return f"list_transform({sql}, lambda v: {limit('v')})"


def decode_schema(schema: Schema, transformer: RowTransformer | None) -> Schema:
    """What the decoder must read for this table: the schema, plus the source fields the transforms read."""
    return schema if transformer is None else transformer.decode_schema


# ---- compiling ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Compiled:
    """Why the expressions cannot run (empty when they can), the statement over a batch, each expression's label
    and its SQL without ``try`` when failed rows are skipped (the statement then gives a flag column per expression,
    ``continueOnError`` unset or false), and the schema to decode with."""

    issues: list[ConfigIssue]
    statement: str
    checks: tuple[tuple[str, str], ...]
    schema: Schema


def _compile(schema: Schema, ingestion: IngestionConfig) -> _Compiled:
    timestamps = frozenset(f.name for f in schema.fields if f.data_type is DataType.TIMESTAMP)
    numbers = frozenset(f.name for f in schema.fields if f.single_value and f.data_type in _NUMBERS)
    issues: list[ConfigIssue] = []
    paths = [f"$.ingestionConfig.transformConfigs[{i}].transformFunction"
             for i in range(len(ingestion.transform_configs))]
    texts = [t.transform_function for t in ingestion.transform_configs]
    if ingestion.filter_function is not None:
        paths.append("$.ingestionConfig.filterConfig.filterFunction")
        texts.append(ingestion.filter_function)
    parsed = [_expression(text, timestamps, numbers, path, issues) for text, path in zip(texts, paths)]
    sources = sorted({c.name for e in parsed if e is not None for c in e.find_all(exp.Column)}
                     - set(schema.column_names))
    for reserved in [name for name in sources if name.startswith("__cuvee")]:
        issues.append(ConfigIssue("$.ingestionConfig", f"field name {reserved!r} is reserved (names starting "
                                                       "with '__cuvee' are Cuvee's own)"))
        sources.remove(reserved)
    extended = Schema(schema.name, schema.fields + tuple(
        FieldSpec(name, DataType.STRING, FieldRole.DIMENSION) for name in sources))
    sqls = [None if e is None else str(e.sql(dialect=DIALECT)) for e in parsed]
    computed: dict[str, str] = {}
    strict: list[tuple[str, str]] = []  # each expression without try, as it fails, with what it is
    for transform, sql, path in zip(ingestion.transform_configs, sqls, paths):
        if sql is not None and schema.has_column(transform.column_name):
            duck_type = _duck_type(schema.arrow_schema().field(transform.column_name).type)
            issues.extend(_bind(extended, f"CAST(({sql}) AS {duck_type})", path))
            computed[transform.column_name] = f"try(CAST(({sql}) AS {duck_type}))"
            strict.append((f"the transform of column {transform.column_name!r}", f"CAST(({sql}) AS {duck_type})"))
    columns = []
    for spec in schema.fields:
        value = computed.get(spec.name, _quote(spec.name))
        if _length_rule(spec):
            value = _limited(spec, value)
        columns.append(f"{value} AS {_quote(spec.name)}")
    if ingestion.filter_function is not None and sqls[-1] is not None:
        issues.extend(_bind(extended, f"({sqls[-1]})::BOOLEAN", paths[-1]))
        strict.append(("the filter", f"({sqls[-1]})::BOOLEAN"))
    checks = () if ingestion.continue_on_error else tuple(strict)
    columns += [f"try(({sql}) IS NULL) IS NULL AS {_FAILED}{i}" for i, (_, sql) in enumerate(checks)]
    statement = f"SELECT {', '.join(columns)}, {_ROW} FROM {_BATCH}"
    if ingestion.filter_function is not None and sqls[-1] is not None:
        statement += f" WHERE NOT coalesce(try(({sqls[-1]})::BOOLEAN), false)"
    statement += f" ORDER BY {_ROW}"
    if not issues:  # each expression binds; now the statement as it runs (TRY refuses volatile functions,
        issues.extend(_run_empty(extended, statement))  # a filter cannot hold an aggregate...)
    return _Compiled(issues, statement, checks, extended)


def _expression(text: str, timestamps: frozenset[str], numbers: frozenset[str], path: str,
                issues: list[ConfigIssue]) -> exp.Expression | None:
    if text.strip().lower().startswith("groovy("):
        issues.append(ConfigIssue(path, "Groovy scripts are not supported: write the expression in SQL, e.g. "
                                        "\"toEpochDays(ts)\" or \"country = 'NZ'\""))
        return None
    try:
        parsed = sqlglot.parse_one(text, read=READ_DIALECT)
        if not isinstance(parsed, exp.Expression) or isinstance(parsed, (exp.Select, exp.Query)):
            raise ValueError("not an expression")
        refuse_internal_functions(parsed)  # Cuvee's own (cuvee_funnel_*...) take configurations only plans write
        return translate_scalar(parsed, timestamps, number_columns=numbers)
    except (sqlglot.errors.ParseError, QueryError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc).splitlines()[0]
        issues.append(ConfigIssue(path, f"cannot parse {text!r}: {message}"))
        return None


def _bind(schema: Schema, expression: str, path: str) -> list[ConfigIssue]:
    """Evaluate ``expression`` over no rows of the schema: DuckDB binds every function, column and cast as it will
    for real, so a mistake is reported when the table is created, not when rows arrive."""
    def run(con: duckdb.DuckDBPyConnection) -> None:
        register(con, _BATCH, schema.arrow_schema().empty_table())
        con.sql(f"SELECT {expression} FROM {_BATCH}").to_arrow_table()

    try:
        _on_cursor(run)
    except duckdb.Error as exc:
        return [ConfigIssue(path, f"cannot run: {str(exc).splitlines()[0]}")]
    return []


def _run_empty(schema: Schema, statement: str) -> list[ConfigIssue]:
    def run(con: duckdb.DuckDBPyConnection) -> None:
        register(con, _BATCH, schema.arrow_schema().empty_table().append_column(_ROW, pa.array([], pa.int64())))
        con.sql(statement).to_arrow_table()

    try:
        _on_cursor(run)
    except duckdb.Error as exc:
        return [ConfigIssue("$.ingestionConfig", f"the transforms and filter cannot run together: "
                                                 f"{str(exc).splitlines()[0]}")]
    return []


def _duck_type(arrow_type: pa.DataType) -> str:
    """DuckDB's name for a decoded column's Arrow type (the cast target of a transform)."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _duck_type(arrow_type.value_type) + "[]"
    def run(con: duckdb.DuckDBPyConnection) -> str:
        register(con, "t", pa.table({"c": pa.array([], arrow_type)}))
        return str(con.sql("SELECT c FROM t").types[0])

    return _on_cursor(run)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
