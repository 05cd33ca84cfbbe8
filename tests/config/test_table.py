from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from cuvee.config import (
    ConfigValidationError,
    IndexingConfig,
    OffsetReset,
    PartialUpsertStrategy,
    StreamType,
    TableConfig,
    TableType,
    UpsertMode,
    raw_table_name,
)
from tests.config.conftest import issues_of

Doc = Callable[[str], dict[str, Any]]
LOG_STREAM = {"stream.log.topic.name": "t", "stream.log.dir": "/tmp/log"}


def errors(doc: Any) -> dict[str, str]:
    with pytest.raises(ConfigValidationError) as info:
        TableConfig.from_json(doc)
    return issues_of(info.value)


def realtime(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"tableName": "events", "tableType": "REALTIME",
                           "tableIndexConfig": {"streamConfigs": dict(LOG_STREAM)}}
    doc.update(overrides)
    return doc


def test_kafka_events_table_parses(fixture_doc: Doc) -> None:
    table = TableConfig.from_json(fixture_doc("events_kafka_table"))
    assert (table.table_name, table.table_type, table.name_with_type) == ("events", TableType.REALTIME,
                                                                        "events_REALTIME")
    assert table.time_column == "ts"
    assert table.replication == 2
    assert table.segments.retention_ms == 7 * 86_400_000
    assert table.indexing == IndexingConfig(
        inverted_index_columns=("country", "device"),
        no_dictionary_columns=("user_agent", "revenue"),
        sorted_column="country",
        range_index_columns=("ts",),
        bloom_filter_columns=("event_id",),
        extra={"loadMode": "MMAP"},
    )
    assert table.tenants.broker == table.tenants.server == "DefaultTenant"
    assert table.routing.segment_pruner_types == ("partition", "time")
    assert table.stream is not None
    assert table.stream.stream_type is StreamType.KAFKA
    assert table.stream.broker_list == "kafka-1:9092,kafka-2:9092"
    assert table.stream.offset_reset is OffsetReset.SMALLEST
    assert table.stream.auto_tuned
    assert table.stream.flush_threshold_segment_size_bytes == 150 * 1024**2
    assert [(t.column_name, t.transform_function) for t in table.ingestion.transform_configs] == [
        ("day", "toDateTime(ts, 'yyyy-MM-dd')")]
    assert table.ingestion.filter_function == "is_bot = true"
    assert not table.is_upsert


def test_log_events_table_with_suffix_and_legacy_keys(fixture_doc: Doc) -> None:
    table = TableConfig.from_json(fixture_doc("events_log_table"))
    assert table.table_name == "events"
    assert table.name_with_type == "events_REALTIME"
    assert table.replication == 1
    assert table.stream is not None
    assert table.stream.stream_type is StreamType.LOG
    assert (table.stream.topic_name, table.stream.log_dir) == ("events", "/var/cuvee/log")
    assert table.stream.flush_threshold_rows == 500_000
    assert table.stream.flush_threshold_time_ms == 30 * 60_000
    assert table.indexing.sorted_column is None


def test_upsert_table_reads_stream_from_ingestion_config(fixture_doc: Doc) -> None:
    table = TableConfig.from_json(fixture_doc("rsvp_upsert_table"))
    assert table.is_upsert
    assert table.upsert is not None
    assert table.upsert.mode is UpsertMode.PARTIAL
    assert table.comparison_columns == ("mtime",)
    assert table.upsert.delete_record_column == "deleted"
    assert table.upsert.metadata_ttl == 86_400_000
    assert table.upsert.partial_upsert_strategies == {
        "rsvp_count": PartialUpsertStrategy.INCREMENT,
        "group_topics": PartialUpsertStrategy.UNION,
        "venue_name": PartialUpsertStrategy.IGNORE,
    }
    assert table.upsert.extra == {}
    assert (table.upsert.hash_function, table.upsert.snapshot, table.upsert.preload) == ("NONE", True, None)
    assert table.upsert.snapshot_enabled and table.upsert.preload_enabled
    assert table.routing.instance_selector_type == "strictReplicaGroup"
    assert table.stream is not None and table.stream.topic_name == "rsvp"
    assert table.stream.flush_threshold_rows == 100_000


