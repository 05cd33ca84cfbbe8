"""The catalogue: every key of Pinot's table config, schema and ``streamConfigs``, and what Cuvee does with it.

Rules and the walk are ``cuvee.config.support``; this module is data, one entry per Pinot key (Pinot's own classes:
``TableConfig`` and the configs it nests, ``Schema``/``FieldSpec``, ``StreamConfigProperties`` and the Kafka
plugin). docs/configuration.md lists each of them (``tests/config/test_pinot_keys.py`` keeps the two in step).
Wording: a hint's ``why`` says why the key changes neither data nor answers here; a refusal's says what it would
change. ``review_table`` and ``review_schema`` are what the controller runs on every config it is sent.
"""

from __future__ import annotations

from typing import Any

from cuvee.config.support import (
    HONOURED,
    ConfigReview,
    Each,
    Finding,
    Key,
    Obj,
    Patterns,
    Pick,
    Rule,
    Support,
    asks,
    hint,
    keys_of,
    refused,
    review,
)
from cuvee.config.table import raw_table_name

# ---- reasons shared by several keys ----------------------------------------------------------------------------

_SPEED = "an index or layout choice: it changes speed only, and Cuvee lays out and indexes segments its own way"
_PLACEMENT = ("Cuvee places a table's segments on the servers tagged with its tenant; this would put them elsewhere "
              "than you asked")
_OPS = "an operations setting of Pinot's own machinery, which Cuvee does differently (docs/controller.md)"
_META = "kept for you and your tools; it changes nothing in Cuvee"
_TEXT = "text indexes (TEXT_MATCH) are not supported yet"
_TIERS = "tiered storage (tierConfigs) is not supported yet"
_NULLS = ("Cuvee keeps every column's nulls (a mask beside the stored default), whatever this says: a query answers "
          "a missing value as its column's default null value, or as NULL with the query option "
          "enableNullHandling=true (docs/query.md, Null handling)")
_STAR_TREE = "star-tree indexes are not supported yet"


def _json_index_options_change_answers(config: Any) -> bool:
    """A JSON index config whose options change what JSON_MATCH matches (Cuvee answers as the default index)."""
    if not isinstance(config, dict):
        return False
    defaults = {"maxLevels": (-1, "-1", None), "excludeArray": (False, "false", None),
                "disableCrossArrayUnnest": (False, "false", None), "includePaths": (None, []),
                "excludePaths": (None, []), "excludeFields": (None, []), "indexPaths": (None, [], ["**"]),
                "maxValueLength": (0, "0", None), "skipInvalidJson": (False, "false", None),
                "disabled": (False, "false", None, True, "true")}
    return any(key in defaults and value not in defaults[key] for key, value in config.items())


_JSON_INDEX = refused("a JSON index whose options (maxLevels, excludeArray, disableCrossArrayUnnest, includePaths, "
                      "excludePaths, excludeFields, indexPaths, maxValueLength, skipInvalidJson) change what "
                      "JSON_MATCH matches: Cuvee's JSON_MATCH answers as Pinot's default JSON index does",
                      _json_index_options_change_answers)

# index ids of fieldConfigList[].indexes, and of indexType/indexTypes (upper case there)
_INDEXES: dict[str, Rule] = {
    "forward": hint(_SPEED), "dictionary": hint(_SPEED), "inverted": hint(_SPEED), "range": hint(_SPEED),
    "bloom": hint(_SPEED), "fst": hint(_SPEED), "ifst": hint(_SPEED), "h3": hint(_SPEED),
    "json": _JSON_INDEX,
    "text": refused(_TEXT, lambda v: not (isinstance(v, dict) and asks(v.get("disabled")))),
    "vector": refused("vector indexes (VECTOR_SIMILARITY) are not supported yet",
                      lambda v: not (isinstance(v, dict) and asks(v.get("disabled")))),
    "map": refused("MAP columns are not supported yet"),
    "open_struct": refused("OPEN_STRUCT columns are not supported yet"),
    "null": Key(Support.HONOURED, _NULLS),
    "timestamp": refused("timestamp indexes (the derived $column$GRANULARITY columns) are not supported yet"),
}
_REFUSED_INDEX_TYPES = {"TEXT": _TEXT, "VECTOR": "vector indexes (VECTOR_SIMILARITY) are not supported yet",
                        "TIMESTAMP": "timestamp indexes (the derived $column$GRANULARITY columns) are not supported yet"}


