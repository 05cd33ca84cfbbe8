"""Per-value coercion of parsed JSON to a column's data type: the rules of the decoder's slow path.

The fast path (Arrow's JSON reader) only accepts values that already have the column's JSON type; everything
else comes here. Rules:

- INT / LONG: integers in range; whole floats (``12.0``); numeric strings (``"12"``, ``"12.0"``); booleans as 1/0.
  Out of range (no silent wrap-around) or fractional values are errors.
- FLOAT / DOUBLE: numbers, numeric strings (also ``"NaN"``, ``"Infinity"``), booleans as 1/0.
- BOOLEAN: ``true``/``false``, 1/0, and the strings ``"true"``/``"false"``/``"1"``/``"0"`` (any case).
- TIMESTAMP: epoch milliseconds (numbers or digit strings) or ISO-8601 strings, parsed by Arrow's own parser
  so both paths agree; zone offsets are converted to UTC.
- STRING: strings as they are; numbers, booleans, objects and arrays as their JSON text.
- JSON: strings as they are (as Pinot stores them); anything else as its JSON text.
- BYTES: hex strings.
- multi-value columns: a scalar becomes a one-element list; null elements are dropped.

Binary formats (Avro, Protobuf) also hand over ``bytes``: a BYTES column takes them as they are, a STRING or JSON
column as hex (Pinot's BYTES-to-STRING conversion); inside JSON text (a nested record) they are base64, as
Pinot's JSON writer puts them. Decimals inside JSON text are numbers.
"""

from __future__ import annotations

import base64
import decimal
import functools
import io
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pa_json

from cuvee.config.schema import DataType, FieldSpec

_INT_RANGES = {DataType.INT: (-(2**31), 2**31 - 1), DataType.LONG: (-(2**63), 2**63 - 1)}
_TIMESTAMP_RANGE = _INT_RANGES[DataType.LONG]
_INT_TEXT = re.compile(r"\s*[+-]?\d+\s*")
_FLOAT_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")
_FLOAT_WORDS = {"nan": math.nan, "+nan": math.nan, "-nan": math.nan, "inf": math.inf, "+inf": math.inf,
                "-inf": -math.inf, "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf}
_HEX_TEXT = re.compile(r"(?:[0-9a-fA-F]{2})*")
_TRUE_TEXT = {"true", "1"}
_FALSE_TEXT = {"false", "0"}


class CoercionError(ValueError):
    """A value that cannot become the column's type; the message is the operator-facing reason."""


def _describe(value: Any) -> str:
    try:
        text = repr(value) if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _to_whole(value: Any, type_name: str, low: int, high: int) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise CoercionError(f"{_describe(value)} is not a whole number ({type_name})")
        number = int(value)
    elif isinstance(value, str):
        if _INT_TEXT.fullmatch(value):
            number = int(value)
        elif _FLOAT_TEXT.fullmatch(value):
            return _to_whole(float(value), type_name, low, high)
        else:
            raise CoercionError(f"{_describe(value)} is not a number ({type_name})")
    else:
        raise CoercionError(f"{_describe(value)} is not a number ({type_name})")
    if not low <= number <= high:
        raise CoercionError(f"{_describe(value)} is out of range for {type_name}")
    return number


def _to_int(data_type: DataType) -> Callable[[Any], int]:
    low, high = _INT_RANGES[data_type]
    return lambda value: _to_whole(value, data_type.value, low, high)


def _to_float(value: Any, type_name: str) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        if _FLOAT_TEXT.fullmatch(value):
            return float(value)
        word = _FLOAT_WORDS.get(value.strip().lower())
        if word is not None:
            return word
    raise CoercionError(f"{_describe(value)} is not a number ({type_name})")


def _to_float32(value: Any) -> float:
    number = _to_float(value, "FLOAT")
    with np.errstate(over="ignore"):
        return float(np.float32(number))  # what Arrow's reader does: overflow becomes +-inf


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_TEXT:
            return True
        if text in _FALSE_TEXT:
            return False
    raise CoercionError(f"{_describe(value)} is not a boolean (true/false/1/0)")


@functools.lru_cache(maxsize=4096)
def parse_iso_timestamp(text: str) -> int | None:
    """Epoch millis of an ISO-8601 string by Arrow's JSON timestamp parser (the fast path's), or None."""
    line = orjson.dumps({"t": text})
    schema = pa.schema([("t", pa.timestamp("ms"))])
    try:
        table = pa_json.read_json(io.BytesIO(line), parse_options=pa_json.ParseOptions(explicit_schema=schema))
    except (pa.ArrowInvalid, ValueError):
        return None
    millis = table.column(0).cast(pa.int64())[0].as_py()
    return None if millis is None else int(millis)


def _to_timestamp(value: Any) -> int:
    if isinstance(value, str) and not _INT_TEXT.fullmatch(value) and not _FLOAT_TEXT.fullmatch(value):
        millis = parse_iso_timestamp(value)
        if millis is None:
            raise CoercionError(f"{_describe(value)} is neither epoch millis nor an ISO-8601 timestamp")
        return millis
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise CoercionError(f"{_describe(value)} is not a timestamp (epoch millis or ISO-8601)")
    return _to_whole(value, "TIMESTAMP", *_TIMESTAMP_RANGE)


def _json_default(value: Any) -> Any:
    """What orjson cannot write by itself, as Pinot's JSON writer (Jackson) writes it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(type(value).__name__)


def _to_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    try:
        return orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError as error:
        raise CoercionError(f"cannot be written as JSON text ({error})") from None


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str) and _HEX_TEXT.fullmatch(value):
        return bytes.fromhex(value)
    raise CoercionError(f"{_describe(value)} is not a hex string (BYTES)")


def _scalar_rule(data_type: DataType) -> Callable[[Any], Any]:
    if data_type in _INT_RANGES:
        return _to_int(data_type)
    return {
        DataType.FLOAT: _to_float32,
        DataType.DOUBLE: lambda value: _to_float(value, "DOUBLE"),
        DataType.BOOLEAN: _to_bool,
        DataType.TIMESTAMP: _to_timestamp,
        DataType.STRING: _to_text,
        DataType.JSON: _to_text,
        DataType.BYTES: _to_bytes,
    }[data_type]


def column_coercer(spec: FieldSpec) -> Callable[[Any], Any]:
    """A function from one parsed JSON value (never None) to the column's Python value; raises CoercionError."""
    rule = _scalar_rule(spec.data_type)
    takes_containers = spec.data_type in (DataType.STRING, DataType.JSON)

    def scalar(value: Any) -> Any:
        if isinstance(value, (dict, list)) and not takes_containers:
            kind = "an object" if isinstance(value, dict) else "a list"
            raise CoercionError(f"expected a single {spec.data_type.value} value, got {kind}")
        return rule(value)

    if spec.single_value:
        return scalar

    def multi(value: Any) -> list[Any]:
        items = value if isinstance(value, list) else [value]
        return [scalar(item) for item in items if item is not None]

    return multi