def test_offline_table_has_no_stream(fixture_doc: Doc) -> None:
    table = TableConfig.from_json(fixture_doc("airline_offline_table"))
    assert table.name_with_type == "airlineStats_OFFLINE"
    assert table.stream is None
    assert table.replication == 3
    assert table.tenants.server == "airline"
    assert table.indexing.extra["starTreeIndexConfigs"][0]["maxLeafRecords"] == 10


@pytest.mark.parametrize("name", ["events_kafka_table", "events_log_table", "rsvp_upsert_table",
                                  "airline_offline_table"])
def test_round_trip(fixture_doc: Doc, name: str) -> None:
    table = TableConfig.from_json(fixture_doc(name))
    written = table.to_json()
    assert TableConfig.from_json(written) == table
    assert TableConfig.from_json(copy.deepcopy(written)).to_json() == written


def test_unknown_keys_are_kept_everywhere(fixture_doc: Doc) -> None:
    written = TableConfig.from_json(fixture_doc("events_kafka_table")).to_json()
    assert written["metadata"] == {"customConfigs": {"owner": "analytics"}}
    assert written["segmentsConfig"]["segmentPushType"] == "APPEND"
    assert written["tableIndexConfig"]["loadMode"] == "MMAP"
    streams = written["tableIndexConfig"]["streamConfigs"]
    assert streams["stream.kafka.decoder.class.name"].endswith("KafkaJSONMessageDecoder")


def test_stream_is_written_back_where_it_was_found(fixture_doc: Doc) -> None:
    written = TableConfig.from_json(fixture_doc("rsvp_upsert_table")).to_json()
    assert "streamConfigs" not in written["tableIndexConfig"]
    maps = written["ingestionConfig"]["streamIngestionConfig"]["streamConfigMaps"]
    assert maps[0]["stream.kafka.topic.name"] == "rsvp"


def test_parsing_does_not_keep_references_into_the_input(fixture_doc: Doc) -> None:
    doc = fixture_doc("events_kafka_table")
    table = TableConfig.from_json(doc)
    doc["metadata"]["customConfigs"]["owner"] = "changed"
    doc["tableIndexConfig"]["streamConfigs"]["stream.kafka.topic.name"] = "changed"
    assert table.to_json()["metadata"]["customConfigs"]["owner"] == "analytics"
    assert table.stream is not None and table.stream.topic_name == "events"


@pytest.mark.parametrize("name", ["events", "events_REALTIME"])
def test_table_name_with_or_without_suffix(name: str) -> None:
    table = TableConfig.from_json(realtime(tableName=name))
    assert (table.table_name, table.name_with_type) == ("events", "events_REALTIME")
    assert table.to_json()["tableName"] == "events_REALTIME"


def test_table_type_is_inferred_from_the_suffix() -> None:
    doc = realtime(tableName="events_REALTIME")
    del doc["tableType"]
    assert TableConfig.from_json(doc).table_type is TableType.REALTIME


def test_raw_table_name() -> None:
    assert raw_table_name("a_OFFLINE") == raw_table_name("a_REALTIME") == raw_table_name("a") == "a"


def test_suffix_must_match_the_table_type() -> None:
    found = errors(realtime(tableName="events_OFFLINE"))
    assert found["$.tableName"] == "'events_OFFLINE' ends in _OFFLINE but tableType is REALTIME"


@pytest.mark.parametrize("name", ["ev__ents", "ev/ents", "ev.ents", "_events", "a b"])
def test_table_names_that_break_segment_names_or_paths_are_refused(name: str) -> None:
    assert "must be letters, digits" in errors(realtime(tableName=name))["$.tableName"]


def test_name_and_type_are_required() -> None:
    found = errors({"tableIndexConfig": {}})
    assert found["$.tableName"] == "required, a non-empty string"
    assert errors({"tableName": "x"})["$.tableType"] == "required, REALTIME or OFFLINE"
    hybrid = errors({"tableName": "x", "tableType": "HYBRID"})
    assert hybrid["$.tableType"] == "'HYBRID' is not one of REALTIME, OFFLINE"


def test_a_table_config_must_be_an_object() -> None:
    assert errors([1, 2]) == {"$": "must be a JSON object"}


def test_realtime_table_needs_a_stream() -> None:
    found = errors({"tableName": "events", "tableType": "REALTIME"})
    assert found == {"$.tableIndexConfig.streamConfigs": "required for a REALTIME table"}