_INDEX_TYPES_WHY = ("refused when it names TEXT, VECTOR or TIMESTAMP (not supported yet); other index types are "
                    "hints: " + _SPEED)


def _index_types(value: Any) -> Rule:
    """``indexType``/``indexTypes``: refused when it names an index that changes answers, else a hint."""
    names = value if isinstance(value, list) else [value]
    for name in names:
        why = _REFUSED_INDEX_TYPES.get(str(name).upper())
        if why is not None:
            return refused(why, lambda _v: True)
    return hint(_SPEED)


# ---- streamConfigs (one map; Pinot's StreamConfigProperties and its Kafka plugin) --------------------------------

_HIGH_LEVEL = refused("Pinot's high-level consumer is gone: Cuvee's consumers are always low-level (one partition each)")


def _consumer_type(value: Any) -> Rule:
    if str(value).strip().lower() == "highlevel":
        return Key(Support.REFUSED, _HIGH_LEVEL.why, lambda _v: True)
    return hint("Cuvee's consumers are always Pinot's low-level (partition) consumers")


_KAFKA_CLIENT = "a Kafka client setting of Pinot's Java client"
_SECURITY = Key(Support.HONOURED, "Kafka's security keys, at the top level as Pinot's docs give them: translated to "
                "librdkafka's (see Kafka security), or refused by name when they cannot be")
STREAM: Rule = Patterns((
    ("streamType", HONOURED),
    ("stream.log.consumer.prop.auto.offset.reset", HONOURED),
    ("stream.log.consumer.prop.*", hint("the embedded log has no consumer properties besides auto.offset.reset")),
    ("stream.log.*", HONOURED),  # the embedded log's own keys: an unknown one is refused as a typo (cuvee.stream)
    ("stream.*.topic.name", HONOURED),
    ("stream.kafka.broker.list", HONOURED),
    ("stream.*.consumer.prop.auto.offset.reset", HONOURED),
    ("stream.kafka.consumer.prop.*", Key(Support.HONOURED, "librdkafka's settings, passed as they are (Kafka's "
                                         "security keys translated); one librdkafka does not know fails table "
                                         "creation")),
    ("stream.*.consumer.type", Pick(_consumer_type, "refused when highlevel (Pinot's removed high-level consumer); "
                                                    "lowlevel is a hint: Cuvee's consumers are always low-level")),
    ("stream.*.consumer.factory.class.name", hint("Cuvee reads Kafka with librdkafka (confluent-kafka), whatever "
                                                  "Pinot consumer factory is named")),
    ("stream.*.decoder.class.name", Key(Support.HONOURED, "JSON, Avro (inline schema or a schema registry), "
                                        "Protobuf and CSV (see Decoders); another class is refused by name")),
    ("stream.*.decoder.prop.*", Key(Support.HONOURED, "each decoder's properties (see Decoders); an unknown one is "
                                    "refused")),
    ("stream.*.connection.timeout.millis", hint(_OPS)),
    ("stream.*.fetch.timeout.millis", hint(_OPS)),
    ("stream.*.idle.timeout.millis", hint(_OPS)),
    ("stream.*.hlc.*", hint("a setting of Pinot's removed high-level consumer")),
    ("stream.*.zk.broker.url", hint("a setting of Pinot's removed high-level consumer")),
    ("stream.*.partition.offset.factory.class.name", hint(_OPS)),
    ("stream.*.metadata.populate", refused("stream metadata columns (__key, __header$…, __metadata$…) are not "
                                           "filled yet")),
    ("stream.kafka.isolation.level", Key(Support.HONOURED, "librdkafka's isolation.level; without it Cuvee reads "
                                        "read_committed (librdkafka's default), where Pinot's Java client reads "
                                        "read_uncommitted")),
    ("stream.kafka.partition.ids", refused("consuming a subset of a topic's partitions is not supported yet: every "
                                           "partition would be consumed")),
    ("stream.kafka.buffer.size", hint(_KAFKA_CLIENT)), ("stream.kafka.socket.timeout", hint(_KAFKA_CLIENT)),
    ("stream.kafka.fetcher.size", hint(_KAFKA_CLIENT)), ("stream.kafka.fetcher.minBytes", hint(_KAFKA_CLIENT)),
    ("stream.kafka.ssl.*", refused("Pinot's base64 certificates are not supported: give PEM files "
                                   "(ssl.truststore.location / ssl.keystore.location, see Kafka security)")),
    ("topic.consumption.rate.limit", hint("consumption is not throttled: Cuvee reads as fast as it can")),
    ("partition.consumption.rate.limit", hint("consumption is not throttled: Cuvee reads as fast as it can")),
    ("stopOnDecodeError", refused("a message that does not decode is counted as a bad row and consumption goes "
                                  "on (docs/server.md); stopping is not supported")),
    ("realtime.segment.flush.threshold.rows", HONOURED),
    ("realtime.segment.flush.threshold.size", HONOURED),
    ("realtime.segment.flush.threshold.time", HONOURED),
    ("realtime.segment.flush.threshold.segment.size", HONOURED),
    ("realtime.segment.flush.desired.size", HONOURED),
    ("realtime.segment.flush.autotune.initialRows", HONOURED),
    ("realtime.segment.flush.autotune.learning", HONOURED),  # Cuvee's own (docs/controller.md)
    ("realtime.segment.flush.threshold.size.llc", HONOURED),
    ("realtime.segment.flush.threshold.time.llc", HONOURED),
    ("realtime.segment.flush.threshold.segment.rows", refused("rows per segment independent of the partitions a "
                                                              "server consumes are not supported yet; use "
                                                              "realtime.segment.flush.threshold.rows")),
    ("realtime.segment.flush.threshold.variance.fraction", hint("segment sizes are not randomised")),
    ("realtime.segment.flush.enable_column_major", hint(_SPEED)),
    ("realtime.segment.commit.timeoutSeconds", hint("a committer's build lease is the controller's "
                                                    "completion.commit_lease_seconds")),
    ("realtime.segment.serverUploadToDeepStore", hint("a Cuvee committer always uploads its segment to the deep "
                                                      "store itself")),
    ("realtime.segment.offsetAutoReset.enable", refused("skipping a lagging partition to its latest offset is not "
                                                        "supported yet")),
    ("realtime.segment.offsetAutoReset.*", hint("without effect while offsetAutoReset.enable is false")),
    ("security.*", _SECURITY), ("sasl.*", _SECURITY), ("ssl.*", _SECURITY),
    ("key.serializer", hint("Cuvee reads messages as bytes; the decoder (stream.<type>.decoder.class.name) reads "
                            "them")),
    ("value.serializer", hint("Cuvee reads messages as bytes; the decoder (stream.<type>.decoder.class.name) reads "
                              "them")),
    ("key.deserializer", hint("Cuvee reads messages as bytes; the decoder reads them")),
    ("value.deserializer", hint("Cuvee reads messages as bytes; the decoder reads them")),
))


