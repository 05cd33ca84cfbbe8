"""A second round's group keys as JSON text: read back by a server as exactly the keys its groups hold."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import orjson
import pyarrow as pa
import pytest

from cuvee.query.execute import sandboxed_cursor, wanted_groups
from cuvee.query.wanted_keys import WantedKeys, WantedKeysError, encode

UTC = dt.timezone.utc
KEYS = pa.table({
    "__g0": pa.array([float("nan"), -0.0, float("inf"), 0.1, 5e-324, None]),
    "__g1": pa.array([dt.datetime(2026, 1, 1, 1, 2, 3, 456789, tzinfo=UTC)] * 5 + [None], pa.timestamp("us", "UTC")),
    "__g2": pa.array([b"\x00\xff", b"", b"\x80", b"a", b"b", None]),
    "__g3": pa.array([decimal.Decimal("1.10"), decimal.Decimal("-0.01")] * 3, pa.decimal128(10, 2)),
    "__g4": pa.array(["e\u0301", "é", "\ud7ff😀", "", "x", None]),
    "__g5": pa.array(np.array([0.1, np.nan, -0.0, 1 / 3, 3.4e38, 1e-45], np.float32)),
    "__g6": pa.array([123456789012345678] * 6, pa.timestamp("ns", "America/New_York")),
    "__g7": pa.array([dt.date(2020, 1, 2), None] * 3),
    "__g8": pa.array([dt.time(1, 2, 3, 4), None] * 3),
    "__g9": pa.array([2**63 - 1, -(2**63), 0, 1, None, 7], pa.int64()),
    "__g10": pa.array([True, False, None] * 2),
    "__g11": pa.nulls(6),
    "__g12": pa.array(["a", None] * 3, pa.large_string()),
    "__g13": pa.array([2**64 - 1, 0] * 3, pa.uint64()),
})


def _bits(table: pa.Table) -> list[object]:
    """Values with floats by their bits (NaN equal to NaN, -0.0 not to 0.0)."""
    out: list[object] = []
    for column in table.columns:
        if pa.types.is_floating(column.type):
            values = column.to_numpy()
            out.append(values.view(np.int64 if values.dtype == np.float64 else np.int32).tolist())
        else:
            out.append(column.to_pylist())
    return out


def test_keys_read_back_exactly_as_the_server_types_them() -> None:
    travelled = WantedKeys.from_json(orjson.loads(orjson.dumps(encode(KEYS).to_json())))
    back = travelled.typed(KEYS.schema)
    assert back.schema == KEYS.schema
    assert _bits(back) == _bits(KEYS)


def test_wanted_groups_match_nan_zero_and_null_keys_as_groups_do() -> None:
    """NaN matches NaN, -0.0 matches 0.0 (DuckDB's GROUP BY makes them one group), NULL matches NULL only."""
    groups = pa.table({"__g0": pa.array([float("nan"), 0.0, None, 1.0]), "__p0": [1, 2, 3, 4]})
    con = sandboxed_cursor(0)
    try:
        got = [sorted(wanted_groups(con, groups, encode(pa.table({"__g0": pa.array(keys, pa.float64())})))
                      .column("__p0").to_pylist()) for keys in ([float("nan"), -0.0], [None], [2.0])]
    finally:
        con.close()
    assert got == [[1, 2], [3], []]


@pytest.mark.parametrize(("keys", "schema", "error"), [
    ({"__g0": ["x"]}, pa.schema([("__g0", pa.int64())]), "a value of __g0 is not a int64"),
    ({"__g0": ["!!"]}, pa.schema([("__g0", pa.binary())]), "is not a binary"),
    ({"__g1": ["1"]}, pa.schema([("__g0", pa.int64())]), "__g1 is not a group key"),
])
def test_keys_that_do_not_fit_the_servers_groups_are_a_clear_error(keys: dict[str, list[str]], schema: pa.Schema,
                                                                   error: str) -> None:
    with pytest.raises(WantedKeysError, match=error):
        WantedKeys.from_json(keys).typed(schema)


def test_a_key_type_with_no_text_form_is_refused_at_the_broker() -> None:
    with pytest.raises(WantedKeysError, match="no text form"):
        encode(pa.table({"__g0": pa.array([[1, 2]])}))
