"""A consuming segment decodes with the table's decoder (Pinot's ``stream.<type>.decoder.class.name``), waits out a
schema registry outage without losing or dropping a row, and fails its start (the transition goes to ERROR) when
its decoder cannot be built there."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from cuvee.config.decoder_config import PINOT_AVRO_REGISTRY, PINOT_CSV, PINOT_PROTOBUF
from cuvee.decode import DecoderSetupError
from cuvee.protocol.completion import hold
from cuvee.server.consuming import SegmentCompletionClient
from cuvee.stream import open_producer
from cuvee.testing.schema_registry import SchemaRegistryServer
from tests.segment.decoder_helpers import avro_bytes
from tests.server.test_consuming_support import (
    FAST,
    ScriptedController,
    make_replica,
    record,
    serving,
    stream_configs,
    table,
    wait_until,
)

AVRO = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"}, {"name": "country", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}, {"name": "clicks", "type": "int"},
    {"name": "ts", "type": "long"}]}
CONFIG = replace(FAST, decoder_retry_max_seconds=0.1, schema_registry_timeout_seconds=1.0)

@pytest.fixture
def client() -> Iterator[SegmentCompletionClient]:
    fake = ScriptedController(lambda request: hold(request.offset))
    with serving(fake) as service:
        completion = SegmentCompletionClient(FAST, leader_url=service.url)
        yield completion
        completion.close()

def produce_raw(log_dir: Path, values: list[bytes]) -> None:
    producer = open_producer(stream_configs(log_dir))
    for value in values:
        producer.produce(value, partition=0)
    producer.flush()
    producer.close()

def test_a_registry_outage_delays_rows_and_loses_none(tmp_path: Path, log_dir: Path, client, replicas) -> None:
    with SchemaRegistryServer() as registry:
        schema_id = registry.register("events-value", orjson.dumps(AVRO).decode())
        produce_raw(log_dir, [b"\x00" + schema_id.to_bytes(4, "big") + avro_bytes(AVRO, {
            "id": i, "country": "fr", "tags": ["a"], "clicks": i % 7, "ts": 1_700_000_000_000 + i}) for i in range(30)])
        registry.stop()  # down before the consumer starts
        decoder = {"stream.log.decoder.class.name": PINOT_AVRO_REGISTRY,
                   "stream.log.decoder.prop.schema.registry.rest.url": registry.url}
        replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client, config=CONFIG,
                               table_config=table(log_dir, **decoder))
        replicas.append(replica)
        replica.segment.start()
        info = wait_until(lambda: (i := replica.segment.info())["decoderRetries"] >= 3 and i)
        assert "schema registry" in info["decoderUnavailable"] and "cannot be reached" in info["decoderUnavailable"]
        assert (info["rowsConsumed"], info["currentOffset"], info["badRecords"]) == (0, 0, 0)
        registry.start()  # back on the same port
        wait_until(lambda: replica.segment.num_docs == 30)
        info = replica.segment.info()
        assert (info["badRecords"], info["decoderUnavailable"], info["decoderRetries"]) == (0, None, 0)
        assert replica.segment.snapshot().column("id").to_pylist() == list(range(30))
        assert registry.requests[f"GET /schemas/ids/{schema_id}"] == 1

def test_the_tables_decoder_is_used(tmp_path: Path, log_dir: Path, client, replicas) -> None:
    """Before decoders were chosen, every CSV message here became a bad row of the JSON decoder."""
    produce_raw(log_dir, [f"{i},de,a;b,{i},{1_700_000_000_000 + i}".encode() for i in range(5)])
    decoder = {"stream.log.decoder.class.name": PINOT_CSV, "stream.log.decoder.prop.header": "id,country,tags,clicks,ts"}
    replica = make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client,
                           table_config=table(log_dir, **decoder))
    replicas.append(replica)
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 5)
    snapshot = replica.segment.snapshot()
    assert snapshot.column("tags").to_pylist()[0] == ["a", "b"] and replica.segment.info()["badRecords"] == 0

def test_a_descriptor_file_missing_on_the_server_fails_the_start(tmp_path: Path, log_dir: Path, client) -> None:
    decoder = {"stream.log.decoder.class.name": PINOT_PROTOBUF,
               "stream.log.decoder.prop.descriptorFile": str(tmp_path / "missing.desc")}
    with pytest.raises(DecoderSetupError, match=r"descriptor file '.*missing\.desc' cannot be read"):
        make_replica(tmp_path, log_dir, record(rows=1000), instance="s1", client=client,
                     table_config=table(log_dir, **decoder))