# ---- the table config --------------------------------------------------------------------------------------------

_SEGMENTS = Obj({
    "timeColumnName": HONOURED, "replication": HONOURED, "replicasPerPartition": HONOURED,
    "retentionTimeUnit": HONOURED, "retentionTimeValue": HONOURED, "segmentPushType": HONOURED,
    "segmentPushFrequency": HONOURED, "schemaName": HONOURED,
    "retentionSize": refused("size-based retention is not supported yet (Cuvee would keep every segment); use "
                             "retentionTimeUnit and retentionTimeValue"),
    "timeType": hint("deprecated in Pinot: the time column's unit comes from its format in the schema"),
    "deletedSegmentsRetentionPeriod": hint("deleted segments' archives stay in the deep store for the controller's "
                                           "deletion_grace_seconds"),
    "replacedSegmentsRetentionPeriod": hint("segments a lineage replace retired are deleted by the controller's "
                                            "retention task"),
    "lineageEntryCleanupRetentionPeriod": hint("stale lineage entries are reverted after the controller's "
                                               "lineage_in_progress_timeout_seconds"),
    "untrackedSegmentsDeletionBatchSize": hint(_OPS),
    "untrackedSegmentsRetentionTimeUnit": hint(_OPS), "untrackedSegmentsRetentionTimeValue": hint(_OPS),
    "segmentAssignmentStrategy": hint("deprecated in Pinot; Cuvee assigns segments by partition and tenant"),
    "replicaGroupStrategyConfig": hint("deprecated in Pinot; Cuvee places a stream partition's segments together"),
    "completionConfig": hint("Cuvee's replicas keep their own build when it equals the committed segment and download "
                             "it otherwise: the same rows either way"),
    "peerSegmentDownloadScheme": hint("Cuvee's servers always fetch committed segments from peers when the deep store "
                                      "lacks them (over HTTPS when the servers serve TLS)"),
    "crypterClassName": refused("encrypting segments in the deep store is not supported: they would be stored in "
                                "the clear"),
    "minimizeDataMovement": hint(_PLACEMENT),
    "thresholdForNumOfColValuesEnabled": hint(_SPEED),
    "allowNullTimeValue": hint("not a key of Pinot's SegmentsValidationAndRetentionConfig (documentation only)"),
})

