"""Pinot's ``stream.<type>.decoder.*`` keys: class names mapped to Cuvee's decoders, and every decoder that cannot
be built refused when the table is created, naming the key (never echoing a credential)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from cuvee.config import StreamConfig, TableConfig
from cuvee.config.decoder_config import (
    PINOT_AVRO,
    PINOT_AVRO_REGISTRY,
    PINOT_CSV,
    PINOT_JSON,
    PINOT_PROTOBUF,
    AvroOptions,
    CsvOptions,
    DecoderKind,
    ProtobufOptions,
    RegistryOptions,
)
from cuvee.config.errors import ConfigValidationError
from cuvee.stream import stream_type

KAFKA = {"streamType": "kafka", "stream.kafka.topic.name": "t", "stream.kafka.broker.list": "localhost:9092"}
CLASS = "stream.kafka.decoder.class.name"
PROP = "stream.kafka.decoder.prop."
AVRO_SCHEMA = orjson.dumps({"type": "record", "name": "E", "fields": [{"name": "a", "type": "long"}]}).decode()


def parse(**keys: str) -> StreamConfig:
    return StreamConfig.from_json({**KAFKA, **keys})


def issues(**keys: str) -> dict[str, str]:
    with pytest.raises(ConfigValidationError) as caught:
        StreamConfig.from_json({**KAFKA, **keys})
    return {issue.path: issue.message for issue in caught.value.issues}


def at(key: str) -> str:
    return f"$['{key}']"


def test_json_is_the_default_and_pinots_json_classes_map_to_it() -> None:
    assert parse().decoder.kind is DecoderKind.JSON
    for name in (PINOT_JSON, "org.apache.pinot.plugin.inputformat.json.JSONMessageDecoder"):
        assert parse(**{CLASS: name}).decoder.kind is DecoderKind.JSON


def test_each_supported_decoder_with_its_props() -> None:
    avro = parse(**{CLASS: PINOT_AVRO, PROP + "schema": AVRO_SCHEMA})
    assert avro.decoder.options == AvroOptions(schema=AVRO_SCHEMA, logical_types=True)
    registry = parse(**{CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "https://r:8081",
                        PROP + "cached.schema.map.capacity": "50", PROP + "basic.auth.credentials.source": "USER_INFO",
                        PROP + "schema.registry.basic.auth.user.info": "u:p",
                        PROP + "schema.registry.ssl.truststore.location": "/ca.pem",
                        PROP + "schema.registry.ssl.truststore.type": "PEM"})
    assert registry.decoder.options == RegistryOptions(
        url="https://r:8081", cache_capacity=50, logical_types=False,
        client_settings=(("basic.auth.user.info", "u:p"), ("ssl.ca.location", "/ca.pem")))
    assert "u:p" not in repr(registry.decoder)
    protobuf = parse(**{CLASS: PINOT_PROTOBUF, PROP + "descriptorFile": "file:///etc/e.desc",
                        PROP + "protoClassName": "my.pkg.Event"})
    assert protobuf.decoder.options == ProtobufOptions(descriptor_file="/etc/e.desc", message_type="my.pkg.Event")
    csv = parse(**{CLASS: PINOT_CSV, PROP + "delimiter": "|", PROP + "header": "a|b", PROP + "fileFormat": "mysql"})
    assert csv.decoder.options == CsvOptions(delimiter="|", header=("a", "b"), quote_character=None,
                                             escape_character="\\", null_string="\\N", ignore_empty_lines=False)


def test_the_decoder_survives_a_trip_through_the_table_config() -> None:
    doc = {"tableName": "t", "tableType": "REALTIME", "tableIndexConfig": {"streamConfigs": {
        **KAFKA, CLASS: PINOT_AVRO, PROP + "schema": AVRO_SCHEMA}}}
    table = TableConfig.from_json(doc)
    assert TableConfig.from_json(table.to_json()) == table
    assert table.stream is not None and table.stream.decoder.kind is DecoderKind.AVRO


@pytest.mark.parametrize(("keys", "key", "fragment"), [
    ({CLASS: "com.example.MyDecoder"}, CLASS, "not a decoder Cuvee runs (supported:"),
    ({CLASS: "org.apache.pinot.plugin.inputformat.avro.KafkaAvroMessageDecoder"}, CLASS, "LinkedIn"),
    ({CLASS: "org.apache.pinot.plugin.inputformat.protobuf.KafkaConfluentSchemaRegistryProtoBufMessageDecoder"},
     CLASS, "use org.apache.pinot.plugin.inputformat.protobuf.ProtoBufMessageDecoder"),
    ({CLASS: PINOT_JSON, PROP + "foo": "1"}, PROP + "foo", "JSON messages take no decoder props"),
    ({CLASS: PINOT_AVRO}, PROP + "schema", "required"),
    ({CLASS: PINOT_AVRO, PROP + "schema": "{not json"}, PROP + "schema", "not JSON"),
    ({CLASS: PINOT_AVRO, PROP + "schema": '{"type": "record", "name": "E", "fields": [{"name": "a", "type": "nope"}]}'},
     PROP + "schema", "not a valid Avro schema"),
    ({CLASS: PINOT_AVRO, PROP + "schema": '"long"'}, PROP + "schema", "must be an Avro record schema"),
    ({CLASS: PINOT_AVRO, PROP + "schema": AVRO_SCHEMA, PROP + "enableLogicalTypes": "yes"},
     PROP + "enableLogicalTypes", "must be true or false"),
    ({CLASS: PINOT_AVRO, PROP + "schema": AVRO_SCHEMA, PROP + "recordExtractorClass": "com.x.Mine"},
     PROP + "recordExtractorClass", "only Pinot's"),
    ({CLASS: PINOT_AVRO_REGISTRY}, PROP + "schema.registry.rest.url", "required"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "registry:8081"},
     PROP + "schema.registry.rest.url", "must be http:// or https://"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r", PROP + "cached.schema.map.capacity": "0"},
     PROP + "cached.schema.map.capacity", "must be an integer"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r",
      PROP + "basic.auth.credentials.source": "USER_INFO"}, PROP + "basic.auth.user.info", "required with"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r",
      PROP + "basic.auth.user.info": "u:hunter2"}, PROP + "basic.auth.user.info", "has no effect unless"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r",
      PROP + "basic.auth.credentials.source": "SASL_INHERIT"}, PROP + "basic.auth.credentials.source", "USER_INFO or URL"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r",
      PROP + "schema.registry.ssl.truststore.location": "/t.jks"}, PROP + "schema.registry.ssl.truststore.location",
     "keytool"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r",
      PROP + "schema.registry.ssl.keystore.location": "/k.p12", PROP + "schema.registry.ssl.keystore.type": "PKCS12"},
     PROP + "schema.registry.ssl.keystore.type", "openssl pkcs12"),
    ({CLASS: PINOT_AVRO_REGISTRY, PROP + "schema.registry.rest.url": "http://r", PROP + "bearer.auth.token": "x"},
     PROP + "bearer.auth.token", "not a prop of this decoder"),
    ({CLASS: PINOT_PROTOBUF}, PROP + "descriptorFile", "required"),
    ({CLASS: PINOT_PROTOBUF, PROP + "descriptorFile": "events.desc"}, PROP + "descriptorFile", "absolute path"),
    ({CLASS: PINOT_PROTOBUF, PROP + "descriptorFile": "s3://b/e.desc"}, PROP + "descriptorFile", "local file"),
    ({CLASS: PINOT_PROTOBUF, PROP + "descriptorFile": "/e.desc", PROP + "protoClassName": "a b"},
     PROP + "protoClassName", "message type's name"),
    ({CLASS: PINOT_CSV, PROP + "delimiter": "::"}, PROP + "delimiter", "exactly one character"),
    ({CLASS: PINOT_CSV, PROP + "fileFormat": "XLS"}, PROP + "fileFormat", "must be one of"),
    ({CLASS: PINOT_CSV, PROP + "quoteMode": "ALL"}, PROP + "quoteMode", "only changes how CSV is written"),
    ({CLASS: PINOT_CSV, PROP + "header": "a,,b"}, PROP + "header", "distinct, non-empty"),
    ({CLASS: PINOT_CSV, PROP + "skipHeader": "true"}, PROP + "skipHeader", "needs header"),
    ({CLASS: PINOT_CSV, PROP + "delimiter": '"'}, PROP + "delimiter", "must differ"),
])
def test_a_decoder_that_cannot_be_built_is_refused_by_key(keys: dict[str, str], key: str, fragment: str) -> None:
    found = issues(**keys)
    assert at(key) in found, found
    assert fragment in found[at(key)]
    assert "hunter2" not in " ".join(found.values())


def test_decoder_keys_of_the_embedded_log(tmp_path: Any) -> None:
    configs = {"streamType": "log", "stream.log.topic.name": "t", "stream.log.dir": str(tmp_path),
               "stream.log.decoder.class.name": PINOT_CSV, "stream.log.decoder.prop.header": "a,b"}
    assert StreamConfig.from_json(configs).decoder.kind is DecoderKind.CSV
    assert stream_type(configs) == "log"  # not an unknown stream.log.* key


@pytest.mark.parametrize("items", ['"null"', '{"type": "record", "name": "Empty", "fields": []}',
                                   '{"type": "fixed", "name": "Z", "size": 0}'])
def test_arrays_of_items_that_take_no_bytes_are_refused(items: str) -> None:
    """A few bytes could claim billions of such items: fastavro builds 10^8 nulls in ~10 s and ~1 GB."""
    schema = '{"type": "record", "name": "E", "fields": [{"name": "a", "type": {"type": "array", "items": %s}}]}' % items
    found = issues(**{CLASS: PINOT_AVRO, PROP + "schema": schema})
    assert "items take no bytes" in found[at(PROP + "schema")]
    fine = '{"type": "record", "name": "E", "fields": [{"name": "a", "type": {"type": "array", "items": "boolean"}}]}'
    assert parse(**{CLASS: PINOT_AVRO, PROP + "schema": fine}).decoder.kind is DecoderKind.AVRO


def test_the_format_prop_of_pinots_examples_must_match_the_decoder() -> None:
    assert parse(**{CLASS: PINOT_JSON, PROP + "format": "JSON"}).decoder.kind is DecoderKind.JSON
    assert parse(**{CLASS: PINOT_AVRO, PROP + "schema": AVRO_SCHEMA, PROP + "format": "avro"}).decoder.kind \
        is DecoderKind.AVRO
    found = issues(**{CLASS: PINOT_JSON, PROP + "format": "AVRO"})
    assert found == {at(PROP + "format"): "'AVRO' does not match the decoder, which reads JSON"}