def test_offline_table_must_not_have_a_stream() -> None:
    found = errors({"tableName": "events", "tableType": "OFFLINE",
                    "tableIndexConfig": {"streamConfigs": LOG_STREAM}})
    assert "does not consume a stream" in found["$.tableIndexConfig.streamConfigs"]


def test_stream_in_two_places_is_refused() -> None:
    doc = realtime(ingestionConfig={"streamIngestionConfig": {"streamConfigMaps": [LOG_STREAM]}})
    path = "$.ingestionConfig.streamIngestionConfig.streamConfigMaps"
    assert "not both" in errors(doc)[path]


def test_more_than_one_stream_map_is_refused() -> None:
    doc = {"tableName": "e", "tableType": "REALTIME",
           "ingestionConfig": {"streamIngestionConfig": {"streamConfigMaps": [LOG_STREAM, LOG_STREAM]}}}
    found = errors(doc)
    assert found["$.ingestionConfig.streamIngestionConfig.streamConfigMaps"] == \
        "must be a list of exactly one stream config map"


def test_stream_errors_carry_their_full_path() -> None:
    found = errors(realtime(tableIndexConfig={"streamConfigs": {"streamType": "kafka"}}))
    assert set(found) == {"$.tableIndexConfig.streamConfigs['stream.kafka.topic.name']",
                          "$.tableIndexConfig.streamConfigs['stream.kafka.broker.list']"}


def test_replication_keys() -> None:
    assert TableConfig.from_json(realtime(segmentsConfig={"replication": 3})).replication == 3
    both = realtime(segmentsConfig={"replication": "3", "replicasPerPartition": "2"})
    assert TableConfig.from_json(both).replication == 2
    assert TableConfig.from_json(realtime()).replication == 1


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, True])
def test_replication_must_be_a_positive_integer(value: Any) -> None:
    found = errors(realtime(segmentsConfig={"replicasPerPartition": value}))
    assert found == {"$.segmentsConfig.replicasPerPartition": "must be a positive integer"}


def test_retention_needs_unit_and_value() -> None:
    assert errors(realtime(segmentsConfig={"retentionTimeValue": "3"})) == {
        "$.segmentsConfig.retentionTimeUnit": "required when the other retention key is given"}
    found = errors(realtime(segmentsConfig={"retentionTimeUnit": "WEEKS", "retentionTimeValue": "x"}))
    assert "'WEEKS' is not one of DAYS" in found["$.segmentsConfig.retentionTimeUnit"]
    assert found["$.segmentsConfig.retentionTimeValue"] == "must be a positive integer"
    hours = TableConfig.from_json(realtime(segmentsConfig={"retentionTimeUnit": "hours", "retentionTimeValue": 5}))
    assert hours.segments.retention_ms == 5 * 3_600_000


def test_sorted_column_forms() -> None:
    as_list = TableConfig.from_json(realtime(tableIndexConfig={"streamConfigs": LOG_STREAM, "sortedColumn": ["a"]}))
    as_text = TableConfig.from_json(realtime(tableIndexConfig={"streamConfigs": LOG_STREAM, "sortedColumn": "a"}))
    empty = TableConfig.from_json(realtime(tableIndexConfig={"streamConfigs": LOG_STREAM, "sortedColumn": []}))
    assert as_list.indexing.sorted_column == as_text.indexing.sorted_column == "a"
    assert empty.indexing.sorted_column is None
    assert as_text.to_json()["tableIndexConfig"]["sortedColumn"] == ["a"]


def test_index_rules_that_need_no_schema() -> None:
    found = errors(realtime(tableIndexConfig={
        "streamConfigs": LOG_STREAM,
        "sortedColumn": ["a", "b"],
        "invertedIndexColumns": ["x", "y"],
        "noDictionaryColumns": ["y", 3],
        "rangeIndexColumns": "x",
    }))
    assert found == {
        "$.tableIndexConfig.sortedColumn": "at most one sorted column, got 2",
        "$.tableIndexConfig.invertedIndexColumns[1]":
            "'y' is also in noDictionaryColumns; an inverted index needs a dictionary",
        "$.tableIndexConfig.noDictionaryColumns[1]": "must be a non-empty string",
        "$.tableIndexConfig.rangeIndexColumns": "must be a list of column names",
    }