_TENANTS = Obj({
    "broker": Key(Support.HINT, "every Cuvee broker serves every table", lambda v: v != "DefaultTenant"),
    "server": HONOURED,
    "tagOverrideConfig": refused(_PLACEMENT),
})

_INDEXING = Obj({
    "invertedIndexColumns": HONOURED, "noDictionaryColumns": HONOURED, "sortedColumn": HONOURED,
    "segmentPartitionConfig": HONOURED, "streamConfigs": STREAM,
    "rangeIndexColumns": hint("range indexes are built with each segment but queries do not use them yet: speed "
                              "only"),
    "bloomFilterColumns": HONOURED,  # servers skip committed segments whose bloom filter rules out = / IN values
    "bloomFilterConfigs": hint(_SPEED), "rangeIndexVersion": hint(_SPEED),
    "createInvertedIndexDuringSegmentGeneration": hint(_SPEED), "autoGeneratedInvertedIndex": hint(_SPEED),
    "noDictionaryConfig": hint(_SPEED), "onHeapDictionaryColumns": hint(_SPEED),
    "varLengthDictionaryColumns": hint(_SPEED), "h3IndexColumns": hint(_SPEED), "fstindexType": hint(_SPEED),
    "fstTypeForFSTIndex": hint(_SPEED), "loadMode": hint(_SPEED), "segmentFormatVersion": hint(_SPEED),
    "columnMinMaxValueGeneratorMode": hint(_SPEED), "optimizeDictionary": hint(_SPEED),
    "optimizeDictionaryForMetrics": hint(_SPEED), "optimizeDictionaryType": hint(_SPEED),
    "noDictionarySizeRatioThreshold": hint(_SPEED), "noDictionaryCardinalityRatioThreshold": hint(_SPEED),
    "columnMajorSegmentBuilderEnabled": hint(_SPEED), "enableDynamicStarTreeCreation": hint(_SPEED),
    "segmentNameGeneratorType": hint("Cuvee names segments its own way (docs/cli.md, docs/pipeline.md)"),
    "skipSegmentPreprocess": hint(_SPEED),
    "jsonIndexColumns": hint("JSON_MATCH answers as Pinot's default JSON index does without one: speed only"),
    "jsonIndexConfigs": Each(_JSON_INDEX),
    "vectorIndexColumns": refused("vector indexes (VECTOR_SIMILARITY) are not supported yet"),
    "mapIndexColumns": refused("MAP columns are not supported yet"),
    "mapIndexConfigs": refused("MAP columns are not supported yet"),
    "starTreeIndexConfigs": refused(_STAR_TREE),
    "enableDefaultStarTree": refused(_STAR_TREE),
    "aggregateMetrics": refused("ingestion-time rollup (aggregateMetrics) is not supported yet: every row would be "
                                "stored"),
    "nullHandlingEnabled": Key(Support.HONOURED, _NULLS),
    "tierOverwrites": refused(_TIERS),
    "multiColumnTextIndexConfig": refused(_TEXT),
})

_FIELD_CONFIG = Obj({
    "name": HONOURED,
    "encodingType": hint("Cuvee reads tableIndexConfig.noDictionaryColumns for raw columns; the encoding changes "
                         "speed only"),
    "indexes": Obj(_INDEXES),
    "indexTypes": Pick(_index_types, _INDEX_TYPES_WHY), "indexType": Pick(_index_types, _INDEX_TYPES_WHY),
    "compressionCodec": hint(_SPEED),
    "timestampConfig": refused("timestamp indexes (the derived $column$GRANULARITY columns) are not supported yet"),
    "properties": hint("index tuning properties: speed only (the text and vector indexes they tune are refused)"),
    "tierOverwrites": refused(_TIERS),
})

