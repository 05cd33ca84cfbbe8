"""Avro through a Confluent Schema Registry (Pinot's KafkaConfluentSchemaRegistryAvroMessageDecoder), against the
test registry server: the wire format, several schema ids, schemas cached by id, bad messages, basic auth, and an
unreachable or failing registry, which is DecoderUnavailable (nothing decoded, nothing counted bad), never lost
rows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cuvee.config.decoder_config import PINOT_AVRO_REGISTRY
from cuvee.decode import DecoderSetupError, DecoderUnavailable
from cuvee.testing.schema_registry import SchemaRegistryServer
from tests.segment.decoder_helpers import TS, as_rows, avro_bytes, decoder_of, expected, row
from tests.segment.test_decode_avro import AVRO_SCHEMA

V1 = {"type": "record", "name": "Event", "fields": [{"name": "i", "type": "int"}, {"name": "s", "type": "string"},
                                                       {"name": "ts", "type": "long"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "l", "type": "long", "default": 0}]}


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


def config(url: str, **props: str) -> dict[str, str]:
    return {"stream.kafka.decoder.class.name": PINOT_AVRO_REGISTRY,
            "stream.kafka.decoder.prop.schema.registry.rest.url": url,
            **{f"stream.kafka.decoder.prop.{k}": v for k, v in props.items()}}


def framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_every_column_type_from_a_registered_schema(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("events-value", orjson.dumps(AVRO_SCHEMA).decode())
    decoder = decoder_of(config(registry.url))
    messages = [framed(schema_id, avro_bytes(AVRO_SCHEMA, {**row(n), "color": "RED", "cents": 1})) for n in range(4)]
    result = decoder.decode(messages, [3, 4, 5, 6])
    assert result.bad == [] and result.offsets.tolist() == [3, 4, 5, 6]
    assert as_rows(result.batch) == [expected(n) for n in range(4)]


def test_messages_of_several_schema_versions_and_each_schema_fetched_once(registry: SchemaRegistryServer) -> None:
    v1, v2 = (registry.register("events-value", orjson.dumps(s).decode()) for s in (V1, V2))
    decoder = decoder_of(config(registry.url))
    messages = []
    for n in range(200):
        record = {"i": n, "s": f"s{n}", "ts": TS + n}
        messages.append(framed(v1, avro_bytes(V1, record)) if n % 2 else framed(v2, avro_bytes(V2, {**record, "l": n})))
    first = decoder.decode(messages[:100], range(100))
    second = decoder.decode(messages[100:], range(100, 200))
    assert first.bad == second.bad == []
    rows = as_rows(first.batch) + as_rows(second.batch)
    assert [r["i"] for r in rows] == list(range(200))
    assert [r["l"] for r in rows[:4]] == [0, None, 2, None]  # v1 has no field l
    assert registry.requests == {f"GET /schemas/ids/{v1}": 1, f"GET /schemas/ids/{v2}": 1}


def test_what_a_confluent_serializer_writes_is_read(registry: SchemaRegistryServer) -> None:
    client = SchemaRegistryClient({"url": registry.url})
    serializer = AvroSerializer(client, orjson.dumps(V1).decode())
    payload = serializer({"i": 7, "s": "seven", "ts": TS}, SerializationContext("events", MessageField.VALUE))
    result = decoder_of(config(registry.url)).decode([payload], [0])
    assert result.bad == [] and as_rows(result.batch)[0]["s"] == "seven"


def test_bad_messages_are_counted_with_their_offsets(registry: SchemaRegistryServer) -> None:
    avro_id = registry.register("events-value", orjson.dumps(V1).decode())
    proto_id = registry.register("other-value", 'syntax = "proto3"; message M { int32 a = 1; }', "PROTOBUF")
    good = framed(avro_id, avro_bytes(V1, {"i": 1, "s": "a", "ts": TS}))
    messages = [good, b'{"i": 1}', framed(999, b"\x02"), framed(proto_id, b"\x08\x01"), framed(avro_id, b"\x02"),
                b"\x00\x00", good]
    result = decoder_of(config(registry.url)).decode(messages, range(20, 27))
    assert result.offsets.tolist() == [20, 26]
    assert [(b.offset, b.reason) for b in result.bad] == [
        (21, "not in Confluent's wire format (a 0 byte, a 4-byte schema id, then Avro): unknown magic byte"),
        (22, "schema id 999 is not in the schema registry"),
        (23, f"schema id {proto_id} is a PROTOBUF schema, not Avro"),
        (24, "not an Avro record of the schema: the message ends inside the record"),
        (25, "not in Confluent's wire format (a 0 byte, a 4-byte schema id, then Avro): unknown magic byte"),
    ]


def test_a_registry_that_cannot_be_reached_decodes_nothing_and_loses_nothing(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("events-value", orjson.dumps(V1).decode())
    messages = [framed(schema_id, avro_bytes(V1, {"i": n, "s": "x", "ts": TS})) for n in range(5)]
    decoder = decoder_of(config(registry.url), registry_timeout_seconds=2.0)
    registry.stop()
    with pytest.raises(DecoderUnavailable, match="cannot be reached"):
        decoder.decode(messages, range(5))
    registry.start()  # the same port, the same schemas
    result = decoder.decode(messages, range(5))
    assert result.bad == [] and result.offsets.tolist() == list(range(5))


def test_a_failing_registry_is_unavailable_not_bad_records(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("events-value", orjson.dumps(V1).decode())
    message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
    decoder = decoder_of(config(registry.url))
    registry.fail_with = 503
    with pytest.raises(DecoderUnavailable, match="answered HTTP 503"):
        decoder.decode([message], [0])
    registry.fail_with = None
    assert decoder.decode([message], [0]).num_good == 1


def test_basic_auth_and_credentials_never_in_messages() -> None:
    with SchemaRegistryServer(user_info="svc:t0p-secret") as registry:
        schema_id = registry.register("events-value", orjson.dumps(V1).decode())
        message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
        good = decoder_of(config(registry.url, **{"basic.auth.credentials.source": "USER_INFO",
                                                  "basic.auth.user.info": "svc:t0p-secret"}))
        assert good.decode([message], [0]).num_good == 1
        wrong = decoder_of(config(registry.url.replace("http://", "http://svc:wr0ng-secret@"),
                                  **{"basic.auth.credentials.source": "URL"}))
        with pytest.raises(DecoderUnavailable) as caught:
            wrong.decode([message], [0])
        assert "401" in str(caught.value) and "wr0ng" not in str(caught.value) and "svc" not in str(caught.value)


def test_client_settings_the_registry_client_refuses_fail_the_setup(tmp_path: Any) -> None:
    missing = tmp_path / "ca.pem"
    with pytest.raises(DecoderSetupError, match="schema registry client cannot be made"):
        decoder_of(config("https://registry:8081", **{"schema.registry.ssl.truststore.location": str(missing),
                                                      "schema.registry.ssl.truststore.type": "PEM"}))


def test_decoders_of_one_registry_share_its_schemas(registry: SchemaRegistryServer) -> None:
    """A server's consuming segments (one decoder each) ask the registry for an id once between them."""
    schema_id = registry.register("events-value", orjson.dumps(V1).decode())
    message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
    for _ in range(3):
        assert decoder_of(config(registry.url)).decode([message], [0]).num_good == 1
    assert registry.requests[f"GET /schemas/ids/{schema_id}"] == 1