def test_sorted_column_cannot_be_raw() -> None:
    found = errors(realtime(tableIndexConfig={"streamConfigs": LOG_STREAM, "sortedColumn": ["a"],
                                              "noDictionaryColumns": ["a"]}))
    assert "needs a dictionary" in found["$.tableIndexConfig.sortedColumn"]


def test_tenants_default() -> None:
    table = TableConfig.from_json(realtime())
    assert (table.tenants.broker, table.tenants.server) == ("DefaultTenant", "DefaultTenant")
    assert table.to_json()["tenants"] == {"broker": "DefaultTenant", "server": "DefaultTenant"}


def test_upsert_config_problems() -> None:
    found = errors(realtime(upsertConfig={
        "mode": "SOMETIMES",
        "comparisonColumn": "a",
        "comparisonColumns": ["b", "c"],
        "metadataTTL": -1,
        "partialUpsertStrategies": {"x": "MULTIPLY"},
        "defaultPartialUpsertStrategy": "NOPE",
    }))
    assert set(found) == {
        "$.upsertConfig.mode",
        "$.upsertConfig.comparisonColumn",
        "$.upsertConfig.metadataTTL",
        "$.upsertConfig.partialUpsertStrategies.x",
        "$.upsertConfig.defaultPartialUpsertStrategy",
    }
    assert "'MULTIPLY' is not one of OVERWRITE" in found["$.upsertConfig.partialUpsertStrategies.x"]


def test_upsert_keys_of_pinot_are_read_and_checked() -> None:
    table = TableConfig.from_json(realtime(upsertConfig={
        "mode": "FULL", "deleteRecordColumn": "deleted", "deletedKeysTTL": 3600, "outOfOrderRecordColumn": "late",
        "hashFunction": "murmur3", "snapshot": "DISABLE", "preload": "DEFAULT", "consistencyMode": "SNAPSHOT"}))
    upsert = table.upsert
    assert upsert is not None
    assert (upsert.deleted_keys_ttl, upsert.out_of_order_record_column, upsert.hash_function) == (3600, "late", "MURMUR3")
    assert (upsert.snapshot, upsert.preload, upsert.consistency_mode) == (False, None, "SNAPSHOT")
    assert not upsert.snapshot_enabled and not upsert.preload_enabled  # preload reads snapshots
    assert TableConfig.from_json(table.to_json()) == table
    found = errors(realtime(upsertConfig={"mode": "FULL", "hashFunction": "SHA1", "consistencyMode": "EVENTUAL",
                                          "snapshot": "ENABLE", "enableSnapshot": False, "preload": "MAYBE"}))
    assert set(found) == {"$.upsertConfig.hashFunction", "$.upsertConfig.consistencyMode",
                          "$.upsertConfig.enableSnapshot", "$.upsertConfig.preload"}


def test_hash_function_is_an_upsert_rule() -> None:
    """Replicas must key their maps alike: a changed hashFunction is refused like the other rules; snapshots are not."""
    def rules(**upsert: object) -> tuple[object, ...]:
        return TableConfig.from_json(realtime(upsertConfig={"mode": "FULL", **upsert})).upsert_rules

    assert rules(hashFunction="MD5") != rules() != rules(hashFunction="MURMUR3")
    assert rules(hashFunction="NONE") == rules() == rules(snapshot="DISABLE")


def test_upsert_mode_is_required_and_none_disables() -> None:
    assert "required" in errors(realtime(upsertConfig={}))["$.upsertConfig.mode"]
    table = TableConfig.from_json(realtime(upsertConfig={"mode": "none"}))
    assert table.upsert is not None and not table.is_upsert


def test_upsert_comparison_columns_round_trip() -> None:
    table = TableConfig.from_json(realtime(upsertConfig={"mode": "FULL", "comparisonColumns": ["a", "b"]}))
    assert table.comparison_columns == ("a", "b")
    assert TableConfig.from_json(table.to_json()) == table


def test_comparison_defaults_to_the_time_column() -> None:
    table = TableConfig.from_json(realtime(segmentsConfig={"timeColumnName": "ts"}, upsertConfig={"mode": "FULL"}))
    assert table.comparison_columns == ("ts",)


def test_upsert_on_offline_table_is_refused() -> None:
    found = errors({"tableName": "t", "tableType": "OFFLINE", "upsertConfig": {"mode": "FULL"}})
    assert found == {"$.upsertConfig.mode": "upsert is supported on REALTIME tables only"}


