"""A merge's rows (inside a Spark task): concat, rollup or dedup, with the time column rounded when asked.

DuckDB does the grouping (multi-value columns group as lists, which Arrow's group_by cannot); it runs in a
private in-memory database with no external access. The answer has the schema's columns, order and types.
"""

from __future__ import annotations

from collections.abc import Mapping

import logging
import tempfile

import duckdb
import pyarrow as pa

from cuvee.config.schema import DataType, FieldRole, FieldSpec, Schema
from cuvee.maintenance.config import Aggregation, MergeType
from cuvee.query.execute import register

_RELATION = "merge_rows"
log = logging.getLogger(__name__)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def merge_rows(rows: pa.Table, schema: Schema, merge_type: MergeType, *, time_column: str | None = None,
               round_units: int | None = None, aggregations: Mapping[str, Aggregation] | None = None,
               memory_mb: int = 2048) -> pa.Table:
    """``rows`` (the schema's columns, stored types) merged: ``round_units`` rounds ``time_column`` down to
    multiples of that many of its own units (TIMESTAMP: milliseconds)."""
    rounding = bool(time_column and round_units and round_units > 1)
    if merge_type is MergeType.CONCAT and not rounding:
        return rows
    selected = []
    for spec in schema.fields:
        column = _quoted(spec.name)
        if rounding and spec.name == time_column:
            r = int(round_units or 1)
            # floor, not truncation: times before 1970 round down too
            if spec.data_type is DataType.TIMESTAMP:
                column = f"epoch_ms(CAST(floor(epoch_ms({column}) / {r}) AS BIGINT) * {r})"
            else:
                column = f"CAST(CAST(floor({column} / {r}) AS BIGINT) * {r} AS {_duck_type(spec.data_type)})"
        selected.append((spec, column))
    if merge_type is MergeType.ROLLUP:
        sql = _rollup_sql(selected, aggregations or {})
    else:
        body = ", ".join(f"{c} AS {_quoted(s.name)}" for s, c in selected)
        sql = f"SELECT {'DISTINCT ' if merge_type is MergeType.DEDUP else ''}{body} FROM {_RELATION}"
    with tempfile.TemporaryDirectory(prefix="cuvee-merge-") as spill:
        database = duckdb.connect(config={"memory_limit": f"{memory_mb}MB", "threads": 1, "temp_directory": spill})
        try:
            database.execute("SET enable_external_access = false")  # after temp_directory: it may spill there
            register(database, _RELATION, rows)
            merged = database.sql(sql).to_arrow_table()
        finally:
            database.close()
    try:
        return merged.cast(schema.arrow_schema())
    except pa.ArrowInvalid as exc:  # a rolled-up INT/LONG sum that does not fit its column: keep the rows as they are
        log.warning("the %s merge does not fit the schema (%s); the rows are kept unmerged", merge_type.value, exc)
        return rows


def _rollup_sql(selected: list[tuple[FieldSpec, str]], aggregations: Mapping[str, Aggregation]) -> str:
    """Group on every dimension and date-time column; metrics aggregated (sum unless configured)."""
    keys, items = [], []
    for spec, column in selected:
        name = _quoted(spec.name)
        if spec.role is FieldRole.METRIC:
            how = aggregations.get(spec.name, Aggregation.SUM).value.upper()
            items.append(f"{how}({column}) AS {name}")
        else:
            items.append(f"{column} AS {name}")
            keys.append(column)
    group = f" GROUP BY {', '.join(keys)}" if keys else ""
    return f"SELECT {', '.join(items)} FROM {_RELATION}{group}"


def _duck_type(data_type: DataType) -> str:
    return {DataType.INT: "INTEGER", DataType.LONG: "BIGINT", DataType.FLOAT: "FLOAT",
            DataType.DOUBLE: "DOUBLE"}.get(data_type, "BIGINT")