def test_a_registered_schema_with_unbounded_arrays_makes_its_messages_bad(registry: SchemaRegistryServer) -> None:
    schema = {"type": "record", "name": "E", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
    schema_id = registry.register("events-value", orjson.dumps(schema).decode())
    huge_count = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # zigzag varint of 2^62
    result = decoder_of(config(registry.url)).decode([framed(schema_id, huge_count + b"\x00")], [4])
    assert [(b.offset, b.reason) for b in result.bad] == [
        (4, f"schema id {schema_id} is refused: an array whose items take no bytes (null, an empty record, fixed of "
            "size 0) is not supported: a few bytes could claim billions of items")]


def test_a_registered_schema_naming_its_empty_items_by_full_name_makes_its_messages_bad(
        registry: SchemaRegistryServer) -> None:
    """The type's namespace comes from the enclosing record: the check missed it, and a 4-byte message claiming a
    million items was read (4 s, 190 MB; 2^62 items fit in 11 bytes)."""
    schema = {"type": "record", "name": "Outer", "namespace": "ns", "fields": [
        {"name": "e", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "arr", "type": {"type": "array", "items": "ns.Empty"}}]}
    schema_id = registry.register("events-value", orjson.dumps(schema).decode())
    million = b"\x80\x89\x7a"  # zigzag varint of 1,000,000
    result = decoder_of(config(registry.url)).decode([framed(schema_id, million + b"\x00")], [4])
    assert result.num_good == 0
    assert [b.reason for b in result.bad] == [f"schema id {schema_id} is refused: an array whose items take no bytes "
                                              "(null, an empty record, fixed of size 0) is not supported: a few bytes "
                                              "could claim billions of items"]


def test_only_the_registrys_own_not_found_makes_a_bad_record(registry: SchemaRegistryServer) -> None:
    """A proxy's HTML 404, a 200 without a schema, a page that is not JSON, a 403: the registry did not say the
    id does not exist, so the consumer waits; before, the first two were bad records for good (and cached)."""
    schema_id = registry.register("events-value", orjson.dumps(V1).decode())
    message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
    decoder = decoder_of(config(registry.url))
    json_type = "application/vnd.schemaregistry.v1+json"
    for answer, fragment in [
        ((404, "text/html", b"<html><body>404 Not Found (nginx)</body></html>"),
         "answered HTTP 404 for schema id %d without the registry's 'schema not found' (error code 40403)"),
        ((200, json_type, b"{}"), "answered schema id %d without a schema"),
        ((200, "text/html", b"<html>maintenance</html>"), "answered schema id %d with something that is not"),
        ((403, json_type, b'{"error_code": 40301, "message": "forbidden"}'),
         "answered HTTP 403 for schema id %d (error code 40301)"),
    ]:
        registry.answer_raw = answer
        with pytest.raises(DecoderUnavailable) as caught:
            decoder.decode([message], [0])
        assert fragment % schema_id in str(caught.value)
    registry.answer_raw = None
    result = decoder.decode([message], [0])
    assert result.bad == [] and result.num_good == 1


def test_an_id_java_cannot_hold_is_a_bad_record_without_asking(registry: SchemaRegistryServer) -> None:
    result = decoder_of(config(registry.url)).decode([framed(2**31, b"\x02"), framed(2**32 - 1, b"\x02")], [0, 1])
    assert [b.reason for b in result.bad] == [
        "schema id 2147483648 cannot be in a schema registry (ids are below 2^31)",
        "schema id 4294967295 cannot be in a schema registry (ids are below 2^31)"]
    assert not registry.requests


def test_a_registered_schema_that_is_not_a_record_is_a_bad_record_with_the_reason(
        registry: SchemaRegistryServer) -> None:
    """The parsed schema of "string" is the text 'string', which was taken for a reason."""
    schema_id = registry.register("events-value", '"string"')
    result = decoder_of(config(registry.url)).decode([framed(schema_id, b"\x02a")], [0])
    assert [b.reason for b in result.bad] == [
        f"schema id {schema_id} is refused: must be an Avro record schema (each message is one row), not 'string'"]


def test_a_decoder_with_credentials_the_registry_refuses_never_reads_schemas_another_was_given() -> None:
    """The shared cache was keyed by URL alone: a table with wrong credentials decoded what another had fetched."""
    with SchemaRegistryServer(user_info="svc:t0p-secret") as registry:
        schema_id = registry.register("events-value", orjson.dumps(V1).decode())
        message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
        auth = {"basic.auth.credentials.source": "USER_INFO"}
        good = decoder_of(config(registry.url, **auth, **{"basic.auth.user.info": "svc:t0p-secret"}))
        assert good.decode([message], [0]).num_good == 1
        wrong = decoder_of(config(registry.url, **auth, **{"basic.auth.user.info": "svc:wr0ng"}))
        with pytest.raises(DecoderUnavailable, match="answered HTTP 401"):
            wrong.decode([message], [0])
        again = decoder_of(config(registry.url, **auth, **{"basic.auth.user.info": "svc:t0p-secret"}))
        assert again.decode([message], [0]).num_good == 1
        assert registry.requests[f"GET /schemas/ids/{schema_id}"] == 2  # the good one, the refused one


def test_credentials_in_the_registry_url_are_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    """The client's HTTP library logs each request's URL at INFO: user:password went into the server's log."""
    caplog.set_level(logging.DEBUG)
    with SchemaRegistryServer(user_info="alice:S3cret%Pass") as registry:
        schema_id = registry.register("events-value", orjson.dumps(V1).decode())
        message = framed(schema_id, avro_bytes(V1, {"i": 1, "s": "x", "ts": TS}))
        url = registry.url.replace("http://", "http://alice:S3cret%25Pass@")
        decoder = decoder_of(config(url, **{"basic.auth.credentials.source": "URL"}))
        assert decoder.decode([message], [0]).num_good == 1
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"GET {registry.url}/schemas/ids/{schema_id}" in logged  # what the library logs, without credentials
    assert "S3cret" not in logged and "alice" not in logged


def test_a_registered_union_of_records_is_read_as_pinot_reads_it(registry: SchemaRegistryServer) -> None:
    """Java's reader gives the record of the branch a message holds; a message of another branch is bad."""
    schema_id = registry.register("events-value", orjson.dumps(["null", V1]).decode())
    record = avro_bytes(V1, {"i": 3, "s": "x", "ts": TS})
    result = decoder_of(config(registry.url)).decode([framed(schema_id, b"\x02" + record), framed(schema_id, b"\x00")],
                                                     [0, 1])
    assert as_rows(result.batch)[0]["i"] == 3 and [b.reason for b in result.bad] == ["not an Avro record"]