_UPSERT = Obj({
    "mode": HONOURED, "comparisonColumns": HONOURED, "comparisonColumn": HONOURED, "deleteRecordColumn": HONOURED,
    "metadataTTL": HONOURED, "deletedKeysTTL": HONOURED, "dropOutOfOrderRecord": HONOURED,
    "outOfOrderRecordColumn": HONOURED, "hashFunction": HONOURED, "snapshot": HONOURED, "preload": HONOURED,
    "enableSnapshot": HONOURED, "enablePreload": HONOURED, "consistencyMode": HONOURED,
    "partialUpsertStrategies": HONOURED, "defaultPartialUpsertStrategy": HONOURED,
    "partialUpsertMergerClass": refused("custom partial-upsert merger classes cannot run in Cuvee; use "
                                        "partialUpsertStrategies"),
    "postPartialUpsertTransformConfigs": refused("transforms after a partial-upsert merge are not supported yet"),
    "enableDeletedKeysCompactionConsistency": hint("Cuvee's upsert compaction never drops a deleted key's tombstone "
                                                   "while an older version of it is stored"),
    "upsertViewRefreshIntervalMs": hint("every consistencyMode gives Pinot's SYNC view in Cuvee: queries never see two "
                                        "versions of a key (docs/server.md)"),
    "newSegmentTrackingTimeMs": hint("every consistencyMode gives Pinot's SYNC view in Cuvee (docs/server.md)"),
    "enableCommitTimeCompaction": hint("invalid docs stay stored until UpsertCompactionTask; queries see the same "
                                       "rows (only skipUpsert=true shows the difference)"),
    "metadataManagerClass": refused("custom upsert metadata managers cannot run in Cuvee"),
    "metadataManagerConfigs": hint("configs of a custom metadata manager (refused above when one is named)"),
    "allowPartialUpsertConsumptionDuringCommit": hint(_OPS),
})

_DEDUP = Obj({
    "dedupEnabled": refused("dedup tables are not supported yet: every duplicate row would be kept"),
}, others=hint("a dedup setting, without effect while dedupEnabled is false"))

_DIMENSION = Obj({
    "disablePreload": hint("a server always reads a dimension table from its segments in memory"),
    "optimizeMemory": hint("a server always reads a dimension table from its segments in memory"),
    "errorOnDuplicatePrimaryKey": refused("duplicate primary keys in a dimension table are not detected: LOOKUP "
                                          "answers one of the rows"),
    "disallowDuplicatePrimaryKey": refused("duplicate primary keys in a dimension table are not detected: LOOKUP "
                                           "answers one of the rows"),
    "enableUpsert": refused("Cuvee's LOOKUP answers one of a duplicated key's rows, not a chosen one"),
    "upsertEnabled": refused("Cuvee's LOOKUP answers one of a duplicated key's rows, not a chosen one"),
})

_STREAM_INGESTION = Obj({
    "streamConfigMaps": Each(STREAM),
    "pauselessConsumptionEnabled": HONOURED,
    "columnMajorSegmentBuilderEnabled": hint(_SPEED),
    "trackFilteredMessageOffsets": hint("Cuvee's consumers move past filtered messages' offsets always"),
    "enforceConsumptionInOrder": hint("a Cuvee replica consumes a partition's segments in order"),
    "useIdealStateToCalculatePreviousSegment": hint(_OPS),
    "parallelSegmentConsumptionPolicy": hint(_OPS),
    "disasterRecoveryMode": hint(_OPS),
    "dropRecordOnPartitionMismatch": refused("dropping rows whose partition column does not match their stream "
                                             "partition is not supported yet: they would be kept"),
    "realtimeOffsetAutoResetHandlerClass": refused("custom offset reset handlers cannot run in Cuvee"),
})

_BATCH_INGESTION = Obj({
    "segmentIngestionType": HONOURED, "segmentIngestionFrequency": HONOURED,
    "consistentDataPush": hint("every Cuvee push is a lineage replace: consistent always"),
    "batchConfigMaps": hint("inputs of Pinot's ingestion jobs: Cuvee's `cuvee pipeline ingest` takes its input "
                            "on the command line (docs/pipeline.md)"),
    "segmentNameSpec": hint(_META), "pushSpec": hint(_META),
})

