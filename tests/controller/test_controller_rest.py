"""The controller's REST API: schemas and tables (create, read, update, delete) and every error shape."""

from __future__ import annotations

from pathlib import Path

from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller
from tests.controller.test_controller_support import (
    get,
    post,
    register_servers,
    schema_doc,
    table_doc,
)
import httpx


def _error(response: httpx.Response, status: int, fragment: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == status and fragment in body["error"], body
    return body


def test_schema_lifecycle_and_errors(leader: Controller) -> None:
    url = leader.url
    assert post(url, "/schemas", schema_doc()).status_code == 200
    assert get(url, "/schemas").json() == ["events"]
    assert get(url, "/schemas/events").json()["schemaName"] == "events"
    _error(post(url, "/schemas", schema_doc()), 409, "already exists")
    bad = {"schemaName": "", "dimensionFieldSpecs": [{"name": "a", "dataType": "NOPE"}], "metricFieldSpecs": 3}
    body = _error(post(url, "/schemas", bad), 400, "invalid schema")
    assert {i["path"] for i in body["issues"]} >= {"$.schemaName", "$.metricFieldSpecs"}
    _error(post(url, "/schemas"), 400, "body is required")
    _error(httpx.post(url + "/schemas", content=b"{not json", headers={"content-type": "application/json"}), 400, "")
    _error(get(url, "/schemas/nope"), 404, "does not exist")
    updated = schema_doc()
    updated["dimensionFieldSpecs"].append({"name": "device", "dataType": "STRING"})
    assert httpx.put(url + "/schemas/events", json=updated).status_code == 200
    assert len(get(url, "/schemas/events").json()["dimensionFieldSpecs"]) == 3
    _error(httpx.put(url + "/schemas/other", json=updated), 400, "does not match")
    _error(httpx.put(url + "/schemas/other", json=schema_doc("other")), 404, "does not exist")
    assert httpx.delete(url + "/schemas/events").status_code == 200
    _error(httpx.delete(url + "/schemas/events"), 404, "does not exist")


def test_table_lifecycle(leader: Controller, side_store: ClusterStore, log_dir: Path) -> None:
    url = leader.url
    register_servers(side_store, 3)
    post(url, "/schemas", schema_doc())
    created = post(url, "/tables", table_doc(log_dir))
    assert created.status_code == 200, created.text
    assert get(url, "/tables").json() == {"tables": ["events"]}
    for name in ("events", "events_REALTIME"):
        config = get(url, f"/tables/{name}").json()
        assert list(config) == ["REALTIME"] and config["REALTIME"]["tableName"] == "events_REALTIME"
    _error(get(url, "/tables/events_OFFLINE"), 404, "does not exist")
    assert get(url, "/tables/events/schema").json()["schemaName"] == "events"

    ideal = get(url, "/tables/events/idealstate").json()["REALTIME"]
    assert len(ideal) == 4 and all(set(r.values()) == {"CONSUMING"} and len(r) == 2 for r in ideal.values())
    [segments] = get(url, "/segments/events").json()
    assert sorted(segments["REALTIME"]) == sorted(ideal)
    first = sorted(ideal)[0]
    meta = get(url, f"/segments/events/{first}/metadata").json()
    assert (meta["status"], meta["startOffset"], meta["partition"]) == ("IN_PROGRESS", 0, 0)
    _error(get(url, "/segments/events/events__9__0__20260101T0000Z/metadata"), 404, "does not exist")
    assert get(url, "/tables/events/externalview").json() == {"REALTIME": {}}

    _error(post(url, "/tables", table_doc(log_dir)), 409, "already exists")
    _error(httpx.delete(url + "/schemas/events"), 409, "used by table")

    changed = table_doc(log_dir, rows=5000)
    assert httpx.put(url + "/tables/events", json=changed).status_code == 200
    stored = get(url, "/tables/events").json()["REALTIME"]
    assert stored["tableIndexConfig"]["streamConfigs"]["realtime.segment.flush.threshold.rows"] == "5000"
    _error(httpx.put(url + "/tables/events", json=table_doc(log_dir, topic="other")), 400, "cannot change")
    upserted = {**table_doc(log_dir), "upsertConfig": {"mode": "FULL", "comparisonColumns": ["ts"]}}
    _error(httpx.put(url + "/tables/events", json=upserted), 400, "upsertConfig's mode")  # servers decide keys by it
    _error(httpx.put(url + "/tables/events", json=table_doc(log_dir, name="x")), 400, "does not match")
    _error(httpx.put(url + "/tables/x", json=table_doc(log_dir, name="x")), 404, "does not exist")

    assert httpx.delete(url + "/tables/events").status_code == 200
    _error(get(url, "/tables/events"), 404, "does not exist")
    _error(get(url, "/segments/events"), 404, "does not exist")
    assert side_store.ideal_state("events_REALTIME") is None
    assert side_store.segment_names("events_REALTIME") == []
    assert get(url, "/tables").json() == {"tables": []}


def test_table_errors(leader: Controller, side_store: ClusterStore, log_dir: Path) -> None:
    url = leader.url
    _error(post(url, "/tables", table_doc(log_dir)), 400, "needs schema 'events'")
    post(url, "/schemas", schema_doc())
    bad = table_doc(log_dir)
    bad["segmentsConfig"]["timeColumnName"] = "nope"
    bad["tableIndexConfig"]["invertedIndexColumns"] = ["missing"]
    body = _error(post(url, "/tables", bad), 400, "invalid table config")
    assert {i["path"] for i in body["issues"]} == {
        "$.segmentsConfig.timeColumnName", "$.tableIndexConfig.invertedIndexColumns[0]"}
    no_stream = table_doc(log_dir)
    del no_stream["tableIndexConfig"]["streamConfigs"]
    _error(post(url, "/tables", no_stream), 400, "required for a REALTIME table")
    _error(post(url, "/tables", table_doc(log_dir, topic="missing")), 400, "cannot read stream topic 'missing'")
    register_servers(side_store, 1)
    body = _error(post(url, "/tables", table_doc(log_dir, replicas=2)), 400, "cannot place 2 replicas")
    assert "DefaultTenant_REALTIME" in body["error"]
    assert get(url, "/tables").json() == {"tables": []}  # nothing was written
    assert side_store.segment_names("events_REALTIME") == []
    _error(get(url, "/tables/a%2Fb"), 404, "")
    _error(get(url, "/instances/nope"), 404, "does not exist")


def test_instances_and_health(leader: Controller, side_store: ClusterStore) -> None:
    register_servers(side_store, 2)
    ids = get(leader.url, "/instances").json()["instances"]
    assert set(ids) == {"Server_0", "Server_1", leader.instance_id}
    me = get(leader.url, f"/instances/{leader.instance_id}").json()
    assert me["live"] is True and me["tags"] == ["controller"]
    server = get(leader.url, "/instances/Server_1").json()
    assert server["tags"] == ["DefaultTenant_REALTIME"] and server["live"] is True
    health = get(leader.url, "/health").json()
    assert health["status"] == "OK" and health["leader"] is True and health["leaderUrl"] == leader.url


def test_names_past_their_limits_and_host_paths_are_clear_400s_that_reveal_nothing(leader: Controller,
                                                                                   log_dir: Path) -> None:
    post(leader.url, "/schemas", schema_doc())
    huge = post(leader.url, "/tables", table_doc(log_dir, name="t" * 10_000))
    assert huge.status_code == 400 and "at most 128" in huge.json()["error"] and len(huge.text) < 2_000
    answers = []
    for where, topic in (("/etc", "hostname"), ("/etc", "ssl"), ("/nonexistent-dir", "hostname")):
        reply = post(leader.url, "/tables", table_doc(Path(where), topic=topic))
        assert reply.status_code == 400
        answers.append(reply.json()["error"].replace(where, "<dir>").replace(topic, "<topic>"))
    assert len(set(answers)) == 1, answers  # a file, a directory and nothing at all look the same to the caller
    assert "Errno" not in answers[0]


def test_refused_keys_are_a_400_naming_them_and_hints_are_listed_back(leader: Controller, side_store: ClusterStore,
                                                                      log_dir: Path) -> None:
    url = leader.url
    register_servers(side_store, 3)
    bad_schema = {**schema_doc(), "complexFieldSpecs": [{"name": "m", "dataType": "MAP"}]}
    body = _error(post(url, "/schemas", bad_schema), 400, "complex columns (MAP, STRUCT, LIST) are not supported yet")
    assert [i["path"] for i in body["issues"]] == ["$.complexFieldSpecs"]
    schema = schema_doc()
    schema["dimensionFieldSpecs"][1]["sampleValue"] = "FR"
    created = post(url, "/schemas", schema)
    assert created.json()["unrecognizedProperties"] == {"/dimensionFieldSpecs/1/sampleValue": "FR"}

    refused = {**table_doc(log_dir), "dedupConfig": {"dedupEnabled": True}, "tierConfigs": [{"name": "cold"}]}
    body = _error(post(url, "/tables", refused), 400, "dedup tables are not supported yet")
    assert [i["path"] for i in body["issues"]] == ["$.dedupConfig.dedupEnabled", "$.tierConfigs"]
    assert get(url, "/tables").json() == {"tables": []}, "nothing was written"

    hinted = table_doc(log_dir)
    hinted["tableIndexConfig"]["loadMode"] = "MMAP"
    hinted["routing"] = {"segmentPrunerTypes": ["partition", "time"]}
    hinted["dedupConfig"] = {"dedupEnabled": False}
    created = post(url, "/tables", hinted)
    assert created.status_code == 200, created.text
    assert created.json()["unrecognizedProperties"] == {"/tableIndexConfig/loadMode": "MMAP",
                                                        "/routing/segmentPrunerTypes": ["partition", "time"]}
    stored = get(url, "/tables/events").json()["REALTIME"]
    assert stored["tableIndexConfig"]["loadMode"] == "MMAP"  # kept and written back
    hinted["quota"] = {"maxQueriesPerSecond": "10"}
    _error(httpx.put(url + "/tables/events", json=hinted), 400, "query rate quotas are not enforced yet")


def test_a_decoder_that_cannot_be_built_is_a_400_naming_the_key(leader: Controller, log_dir: Path) -> None:
    """Before decoders were chosen by class name the table was created, and every message became a bad row."""
    url = leader.url
    post(url, "/schemas", schema_doc())
    unknown = table_doc(log_dir, **{"stream.log.decoder.class.name": "com.example.ThriftDecoder"})
    body = _error(post(url, "/tables", unknown), 400, "not a decoder Cuvee runs")
    assert [i["path"] for i in body["issues"]] == ["$.tableIndexConfig.streamConfigs['stream.log.decoder.class.name']"]
    avro = table_doc(log_dir, **{
        "stream.log.decoder.class.name": "org.apache.pinot.plugin.inputformat.avro.SimpleAvroMessageDecoder",
        "stream.log.decoder.prop.schema": '{"type": "record", "name": "E", "fields": [{"name": "a"}]}'})
    body = _error(post(url, "/tables", avro), 400, "not a valid Avro schema")
    assert [i["path"] for i in body["issues"]] == ["$.tableIndexConfig.streamConfigs['stream.log.decoder.prop.schema']"]
    registry = table_doc(log_dir, **{
        "stream.log.decoder.class.name":
            "org.apache.pinot.plugin.inputformat.avro.confluent.KafkaConfluentSchemaRegistryAvroMessageDecoder"})
    _error(post(url, "/tables", registry), 400, "schema.registry.rest.url")
    assert get(url, "/tables").json() == {"tables": []}
