"""Property tests: the decoder's fast path and per-message fallback agree, and it never raises."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.config.schema import DataType, Schema
from cuvee.decode import JsonDecoder

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EPOCH = dt.datetime(1970, 1, 1)

TYPED_VALUES: dict[DataType, st.SearchStrategy[Any]] = {
    DataType.INT: st.integers(-(2**31), 2**31 - 1),
    DataType.LONG: st.integers(-(2**63), 2**63 - 1),
    # Doubles too: a FLOAT column rounds them to float32 the same way on both paths.
    DataType.FLOAT: st.floats(width=32, allow_nan=False, allow_infinity=False) | st.floats(allow_nan=False,
                                                                                        allow_infinity=False),
    DataType.DOUBLE: st.floats(allow_nan=False, allow_infinity=False),
    DataType.BOOLEAN: st.booleans(),
    DataType.TIMESTAMP: st.integers(0, 4_102_444_800_000),  # epoch millis up to 2100
    DataType.STRING: st.text(max_size=12),
    DataType.JSON: st.text(max_size=12),
    DataType.BYTES: st.binary(max_size=8),
}


@st.composite
def schemas(draw: st.DrawFn) -> Schema:
    columns = draw(st.lists(st.tuples(st.sampled_from(list(DataType)), st.booleans()), min_size=1, max_size=6))
    specs = [{"name": f"c{i}", "dataType": t.value, "singleValueField": sv} for i, (t, sv) in enumerate(columns)]
    return Schema.from_json({"schemaName": "p", "dimensionFieldSpecs": specs})


@st.composite
def typed_rows(draw: st.DrawFn, schema: Schema) -> list[dict[str, Any]]:
    """Rows of typed values; a key may be missing (None) and multi-value lists may hold None elements."""
    rows = []
    for _ in range(draw(st.integers(1, 12))):
        row: dict[str, Any] = {}
        for spec in schema.fields:
            element = TYPED_VALUES[spec.data_type]
            values = element if spec.single_value else st.lists(st.none() | element, max_size=4)
            row[spec.name] = draw(st.none() | values)
        rows.append(row)
    return rows


def expected_batch(schema: Schema, rows: list[dict[str, Any]]) -> pa.RecordBatch:
    arrays = []
    for spec in schema.fields:
        values = [row[spec.name] for row in rows]
        if not spec.single_value:
            values = [None if v is None else [e for e in v if e is not None] for v in values]
        arrays.append(pa.array(values, type=spec.arrow_type()))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.arrow_schema())


def json_value(data_type: DataType, value: Any, stringly: bool) -> Any:
    """A typed value as producers send it: well-typed JSON, or (stringly) as text that needs coercion."""
    if value is None:
        return None
    if data_type is DataType.BYTES:
        return value.hex()
    if data_type is DataType.TIMESTAMP and stringly:
        iso = (EPOCH + dt.timedelta(milliseconds=value)).isoformat(timespec="milliseconds")
        return iso + "Z" if value % 2 else iso
    if data_type is DataType.BOOLEAN and stringly:
        return "true" if value else "false"
    if data_type in (DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE) and stringly:
        return repr(value)
    return value


def encode(schema: Schema, rows: list[dict[str, Any]], stringly: bool) -> list[bytes]:
    messages = []
    for row in rows:
        doc: dict[str, Any] = {}
        for spec in schema.fields:
            value = row[spec.name]
            if value is None:
                continue  # missing field
            if spec.single_value:
                doc[spec.name] = json_value(spec.data_type, value, stringly)
            else:
                doc[spec.name] = [json_value(spec.data_type, e, stringly) for e in value]
                if stringly and len(value) == 1 and value[0] is not None:
                    doc[spec.name] = doc[spec.name][0]  # a scalar for a one-element list
        messages.append(orjson.dumps(doc))
    return messages


@SETTINGS
@given(st.data())
def test_fast_path_and_fallback_agree_on_well_typed_messages(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    rows = data.draw(typed_rows(schema))
    messages = encode(schema, rows, stringly=False)
    decoder = JsonDecoder(schema)
    fast = decoder.decode_fast(messages)
    slow, kept, bad = decoder.decode_each(messages, np.arange(len(messages)))
    assert bad == []
    assert kept.tolist() == list(range(len(messages)))
    assert fast is not None
    expected = expected_batch(schema, rows)
    assert slow.equals(expected)
    assert fast.equals(expected)


@SETTINGS
@given(st.data())
def test_coercible_text_decodes_to_the_same_values(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    rows = data.draw(typed_rows(schema))
    result = JsonDecoder(schema).decode(encode(schema, rows, stringly=True), range(100, 100 + len(rows)))
    assert result.bad == []
    assert result.offsets.tolist() == list(range(100, 100 + len(rows)))
    assert result.batch.equals(expected_batch(schema, rows))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=8,
)


@st.composite
def messages(draw: st.DrawFn, schema: Schema) -> list[bytes]:
    names = st.sampled_from(schema.column_names) | st.text(max_size=3)
    objects = st.dictionaries(names, JSON_VALUES, max_size=4).map(lambda doc: json.dumps(doc).encode())
    mutated = objects.flatmap(lambda raw: st.integers(0, max(len(raw) - 1, 0)).map(lambda cut: raw[:cut]))
    return draw(st.lists(objects | mutated | st.binary(max_size=20), max_size=80))


@SETTINGS
@given(st.data())
def test_decode_never_raises_and_accounts_for_every_message(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    batch = data.draw(messages(schema))
    offsets = list(range(1000, 1000 + len(batch)))
    result = JsonDecoder(schema, min_chunk_rows=4).decode(batch, offsets)
    bad_offsets = [b.offset for b in result.bad]
    assert sorted(result.offsets.tolist() + bad_offsets) == offsets
    assert result.batch.num_rows == len(result.offsets)
    assert result.batch.schema == schema.arrow_schema()
    assert all(b.reason for b in result.bad)
    # Each good message decodes alone to the same row: chunking never mixes messages up.
    decoder = JsonDecoder(schema)
    for position, offset in enumerate(result.offsets.tolist()):
        alone = decoder.decode([batch[offset - 1000]], [offset])
        assert alone.batch.equals(result.batch.slice(position, 1))