_INGESTION = Obj({
    "transformConfigs": HONOURED, "filterConfig": HONOURED,
    "streamIngestionConfig": _STREAM_INGESTION, "batchIngestionConfig": _BATCH_INGESTION,
    "enrichmentConfigs": refused("record enrichers are not supported yet"),
    "sourceFieldConfigs": refused("source field casts are not supported yet"),
    "complexTypeConfig": refused("complexTypeConfig (flattening nested input, unnesting lists) is not supported "
                                 "yet"),
    "schemaConformingTransformerConfig": refused("the schema-conforming transformer is not supported yet"),
    "schemaConformingTransformerV2Config": refused("the schema-conforming transformer is not supported yet"),
    "aggregationConfigs": refused("ingestion-time aggregation is not supported yet: every row would be stored"),
    "continueOnError": HONOURED,
    "rowTimeValueCheck": refused("nulling out-of-range time values at ingestion is not supported yet"),
    "segmentTimeValueCheck": hint("a segment's time range is recorded, not checked"),
})

_QUERY = Obj({
    "timeoutMs": HONOURED,
    "disableGroovy": hint("Groovy is never run by Cuvee"),
    "useApproximateFunction": hint("Cuvee answers distinct counts and percentiles exactly, which is a valid "
                                   "approximation"),
    "expressionOverrideMap": refused("expression overrides in queries are not supported yet"),
    "maxQueryResponseSizeBytes": hint("the broker's own max_response_rows and max_server_response_bytes bound "
                                      "answers"),
    "maxServerResponseSizeBytes": hint("the broker's max_server_response_bytes bounds a server's answer"),
    "maxEntriesScannedInFilter": hint(_OPS), "maxDocsScanned": hint(_OPS), "maxEntriesScannedPostFilter": hint(_OPS),
    "scanKillingMode": hint(_OPS),
})

def _asks_beyond_partition(value: Any) -> bool:
    """segmentPrunerTypes asks for more than the broker's partition pruning (``cuvee.broker.segment_pruning``)."""
    kinds = value if isinstance(value, list) else [value]
    return any(str(kind).lower() != "partition" for kind in kinds)


_ROUTING = Obj({
    "instanceSelectorType": Key(Support.HINT, "Cuvee picks replicas round-robin (docs/broker.md); "
                                "strictReplicaGroup is honoured: one replica reads all of a partition's segments, as "
                                "upsert tables always do", lambda v: str(v) != "strictReplicaGroup"),
    "segmentPrunerTypes": Key(Support.HINT, "partition is honoured: the broker leaves out segments whose recorded "
                              "partitions (or a consuming segment's stream partition) rule out an = or IN on the "
                              "partition column; servers always prune committed "
                              "segments by min/max, partitions and bloom filters, so time (and empty) pruning happen "
                              "there, not at the broker (docs/query.md)", _asks_beyond_partition),
    "useFixedReplica": hint("Cuvee reads a consuming segment from one fixed replica and rotates committed ones"),
    "partitionPruningPreparationThreshold": hint(_SPEED),
    "routingTableBuilderName": hint("deprecated in Pinot"),
})

TABLE: Rule = Obj({
    "tableName": HONOURED, "tableType": HONOURED, "isDimTable": HONOURED,
    "segmentsConfig": _SEGMENTS,
    "tenants": _TENANTS,
    "tableIndexConfig": _INDEXING,
    "fieldConfigList": Each(_FIELD_CONFIG),
    "metadata": Obj({"customConfigs": hint(_META)}),
    "quota": Obj({
        "storage": refused("storage quotas are not enforced yet: pushes past the quota would be accepted"),
        "maxQueriesPerSecond": refused("query rate quotas are not enforced yet"),
    }),
    "task": HONOURED,  # task.taskTypeConfigsMap: checked key by key by cuvee.maintenance.config
    "routing": _ROUTING,
    "query": _QUERY,
    "instanceAssignmentConfigMap": refused(_PLACEMENT),
    "instancePartitionsMap": refused(_PLACEMENT),
    "segmentAssignmentConfigMap": refused(_PLACEMENT),
    "tierConfigs": refused(_TIERS),
    "upsertConfig": _UPSERT,
    "dedupConfig": _DEDUP,
    "dimensionTableConfig": _DIMENSION,
    "ingestionConfig": _INGESTION,
    "tunerConfigs": hint("Pinot's config tuners rewrite index settings only"),
    "isMaterializedView": refused("materialized views are not supported yet"),
    "tableSamplers": hint("samplers are used only by queries that ask for one, which Cuvee refuses"),
    "description": hint(_META), "tags": hint(_META),
})


# ---- the schema --------------------------------------------------------------------------------------------------

