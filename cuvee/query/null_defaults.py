"""Pinot's answers without null handling: a missing value reads as its column's default null value. Pure.

Segments keep a null mask beside the stored values (a missing or null input is stored as the column's default and
marked), so both of Pinot's answers can be given from the same rows. Pinot's default — null handling off, the
``enableNullHandling`` query option not set — answers a missing value as the column's default null value
(``'null'`` for a STRING dimension, ``-2147483648`` for an INT one, ``0`` for a metric, the schema's
``defaultNullValue`` when it gives one): it groups as that value, ``IS NULL`` matches nothing and ``COUNT(col)``
counts it. With ``enableNullHandling=true`` Pinot answers SQL's NULL instead, and so does Cuvee: the masked rows are
NULL. The server applies this by binding its rows through a projection that replaces the NULLs of each column that
has some (``coalesce(col, <default>)``), so columns without nulls — most — cost nothing and every query shape (the
single-stage steps, the leaves of multi-stage queries) sees the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import pyarrow as pa

from cuvee.config.schema import DataType, FieldSpec


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def default_literal(spec: FieldSpec) -> str:
    """The column's default null value as a DuckDB literal of its stored type (one value; a multi-value column's
    default is a list of it)."""
    value = spec.null_value
    kind = spec.data_type
    if kind is DataType.BYTES:
        raw = value if isinstance(value, bytes) else bytes(value or b"")
        literal = f"from_hex('{raw.hex()}')"
    elif kind in (DataType.STRING, DataType.JSON):
        literal = "'" + str(value).replace("'", "''") + "'"
    elif kind is DataType.BOOLEAN:
        literal = "true" if value in (True, 1, "true", "1") else "false"
    elif kind is DataType.TIMESTAMP:
        literal = f"CAST(epoch_ms(CAST({int(value)} AS BIGINT)) AS TIMESTAMP_MS)"
    elif kind in (DataType.FLOAT, DataType.DOUBLE):
        number = float(value)
        text = "'-inf'" if number == -math.inf else "'inf'" if number == math.inf else \
            "'nan'" if math.isnan(number) else repr(number)
        literal = f"CAST({text} AS {'FLOAT' if kind is DataType.FLOAT else 'DOUBLE'})"
    else:
        literal = f"CAST({int(value)} AS {'INTEGER' if kind is DataType.INT else 'BIGINT'})"
    return literal if spec.single_value else f"[{literal}]"


def filled_columns(names: Iterable[str], spec_of: Callable[[str], FieldSpec | None], tables: Iterable[pa.Table],
                   *, not_null_only: bool = False) -> dict[str, str]:
    """Column -> its default's literal, for the columns among ``names`` that hold a null in any of ``tables`` and
    that the schema types (a column unknown to it, such as the server's own, stays as it is). ``not_null_only``: a
    null-handling query on a schema with column-based null handling fills only its ``notNull`` columns (Pinot keeps
    no nulls for those)."""
    tables = list(tables)
    out: dict[str, str] = {}
    for name in names:
        spec = spec_of(name)
        if spec is None or (not_null_only and not is_not_null(spec)):
            continue
        if any(t.schema.get_field_index(name) >= 0 and t.column(name).null_count for t in tables):
            out[name] = default_literal(spec)
    return out


def is_not_null(spec: FieldSpec) -> bool:
    """Pinot's ``notNull`` field key (column-based null handling)."""
    value = spec.extra.get("notNull")
    return value is True or str(value).strip().lower() == "true"


def column_based(schema_extra: Mapping[str, object]) -> bool:
    """Pinot's schema key ``enableColumnBasedNullHandling``."""
    value = schema_extra.get("enableColumnBasedNullHandling")
    return value is True or str(value).strip().lower() == "true"


def projection(names: Iterable[str], filled: Mapping[str, str]) -> str:
    """The select list that shows ``names`` with the filled ones' NULLs replaced, each under its own name."""
    return ", ".join(f"coalesce({quoted(n)}, {filled[n]}) AS {quoted(n)}" if n in filled else quoted(n)
                     for n in names)
