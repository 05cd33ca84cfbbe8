"""Every key of a Pinot config is honoured, refused by name, or accepted as a hint and listed back (the catalogue in
``cuvee.config.pinot_keys``, walked by ``cuvee.config.support``); docs/configuration.md lists each of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from cuvee.config.pinot_keys import (
    REFERENCE_END,
    REFERENCE_START,
    SCHEMA,
    STREAM,
    TABLE,
    reference_markdown,
    review_schema,
    review_table,
)
from cuvee.config.support import MAX_LISTED, Support, keys_of

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
STREAM_MAP = {"streamType": "kafka", "stream.kafka.topic.name": "t", "stream.kafka.broker.list": "k:9092"}


def table(**keys: Any) -> dict[str, Any]:
    return {"tableName": "events", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts"},
            "tableIndexConfig": {"streamConfigs": dict(STREAM_MAP)}, **keys}


def refused_paths(doc: dict[str, Any]) -> list[str]:
    return [issue.path for issue in review_table(doc).issues]


@pytest.mark.parametrize("keys, path", [
    ({"dedupConfig": {"dedupEnabled": True, "hashFunction": "MD5"}}, "$.dedupConfig.dedupEnabled"),
    ({"tierConfigs": [{"name": "cold", "segmentSelectorType": "time", "segmentAge": "30d"}]}, "$.tierConfigs"),
    ({"quota": {"maxQueriesPerSecond": "100"}}, "$.quota.maxQueriesPerSecond"),
    ({"quota": {"storage": "140G"}}, "$.quota.storage"),
    ({"instanceAssignmentConfigMap": {"CONSUMING": {"tagPoolConfig": {"tag": "t"}}}},
     "$.instanceAssignmentConfigMap"),
    ({"ingestionConfig": {"complexTypeConfig": {"fieldsToUnnest": ["items"]}}},
     "$.ingestionConfig.complexTypeConfig"),
    ({"ingestionConfig": {"aggregationConfigs": [{"columnName": "c", "aggregationFunction": "SUM(c)"}]}},
     "$.ingestionConfig.aggregationConfigs"),
    ({"tableIndexConfig": {"streamConfigs": STREAM_MAP, "starTreeIndexConfigs": [{"dimensionsSplitOrder": ["a"]}]}},
     "$.tableIndexConfig.starTreeIndexConfigs"),
    ({"tableIndexConfig": {"streamConfigs": STREAM_MAP, "enableDefaultStarTree": True}},
     "$.tableIndexConfig.enableDefaultStarTree"),
    ({"tableIndexConfig": {"streamConfigs": STREAM_MAP, "aggregateMetrics": True}},
     "$.tableIndexConfig.aggregateMetrics"),
    ({"tableIndexConfig": {"streamConfigs": STREAM_MAP, "jsonIndexConfigs": {"doc": {"excludeArray": True}}}},
     "$.tableIndexConfig.jsonIndexConfigs.doc"),
    ({"fieldConfigList": [{"name": "body", "encodingType": "RAW", "indexTypes": ["TEXT"]}]},
     "$.fieldConfigList[0].indexTypes"),
    ({"fieldConfigList": [{"name": "body", "indexType": "text"}]}, "$.fieldConfigList[0].indexType"),
    ({"fieldConfigList": [{"name": "body", "indexes": {"text": {"caseSensitive": True}}}]},
     "$.fieldConfigList[0].indexes.text"),
    ({"fieldConfigList": [{"name": "ts", "timestampConfig": {"granularities": ["DAY"]}}]},
     "$.fieldConfigList[0].timestampConfig"),
    ({"query": {"expressionOverrideMap": {"myFunc(a)": "b"}}}, "$.query.expressionOverrideMap"),
    ({"upsertConfig": {"mode": "PARTIAL", "partialUpsertMergerClass": "com.x.Merger"}},
     "$.upsertConfig.partialUpsertMergerClass"),
    ({"tenants": {"server": "DefaultTenant", "tagOverrideConfig": {"realtimeCompleted": "x_OFFLINE"}}},
     "$.tenants.tagOverrideConfig"),
    ({"segmentsConfig": {"timeColumnName": "ts", "schemaName": "other"}}, "$.segmentsConfig.schemaName"),
    ({"tableIndexConfig": {"streamConfigs": {**STREAM_MAP, "stream.kafka.metadata.populate": "true"}}},
     "$.tableIndexConfig.streamConfigs['stream.kafka.metadata.populate']"),
    ({"ingestionConfig": {"streamIngestionConfig": {"streamConfigMaps": [
        {**STREAM_MAP, "stream.kafka.partition.ids": "0,2"}]}}, "tableIndexConfig": {}},
     "$.ingestionConfig.streamIngestionConfig.streamConfigMaps[0]['stream.kafka.partition.ids']"),
])
def test_keys_that_change_data_or_answers_are_refused_by_name(keys: dict[str, Any], path: str) -> None:
    found = review_table(table(**keys))
    assert [i.path for i in found.issues] == [path]
    assert "refused until Cuvee supports it" in found.issues[0].message


@pytest.mark.parametrize("keys", [
    {"dedupConfig": {"dedupEnabled": False, "hashFunction": "NONE"}},
    {"tableIndexConfig": {"streamConfigs": STREAM_MAP, "starTreeIndexConfigs": [], "enableDefaultStarTree": False,
                          "nullHandlingEnabled": False, "aggregateMetrics": "false"}},
    {"tierConfigs": [], "quota": {}, "instanceAssignmentConfigMap": {}},
    {"fieldConfigList": [{"name": "body", "indexes": {"text": {"disabled": True}}}]},
    {"tableIndexConfig": {"streamConfigs": STREAM_MAP, "jsonIndexConfigs": {"doc": {"maxLevels": -1}}}},
    {"segmentsConfig": {"timeColumnName": "ts", "schemaName": "events"}},
])
def test_a_feature_switched_off_is_what_cuvee_does(keys: dict[str, Any]) -> None:
    assert refused_paths(table(**keys)) == []


def test_hints_and_unknown_keys_are_listed_back_as_pinots_unrecognized_properties() -> None:
    doc = table(tableIndexConfig={"streamConfigs": {**STREAM_MAP, "stream.kafka.consumer.type": "lowlevel",
                                                    "stream.kafka.wat/ever": "1"},
                                  # an empty rangeIndexColumns asks for nothing; bloomFilterColumns is honoured
                                  "loadMode": "MMAP", "rangeIndexColumns": [], "bloomFilterColumns": ["id"]},
                routing={"segmentPrunerTypes": ["partition", "time"], "instanceSelectorType": "replicaGroup"},
                tenants={"broker": "DefaultTenant", "server": "DefaultTenant"},
                metadata={"customConfigs": {"owner": "a"}}, typoKey=1,
                segmentsConfig={"timeColumnName": "ts", "timeType": "MILLISECONDS", "replicasPerPartition": "2"})
    found = review_table(doc)
    assert found.refused == ()
    assert found.unrecognized_properties() == {
        "/segmentsConfig/timeType": "MILLISECONDS",
        "/tableIndexConfig/streamConfigs/stream.kafka.consumer.type": "lowlevel",
        "/tableIndexConfig/streamConfigs/stream.kafka.wat~1ever": "1",  # JSON pointer escaping
        "/tableIndexConfig/loadMode": "MMAP",
        "/routing/segmentPrunerTypes": ["partition", "time"],  # partition alone is honoured: time is the servers'
        "/routing/instanceSelectorType": "replicaGroup",
        "/metadata/customConfigs": {"owner": "a"},
        "/typoKey": 1,
    }
    by_path = {f.pointer: f for f in found.listed}
    assert by_path["/typoKey"].support is Support.UNKNOWN and "spelling" in by_path["/typoKey"].why
    assert by_path["/tableIndexConfig/loadMode"].support is Support.HINT
    assert "/tenants/broker" not in by_path  # DefaultTenant is what Cuvee does; another tenant would be a hint
    assert "/tenants/broker" in review_table(table(tenants={"broker": "b", "server": "DefaultTenant"})
                                             ).unrecognized_properties()


def test_the_listing_is_bounded() -> None:
    doc = table(**{f"k{i}": i for i in range(MAX_LISTED + 50)})
    assert len(review_table(doc).listed) == MAX_LISTED


def test_schema_keys() -> None:
    doc = {"schemaName": "s", "enableColumnBasedNullHandling": True,
           "dimensionFieldSpecs": [{"name": "a", "dataType": "STRING", "maxLength": 10, "notNull": True,
                                    "virtualColumnProvider": "x.Y", "sampleValue": "abc"}],
           "complexFieldSpecs": [{"name": "m", "dataType": "MAP"}]}
    found = review_schema(doc)
    assert [i.path for i in found.issues] == ["$.dimensionFieldSpecs[0].virtualColumnProvider", "$.complexFieldSpecs"]
    assert found.unrecognized_properties() == {"/dimensionFieldSpecs/0/sampleValue": "abc"}


def test_docs_list_every_catalogued_key_with_what_cuvee_does() -> None:
    """docs/configuration.md carries the reference the catalogue prints (``scripts/config_reference.py``),
    word for word: a key added to the catalogue without the docs fails here."""
    text = DOCS.read_text()
    start, end = text.index(REFERENCE_START), text.index(REFERENCE_END)
    assert text[start + len(REFERENCE_START):end].strip() == reference_markdown().strip(), \
        "regenerate: .venv/bin/python scripts/config_reference.py"
    rows = reference_markdown()
    for catalogue in (TABLE, SCHEMA, STREAM):
        for path, _rule in keys_of(catalogue):
            assert path in rows or "streamConfig" in path, path


def test_the_stored_pinot_examples_review_cleanly() -> None:
    """The Pinot example configs the tests keep (their keys are all known) are refused nothing."""
    from tests.config.conftest import FIXTURES
    import orjson

    for name in ("events_kafka_table.json", "rsvp_upsert_table.json"):
        doc = orjson.loads((FIXTURES / name).read_bytes())
        found = review_table(copy.deepcopy(doc))
        assert found.refused == () and all(f.support is Support.HINT for f in found.listed), name


def test_a_config_nested_too_deep_is_refused_without_recursion() -> None:
    doc = table(metadata={"customConfigs": {}})
    value = doc["metadata"]["customConfigs"]
    for _ in range(5000):  # deeper than Python's recursion limit: the check must not recurse
        value["a"] = {}
        value = value["a"]
    [issue] = review_table(doc).issues
    assert issue.path.startswith("$.metadata.customConfigs.a.a") and issue.message == "nested more than 32 levels deep"


def test_continue_on_error_is_honoured_both_ways() -> None:
    assert refused_paths(table(ingestionConfig={"continueOnError": True})) == []
    assert refused_paths(table(ingestionConfig={"continueOnError": "false"})) == []


def test_paths_of_keys_with_quotes_stay_unambiguous() -> None:
    from cuvee.config.json_reader import child_path

    assert child_path("$", "it's.x") == "$['it\\'s.x']" and child_path("$", "a\\b.c") == "$['a\\\\b.c']"
