"""``result_table`` converts whole columns with Arrow compute; its answers must be exactly those of the cell-by-cell
conversion it replaced (kept here as the reference), and large answers must be fast."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.query import result_table
from cuvee.query.response import format_timestamp, pinot_type


def _reference_value(value: Any, type_name: str) -> Any:
    """The per-cell conversion ``result_table`` used before it was vectorised."""
    if value is None:
        return None
    if isinstance(value, list):
        return [_reference_value(v, type_name.removesuffix("_ARRAY")) for v in value]
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if type_name != "FLOAT":
            return value
        with np.errstate(over="ignore"):  # a double beyond float32 becomes infinity, as before
            return float(str(np.float32(value)))
    if isinstance(value, (dt.datetime, dt.date)):
        return format_timestamp(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return value


def _reference_rows(table: pa.Table, types: dict[str, str] | None = None) -> list[list[Any]]:
    names = table.column_names
    kinds = [(types or {}).get(n) or pinot_type(c.type) for n, c in zip(names, table.columns)]
    columns = [[_reference_value(v, k) for v in c.to_pylist()] for c, k in zip(table.columns, kinds)]
    return [list(row) for row in zip(*columns)]


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same Python type cell by cell (1.0 is not 1, "NaN" is not nan)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


FLOATS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.1, -0.0, 1e-45, 3.4e38, 1e300, 5e-324, float("nan"), float("-inf")]))
MOMENTS = st.one_of(st.none(), st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 1, 1)))
UNITS = st.sampled_from(["s", "ms", "us"])
TZS = st.sampled_from([None, "UTC", "Europe/Amsterdam", "+05:30"])


@settings(max_examples=80, deadline=None)
@given(floats=st.lists(FLOATS, max_size=30), moments=st.lists(MOMENTS, max_size=30), unit=UNITS, tz=TZS,
       raw=st.lists(st.one_of(st.none(), st.binary(max_size=8)), max_size=30),
       ints=st.lists(st.one_of(st.none(), st.integers(-2**63, 2**63 - 1)), max_size=30),
       lists=st.lists(st.one_of(st.none(), st.lists(FLOATS, max_size=4)), max_size=30),
       data=st.data())
def test_columns_convert_exactly_as_cell_by_cell(floats: list[Any], moments: list[Any], unit: str, tz: str | None,
                                                 raw: list[Any], ints: list[Any], lists: list[Any],
                                                 data: st.DataObject) -> None:
    n = min(len(floats), len(moments), len(raw), len(ints), len(lists))
    cut = data.draw(st.integers(0, n))
    ts_type = pa.timestamp(unit, tz=tz)
    stamps = pa.array([None if m is None else int(m.replace(tzinfo=dt.timezone.utc).timestamp()
                                                   * {"s": 1, "ms": 1000, "us": 1_000_000}[unit]) for m in moments[:n]],
                      pa.int64()).cast(ts_type)
    columns = {
        "f": pa.array(floats[:n], pa.float32()),
        "d": pa.array(floats[:n], pa.float64()),
        "d_as_float": pa.array(floats[:n], pa.float64()),
        "ts": stamps,
        "day": pa.array([None if m is None else m.date() for m in moments[:n]], pa.date32()),
        "raw": pa.array(raw[:n], pa.binary()),
        "i": pa.array(ints[:n], pa.int64()),
        "mv": pa.array(lists[:n], pa.list_(pa.float64())),
        "mvf": pa.array(lists[:n], pa.large_list(pa.float32())),
    }
    whole = pa.table(columns)
    chunked = pa.concat_tables([whole.slice(0, cut), whole.slice(cut)])  # several chunks, each a sliced array
    types = {"d_as_float": "FLOAT"}
    for table in (whole, chunked, whole.slice(cut)):
        rows = result_table(table, column_types=types)["rows"]
        assert _same(rows, _reference_rows(table, types))


def test_rare_types_still_convert_cell_by_cell() -> None:
    table = pa.table({
        "big": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-0.0000001")], pa.decimal128(20, 7)),
        "fixed": pa.array([b"\x01\x02", None, b"\xff\x00"], pa.binary(2)),
        "half": pa.array([np.float16(0.1), None, np.float16("inf")], pa.float16()),
        "date64": pa.array([dt.date(2026, 1, 2), None, dt.date(1969, 12, 31)], pa.date64()),
        "large": pa.array([b"ab", b"", None], pa.large_binary()),
        "flag": pa.array([True, None, False]),
    })
    assert _same(result_table(table)["rows"], _reference_rows(table))


def test_nanosecond_timestamps_are_cut_to_microseconds() -> None:
    table = pa.table({"ts": pa.array([1_790_000_000_123_456_789, -1, None], pa.timestamp("ns"))})
    assert result_table(table)["rows"] == [["2026-09-21 14:13:20.123456"], ["1969-12-31 23:59:59.999999"], [None]]


def test_a_large_answer_converts_exactly_as_cell_by_cell() -> None:
    """Correctness at size (chunk boundaries, many distinct values); the speed-up is measured in
    bench/response_convert.py, not asserted here."""
    n = 10_000
    rng = np.random.default_rng(1)
    table = pa.table({"i": pa.array(rng.integers(0, 1000, n)), "d": pa.array(rng.random(n)),
                      "s": pa.array([f"s{i % 100}" for i in range(n)]),
                      "ts": pa.array(rng.integers(0, 10**12, n).astype("datetime64[ms]"))})
    assert _same(result_table(table)["rows"], _reference_rows(table))


@pytest.mark.parametrize("empty", [pa.table({"ts": pa.array([], pa.timestamp("ms")), "b": pa.array([], pa.binary()),
                                             "mv": pa.array([], pa.list_(pa.int32()))})])
def test_empty_columns(empty: pa.Table) -> None:
    assert result_table(empty)["rows"] == []