_FIELD = Obj({
    "name": HONOURED, "dataType": HONOURED, "singleValueField": HONOURED, "defaultNullValue": HONOURED,
    "format": HONOURED, "granularity": HONOURED, "maxLength": HONOURED, "maxLengthExceedStrategy": HONOURED,
    "fieldType": hint("the list a field is in says what it is"),
    "defaultNullValueString": hint("Pinot writes it; Cuvee reads defaultNullValue"),
    "notNull": Key(Support.HONOURED, "with enableColumnBasedNullHandling, a notNull column answers its default null "
                   "value even to enableNullHandling=true queries, as in Pinot"),
    "allowTrailingZeros": hint("BIG_DECIMAL columns are not supported (their dataType is refused)"),
    "transformFunction": refused("field-level transforms are not supported; use the table's "
                                 "ingestionConfig.transformConfigs"),
    "virtualColumnProvider": refused("custom virtual columns are not supported; Pinot's built-in $docId, $hostName "
                                     "and $segmentName are answered by every table (docs/query.md)"),
    "sampleValue": hint(_META),
    "fieldSize": hint("a legacy key Pinot ignores"), "derivedMetricType": hint("a legacy key Pinot ignores"),
    "incomingGranularitySpec": HONOURED, "outgoingGranularitySpec": HONOURED,  # timeFieldSpec (read as date-time)
})

SCHEMA: Rule = Obj({
    "schemaName": HONOURED, "primaryKeyColumns": HONOURED,
    "dimensionFieldSpecs": Each(_FIELD), "metricFieldSpecs": Each(_FIELD), "dateTimeFieldSpecs": Each(_FIELD),
    "timeFieldSpec": _FIELD,
    "complexFieldSpecs": refused("complex columns (MAP, STRUCT, LIST) are not supported yet"),
    "enableColumnBasedNullHandling": Key(Support.HONOURED, _NULLS + "; its notNull columns answer their default "
                                         "null value to every query"),
    "options": hint("not a key of Pinot's released schema"),
})


def review_table(doc: Any) -> ConfigReview:
    """What Cuvee does with each key of a table config sent to it (``cuvee.config.support``)."""
    found = review(doc, TABLE)
    if isinstance(doc, dict):
        segments = doc.get("segmentsConfig")
        schema_name = segments.get("schemaName") if isinstance(segments, dict) else None
        name = doc.get("tableName")
        if isinstance(schema_name, str) and isinstance(name, str) and schema_name != raw_table_name(name):
            found = found.merged(ConfigReview(refused=(Finding(
                "$.segmentsConfig.schemaName", "/segmentsConfig/schemaName", schema_name, Support.REFUSED,
                f"a table's schema is the one named as the table ({raw_table_name(name)!r}), as in Pinot's newer "
                "releases"),)))
    return found


def review_schema(doc: Any) -> ConfigReview:
    """What Cuvee does with each key of a schema sent to it."""
    return review(doc, SCHEMA)


# ---- the reference docs/configuration.md carries --------------------------------------------------------------

REFERENCE_START = "<!-- pinot-keys: written by scripts/config_reference.py from cuvee/config/pinot_keys.py -->"
REFERENCE_END = "<!-- /pinot-keys -->"
_WORD = {Support.HONOURED: "honoured", Support.REFUSED: "**refused** (400)", Support.HINT: "hint (listed back)"}


def _rows(rule: Rule) -> list[str]:
    rows = []
    for path, leaf in keys_of(rule, into_patterns=rule is STREAM):
        if isinstance(leaf, Patterns):
            rows.append(f"| `{path}` | see [stream config keys](#stream-config-keys) | |")
        elif isinstance(leaf, Pick):
            rows.append(f"| `{path}` | depends on the value | {leaf.why} |")
        else:
            why = leaf.why.replace("|", "\\|")
            rows.append(f"| `{path}` | {_WORD[leaf.support]} | {why} |")
    return rows


def reference_markdown() -> str:
    """The key tables of docs/configuration.md: every catalogued key and what Cuvee does with it."""
    head = ["| key | Cuvee | why |", "|---|---|---|"]
    parts = ["#### Table config keys", "", *head, *_rows(TABLE), "", "#### Schema keys", "", *head, *_rows(SCHEMA),
             "", "#### Stream config keys", "",
             "`*` stands for any text (`stream.*.topic.name` is `stream.kafka.topic.name` or "
             "`stream.log.topic.name`); the first row that matches a key applies.", "", *head, *_rows(STREAM)]
    return "\n".join(parts) + "\n"

