"""Avro with an inline schema (Pinot's SimpleAvroMessageDecoder): every column type, logical types, nulls and
defaults, bad messages counted with their offsets, batches mixing good and bad, transforms reading other fields."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from cuvee.config import IngestionConfig
from cuvee.config.decoder_config import PINOT_AVRO
from cuvee.config.json_reader import JsonObject
from cuvee.config.schema import Schema
from cuvee.decode import BadRecordLog
from cuvee.decode.transform import compile_ingestion, decode_schema
from tests.segment.decoder_helpers import SCHEMA, TS, as_rows, avro_bytes, decoder_of, expected, row, stored

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Event", "namespace": "test", "fields": [
        {"name": "i", "type": "int"},
        {"name": "b", "type": "boolean"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "raw", "type": "bytes"},
        {"name": "doc", "type": {"type": "record", "name": "Doc", "fields": [
            {"name": "k", "type": "string"}, {"name": "n", "type": "long"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "nums", "type": {"type": "array", "items": "int"}},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}, "default": "RED"},
        {"name": "cents", "type": "long", "default": 0},
    ]}


def config(schema: dict[str, Any] = AVRO_SCHEMA, **props: str) -> dict[str, str]:
    return {"stream.kafka.decoder.class.name": PINOT_AVRO, "stream.kafka.decoder.prop.schema": orjson.dumps(schema).decode(),
            **{f"stream.kafka.decoder.prop.{k}": v for k, v in props.items()}}


def message(n: int, **changes: Any) -> bytes:
    record = {**row(n), "color": "GREEN", "cents": n * 100, **changes}
    return avro_bytes(AVRO_SCHEMA, record)


def test_every_column_type() -> None:
    result = decoder_of(config()).decode([message(n) for n in range(3)], [10, 11, 12])
    assert result.bad == []
    assert result.offsets.tolist() == [10, 11, 12]
    assert as_rows(result.batch) == [expected(n) for n in range(3)]


def test_null_and_missing_fields_are_null_as_in_json() -> None:
    """Null in the batch, as the JSON decoder gives it; the consuming segment stores the column's default there
    (with a null bit), which is what queries see."""
    schema = Schema.from_json({**SCHEMA.to_json(), "dimensionFieldSpecs": [
        *SCHEMA.to_json()["dimensionFieldSpecs"], {"name": "absent", "dataType": "LONG"}]})
    result = decoder_of(config(), schema).decode([message(1, s=None), message(2, tags=[], nums=[])], [0, 1])
    assert result.bad == []
    as_json = [{k: v for k, v in expected(1).items() if k not in ("s", "raw")},
               {**expected(2), "raw": None, "tags": [], "nums": []}]
    json_batch = decoder_of({}, schema).decode([orjson.dumps(r) for r in as_json], [0, 1]).batch
    assert result.batch.drop_columns(["raw"]).equals(json_batch.drop_columns(["raw"]))
    assert result.batch.column("s").to_pylist() == [None, "s2"]
    assert result.batch.column("absent").null_count == 2
    assert stored(schema, result.batch).column("s").to_pylist() == [None, "s2"]


def test_bad_messages_are_counted_with_their_offsets_amid_good_ones() -> None:
    good = message(1)
    log = BadRecordLog()
    decoder = decoder_of(config(), bad_record_log=log, source="seg")
    result = decoder.decode([good, good[:7], b"", good + b"\x00", message(2), b"\xff" * 40], [5, 6, 7, 8, 9, 10])
    assert result.offsets.tolist() == [5, 9]
    assert as_rows(result.batch) == [expected(1), expected(2)]
    assert [(b.offset, b.reason) for b in result.bad] == [
        (6, "not an Avro record of the schema: the message ends inside the record"),
        (7, "empty message"),
        (8, "not an Avro record of the schema: 1 bytes left over after the record"),
        (10, result.bad[3].reason),
    ]
    assert result.bad[3].reason.startswith("not an Avro record of the schema")
    assert log.total == 4 and result.bad[0].raw_prefix


def test_a_value_that_does_not_fit_its_column_is_a_bad_record() -> None:
    too_big = copy.deepcopy(AVRO_SCHEMA)
    too_big["fields"][0]["type"] = "long"  # a long into the INT column i
    result = decoder_of(config(too_big)).decode(
        [avro_bytes(too_big, {**row(1), "color": "RED", "i": 2**40}), avro_bytes(too_big, {**row(2), "color": "RED"})],
        [0, 1])
    assert result.offsets.tolist() == [1]
    assert result.bad[0].offset == 0 and result.bad[0].reason == "column 'i': 1099511627776 is out of range for INT"


def test_logical_types_on_by_default_and_off_on_request() -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "s", "type": {"type": "int", "logicalType": "date"}},
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}}]}
    import decimal

    payload = avro_bytes(schema, {"ts": (TS + 5) * 1000 + 999, "s": 3, "d": decimal.Decimal("12.34")})
    on = decoder_of(config(schema)).decode([payload], [0])
    assert as_rows(on.batch)[0] == {**as_rows(on.batch)[0], "ts": TS + 5, "s": "1970-01-04", "d": 12.34}
    assert on.bad == []
    off = decoder_of(config(schema, enableLogicalTypes="false")).decode([payload], [0])
    assert [b.reason for b in off.bad] == ["column 'd': b'\\x04\\xd2' is not a number (DOUBLE)"]  # raw decimal
    raw_schema = {**schema, "fields": schema["fields"][:2]}
    off = decoder_of(config(raw_schema, enableLogicalTypes="false")).decode(
        [avro_bytes(raw_schema, {"ts": (TS + 5) * 1000 + 999, "s": 3})], [0])
    values = as_rows(off.batch)[0]
    assert values["ts"] == (TS + 5) * 1000 + 999 and values["s"] == "3"  # the written values, as Pinot reads them


def test_transforms_read_fields_that_are_not_columns() -> None:
    ingestion = IngestionConfig.parse(JsonObject.of({"transformConfigs": [
        {"columnName": "l", "transformFunction": "CAST(cents AS BIGINT) * 2"},
        {"columnName": "s", "transformFunction": "color"}]}, "$.ingestionConfig", []))
    transformer = compile_ingestion(SCHEMA, ingestion)
    assert transformer is not None
    decoder = decoder_of(config(), decode_schema(SCHEMA, transformer))
    result = decoder.decode([message(3), message(4, color="RED")], [0, 1])
    out = transformer.apply(result.batch, result.offsets)
    assert out.batch.column("l").to_pylist() == [600, 800]
    assert out.batch.column("s").to_pylist() == ["GREEN", "RED"]
    assert out.batch.schema.names == SCHEMA.column_names


@pytest.mark.parametrize("enum_into", ["s"])
def test_enums_are_their_symbol(enum_into: str) -> None:
    schema = {"type": "record", "name": "T", "fields": [
        {"name": enum_into, "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}]}
    result = decoder_of(config(schema)).decode([avro_bytes(schema, {enum_into: "B"})], [0])
    assert result.batch.column(enum_into).to_pylist() == ["B"]
