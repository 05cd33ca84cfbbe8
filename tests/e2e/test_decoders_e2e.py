"""End to end, as separate processes over the tansu Kafka-protocol broker: one cluster, one table per decoder
(Avro with an inline schema, Avro through a schema registry, Protobuf from a descriptor file, CSV), each fed real
messages of its format with some bad ones among them. Every good row is counted by a query through the broker,
across commits (segments are built from the decoded rows), and no bad message becomes a row. A table whose
descriptor file is missing on the servers leaves its consuming segments in ERROR instead of consuming garbage.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cuvee.config.decoder_config import PINOT_AVRO, PINOT_AVRO_REGISTRY, PINOT_CSV, PINOT_PROTOBUF
from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer
from cuvee.testing.schema_registry import SchemaRegistryServer
from cuvee.testing.tansu import TansuBroker
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST
from tests.segment.decoder_helpers import avro_bytes

ROWS = 1_200  # per table, over 2 partitions: 600 a partition, committed twice at 250 rows a segment
BAD_EVERY = 100  # one bad message after every 100 good ones
FLUSH_ROWS = 250
TS = 1_790_000_000_000

AVRO = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"}, {"name": "country", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}, {"name": "amount", "type": "double"},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}


def schema(name: str) -> dict[str, Any]:
    return {"schemaName": name,
            "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "country", "dataType": "STRING"},
                                    {"name": "tags", "dataType": "STRING", "singleValueField": False}],
            "metricFieldSpecs": [{"name": "amount", "dataType": "DOUBLE"}],
            "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                                    "granularity": "1:MILLISECONDS"}]}


def row(i: int) -> dict[str, Any]:
    return {"id": i, "country": ["fr", "de", "jp"][i % 3], "tags": [f"t{i % 4}", "x"], "amount": i / 4, "ts": TS + i}


EXPECTED_SUM = sum(i / 4 for i in range(ROWS))
LAST_TS = datetime.datetime.fromtimestamp((TS + ROWS - 1) / 1000, datetime.timezone.utc).strftime(
    "%Y-%m-%d %H:%M:%S.%f")[:-3]  # how Pinot shows a TIMESTAMP


def event_type(descriptor_path: Path) -> Any:
    """Writes events.desc (a FileDescriptorSet) and returns its Event message class."""
    f = descriptor_pb2.FieldDescriptorProto
    fields = [f(name="id", number=1, type=f.TYPE_INT64), f(name="country", number=2, type=f.TYPE_STRING),
              f(name="tags", number=3, type=f.TYPE_STRING, label=f.LABEL_REPEATED),
              f(name="amount", number=4, type=f.TYPE_DOUBLE), f(name="ts", number=5, type=f.TYPE_INT64)]
    file = descriptor_pb2.FileDescriptorProto(name="events.proto", package="e2e", syntax="proto3", message_type=[
        descriptor_pb2.DescriptorProto(name="Event", field=fields)])
    descriptor_path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[file]).SerializeToString())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("e2e.Event"))


@pytest.mark.multiprocess
@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_every_decoder_ingests_on_a_cluster(tmp_path: Path, tansu: TansuBroker) -> None:
    descriptor = tmp_path / "events.desc"
    event = event_type(descriptor)
    with SchemaRegistryServer() as registry:
        schema_id = registry.register("avro_registry-value", orjson.dumps(AVRO).decode())
        encoders = {
            "avro_inline": ({"decoder.class.name": PINOT_AVRO, "decoder.prop.schema": orjson.dumps(AVRO).decode()},
                            lambda r: avro_bytes(AVRO, r)),
            "avro_registry": ({"decoder.class.name": PINOT_AVRO_REGISTRY,
                               "decoder.prop.schema.registry.rest.url": registry.url},
                              lambda r: b"\x00" + schema_id.to_bytes(4, "big") + avro_bytes(AVRO, r)),
            "protobuf": ({"decoder.class.name": PINOT_PROTOBUF, "decoder.prop.descriptorFile": str(descriptor),
                          "decoder.prop.protoClassName": "e2e.Event"},
                         lambda r: event(**r).SerializeToString()),
            "csv": ({"decoder.class.name": PINOT_CSV, "decoder.prop.header": "id|country|tags|amount|ts",
                     "decoder.prop.delimiter": "|", "decoder.prop.multiValueDelimiter": ";"},
                    lambda r: "|".join([str(r["id"]), r["country"], ";".join(r["tags"]), repr(r["amount"]),
                                        str(r["ts"])]).encode()),
        }
        # bad messages of each format (a truncated record, another format's bytes, an unknown schema id...)
        bad = {"avro_inline": b"\x02", "avro_registry": b"\x00\x00\x00\x03\xe7\x02", "protobuf": b"\x0a\xff\xff",
               "csv": b"not|a|number|x|y"}
        info = up(LocalClusterSpec(dir=tmp_path / "cluster", servers=2, overrides=FAST))
        http = httpx.Client(timeout=30)
        try:
            for table, (keys, encode) in encoders.items():
                configs = _create(http, info["controller"], tansu, table, keys)
                messages = []
                for i in range(ROWS):
                    messages.append((str(i).encode(), encode(row(i))))
                    if i % BAD_EVERY == BAD_EVERY - 1:
                        messages.append((str(i).encode(), bad[table]))
                with open_producer(configs) as producer:
                    producer.produce_many(messages)
                    producer.flush()
            missing = _create(http, info["controller"], tansu, "no_descriptor", {
                "decoder.class.name": PINOT_PROTOBUF, "decoder.prop.descriptorFile": str(tmp_path / "gone.desc")})

            for table in encoders:
                wait_until(lambda: _served_count(http, info["broker"], table) == ROWS, 120, interval=0.2,
                           message=lambda: f"{table}: {_served_count(http, info['broker'], table)}")
                assert _scalar(http, info["broker"], f"SELECT COUNT(DISTINCT id) FROM {table}") == ROWS
                assert _scalar(http, info["broker"], f"SELECT SUM(amount) FROM {table}") == EXPECTED_SUM
                assert _scalar(http, info["broker"], f"SELECT COUNT(*) FROM {table} WHERE tags = 't1'") == ROWS // 4
                assert _scalar(http, info["broker"], f"SELECT MAX(ts) FROM {table}") == LAST_TS
                wait_until(lambda: _committed(http, info["controller"], table) >= 2, 60, interval=0.2,
                           message=f"{table}: no segment committed")
            assert registry.requests[f"GET /schemas/ids/{schema_id}"] <= 2  # cached: once per server process
            assert missing["stream.kafka.topic.name"] == "no_descriptor"
            states = wait_until(lambda: _states(http, info["controller"], "no_descriptor") == {"ERROR"} and "ERROR",
                                60, interval=0.2, message="the table without its descriptor file is not in ERROR")
            assert states == "ERROR"
        finally:
            http.close()
            down(tmp_path / "cluster")


def _create(http: httpx.Client, controller: str, broker: TansuBroker, table: str, keys: dict[str, str]) -> dict[str, str]:
    configs = {"streamType": "kafka", "stream.kafka.topic.name": table, "stream.kafka.broker.list": broker.bootstrap_servers,
               "stream.kafka.consumer.prop.auto.offset.reset": "smallest",
               "realtime.segment.flush.threshold.rows": str(FLUSH_ROWS),
               **{f"stream.kafka.{key}": value for key, value in keys.items()}}
    with open_admin(configs) as admin:
        admin.create_topic(table, 2)
    _ok(http.post(f"{controller}/schemas", json=schema(table)))
    _ok(http.post(f"{controller}/tables", json={
        "tableName": table, "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts", "replicasPerPartition": "1"},
        "tableIndexConfig": {"invertedIndexColumns": ["tags"], "streamConfigs": configs}}))
    return configs


def _ok(response: httpx.Response) -> Any:
    assert response.status_code < 400, f"{response.request.url} -> {response.status_code} {response.text}"
    return response.json() if response.content else None


def _scalar(http: httpx.Client, broker: str, sql: str) -> Any:
    answer = _ok(http.post(f"{broker}/query/sql", json={"sql": sql}))
    assert not answer.get("exceptions"), answer["exceptions"]
    return answer["resultTable"]["rows"][0][0]


def _served_count(http: httpx.Client, broker: str, table: str) -> Any:
    """COUNT(*), or the answer's exceptions while a new table's first consuming segments are not reported
    CONSUMING yet (305 for a moment after creation, on a loaded machine): waited out, not a failure."""
    answer = _ok(http.post(f"{broker}/query/sql", json={"sql": f"SELECT COUNT(*) FROM {table}"}))
    return answer.get("exceptions") or answer["resultTable"]["rows"][0][0]


def _committed(http: httpx.Client, controller: str, table: str) -> int:
    ideal = _ok(http.get(f"{controller}/tables/{table}/idealstate"))["REALTIME"]
    return sum(1 for replicas in ideal.values() if replicas and set(replicas.values()) == {"ONLINE"})


def _states(http: httpx.Client, controller: str, table: str) -> set[str]:
    view = _ok(http.get(f"{controller}/tables/{table}/externalview"))["REALTIME"]
    return {state for replicas in view.values() for state in replicas.values()}