def test_ingestion_config_problems() -> None:
    found = errors(realtime(ingestionConfig={
        "transformConfigs": [
            {"columnName": "a", "transformFunction": "upper(b)"},
            {"columnName": "a", "transformFunction": "lower(b)"},
            {"transformFunction": "lower(b)"},
            "oops",
        ],
        "filterConfig": {"filterFunction": ""},
    }))
    assert found == {
        "$.ingestionConfig.transformConfigs[1].columnName": "'a' has more than one transform",
        "$.ingestionConfig.transformConfigs[2].columnName": "required, a non-empty string",
        "$.ingestionConfig.transformConfigs[3]": "must be a JSON object",
        "$.ingestionConfig.filterConfig.filterFunction": "must be a non-empty string",
    }


def test_many_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigValidationError) as info:
        TableConfig.from_json({
            "tableName": "bad__name",
            "tableType": "REALTIME",
            "segmentsConfig": {"replicasPerPartition": "0", "retentionTimeUnit": "EONS", "retentionTimeValue": 1},
            "tableIndexConfig": {"sortedColumn": ["a", "b"], "streamConfigs": {"streamType": "pigeon"}},
            "tenants": "DefaultTenant",
            "ingestionConfig": {"transformConfigs": [{}]},
        })
    found = issues_of(info.value)
    assert len(info.value.issues) == 8
    assert set(found) == {
        "$.tableName",
        "$.segmentsConfig.replicasPerPartition",
        "$.segmentsConfig.retentionTimeUnit",
        "$.tableIndexConfig.sortedColumn",
        "$.tableIndexConfig.streamConfigs.streamType",
        "$.tenants",
        "$.ingestionConfig.transformConfigs[0].columnName",
        "$.ingestionConfig.transformConfigs[0].transformFunction",
    }
    message = str(info.value)
    assert message.startswith("invalid table config: ")
    assert "$.segmentsConfig.replicasPerPartition: must be a positive integer" in message
    assert info.value.to_json()[0] == {"path": info.value.issues[0].path, "message": info.value.issues[0].message}


def test_pauseless_consumption_is_off_by_default_and_read_from_pinots_key() -> None:
    assert TableConfig.from_json(realtime()).ingestion.pauseless_consumption is False
    doc = realtime(ingestionConfig={"streamIngestionConfig": {"pauselessConsumptionEnabled": "true",
                                                              "columnMajorSegmentBuilderEnabled": True}})
    table = TableConfig.from_json(doc)
    assert table.ingestion.pauseless_consumption is True
    # the whole streamIngestionConfig is written back as it came, unknown keys included
    assert table.to_json()["ingestionConfig"] == doc["ingestionConfig"]
    assert errors(realtime(ingestionConfig={"streamIngestionConfig": {"pauselessConsumptionEnabled": 1}})) == {
        "$.ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled": "must be true or false"}


def test_batch_ingestion_config_is_pinots_newer_spelling_of_push_type_and_frequency() -> None:
    offline = {"tableName": "events", "tableType": "OFFLINE"}
    table = TableConfig.from_json({**offline, "ingestionConfig": {"batchIngestionConfig": {
        "segmentIngestionType": "refresh", "segmentIngestionFrequency": "HOURLY"}}})
    assert (table.push_type, table.push_frequency) == ("REFRESH", "HOURLY")
    assert table.to_json()["ingestionConfig"]["batchIngestionConfig"]["segmentIngestionType"] == "refresh"
    assert (TableConfig.from_json(offline).push_type, TableConfig.from_json(offline).push_frequency) == \
        ("APPEND", "DAILY")
    both = {**offline, "segmentsConfig": {"segmentPushType": "APPEND"},
            "ingestionConfig": {"batchIngestionConfig": {"segmentIngestionType": "REFRESH"}}}
    assert "disagrees with segmentsConfig.segmentPushType" in \
        errors(both)["$.ingestionConfig.batchIngestionConfig.segmentIngestionType"]
    bad = {**offline, "ingestionConfig": {"batchIngestionConfig": {"segmentIngestionFrequency": "WEEKLY"}}}
    assert "HOURLY, DAILY" in errors(bad)["$.ingestionConfig.batchIngestionConfig.segmentIngestionFrequency"]
