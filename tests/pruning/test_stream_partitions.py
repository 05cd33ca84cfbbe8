"""The pure rules of ``cuvee.pruning.stream_partitions``: what a consuming segment's stream partition lets the
broker assume, the replica's check of its rows, and the node that records segments holding other partitions."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cuvee.protocol.completion import ProtocolError, SegmentCommitEnd, request_from_dict
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.cluster.assignment import new_segment_record
from cuvee.cluster.records import SegmentRecord
from cuvee.config.schema import Schema
from cuvee.pruning.stream_partitions import (MixedPartitions, StrayCheck, checked_spec, consuming_partitions,
                                             stream_partition_count)
from cuvee.segment.partitioning import (MAX_PARTITIONS, PartitionSpec, SegmentPartitions, as_declared, partitions,
                                        stream_partition_metadata)

SPEC = PartitionSpec("u", "Murmur", 4)


def _name(partition: int, sequence: int) -> str:
    return f"t__{partition}__{sequence}__20261121T1647Z"


def test_a_consuming_segment_holds_its_stream_partition_when_the_counts_agree_and_no_row_said_otherwise() -> None:
    two = SegmentPartitions("u", "Murmur", 4, (2,))
    assert consuming_partitions(_name(2, 5), SPEC, 4, (), two) == two
    assert consuming_partitions(_name(2, 5), SPEC, 8, (), two) is None  # the stream has another partition count
    assert consuming_partitions(_name(2, 5), SPEC, 4, {_name(2, 5)}, two) is None  # a replica saw another partition
    assert consuming_partitions("not-an-llc-name", SPEC, 4, (), two) is None


def test_a_consuming_segment_is_pruned_only_under_the_function_its_record_says_its_replicas_check() -> None:
    assert consuming_partitions(_name(2, 5), SPEC, 4, (), None) is None  # created before the table was partitioned
    modulo = SegmentPartitions("u", "Modulo", 4, (2,))
    assert consuming_partitions(_name(2, 5), SPEC, 4, (), modulo) is None  # checked under the old function
    assert consuming_partitions(_name(2, 5), SPEC, 4, (), SegmentPartitions("v", "Murmur", 4, (2,))) is None
    assert consuming_partitions(_name(2, 5), SPEC, 4, (), SegmentPartitions("u", "Murmur", 4, (1,))) is None


def test_a_replica_checks_under_the_records_function_not_the_tables_config() -> None:
    schema = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "u", "dataType": "LONG"},
                                                                          {"name": "s", "dataType": "STRING"}]})
    assert checked_spec(SegmentPartitions("u", "Modulo", 4, (2,)), schema, 2) == PartitionSpec(
        "u", "Modulo", 4, schema.column("u").null_value)
    assert checked_spec(None, schema, 2) is None  # nothing recorded: nothing checked, never pruned
    assert checked_spec(SegmentPartitions("u", "Modulo", 4, (1,)), schema, 2) is None  # not its stream partition
    assert checked_spec(SegmentPartitions("s", "Modulo", 4, (2,)), schema, 2) is None  # Modulo on a string
    assert checked_spec(SegmentPartitions("gone", "Murmur", 4, (2,)), schema, 2) is None


def test_a_new_consuming_segments_record_names_the_tables_function_now() -> None:
    config = {"segmentPartitionConfig": {"columnPartitionMap": {"u": {"functionName": "murmur", "numPartitions": 4}}}}
    record = new_segment_record(_name(2, 0), 2, 0, 0, 100, None, 0, index_config=config)
    assert record.partitions == SegmentPartitions("u", "Murmur", 4, (2,))
    assert SegmentRecord.from_json(record.to_json()).partitions == record.partitions
    assert new_segment_record(_name(2, 0), 2, 0, 0, 100, None, 0, index_config={}).partitions is None
    assert new_segment_record(_name(5, 0), 5, 0, 0, 100, None, 0, index_config=config).partitions is None
    huge = {"segmentPartitionConfig": {"columnPartitionMap": {"u": {"numPartitions": MAX_PARTITIONS + 1}}}}
    assert stream_partition_metadata(huge, 2) is None


def test_commit_end_partitions_are_kept_only_under_the_tables_function_and_bounded() -> None:
    config = {"segmentPartitionConfig": {"columnPartitionMap": {"u": {"functionName": "Murmur", "numPartitions": 4}}}}
    held = SegmentPartitions("u", "Murmur", 4, (1, 3))
    assert as_declared(config, held) == held
    assert as_declared(config, SegmentPartitions("not_a_column", "Murmur", 4, (1,))) is None
    assert as_declared(config, SegmentPartitions("u", "Modulo", 4, (1,))) is None
    assert as_declared({}, held) is None
    doc = {"column": "u", "functionName": "Modulo", "numPartitions": 10**15, "partitions": list(range(3_000_000))}
    assert SegmentPartitions.from_json(doc) is None  # refused on the count, before the list is read
    assert stream_partition_count([_name(0, 1), _name(3, 0), "other"]) == 4
    assert stream_partition_count([]) == 0


def test_the_check_counts_rows_of_other_partitions_hashing_each_value_once() -> None:
    values = pa.array([f"u{i}" for i in range(200)])
    found = partitions(values, SPEC)
    mine, others = values.filter(pa.array(found == 1)), values.filter(pa.array(found != 1))
    check = StrayCheck(SPEC, 1)
    assert check.strays(mine) == 0 and check.first is None
    assert check.strays(pa.chunked_array([mine, mine])) == 0  # remembered: not hashed again
    assert check.strays(pa.array([mine[0].as_py(), others[0].as_py(), others[0].as_py()])) == 2
    assert check.first == int(partitions(others.slice(0, 1), SPEC)[0]) and check.count == 2
    of_null = int(partitions(pa.array(["null"]), SPEC)[0])  # a null is partitioned as its default value
    with_null = PartitionSpec("u", "Murmur", 4, "null")
    assert StrayCheck(with_null, of_null).strays(pa.array([None, None], pa.string())) == 0
    assert StrayCheck(with_null, (of_null + 1) % 4).strays(pa.array([None, None, "null"], pa.string())) == 3
    dictionary = pa.array(["u1", "u2"]).dictionary_encode()
    assert StrayCheck(SPEC, 0).strays(dictionary) == int((partitions(pa.array(["u1", "u2"]), SPEC) != 0).sum())


def test_the_node_keeps_only_the_newest_segments_of_each_stream_partition() -> None:
    held = MixedPartitions({}).with_segment(_name(1, 3), 2).with_segment(_name(1, 4), 0)
    assert held.segments == {_name(1, 3): 2, _name(1, 4): 0}  # a pauseless partition's two consuming segments
    held = held.with_segment(_name(1, 7), 3).with_segment(_name(2, 0), 1).with_segment("junk", 1)
    assert held.segments == {_name(1, 7): 3, _name(2, 0): 1}
    assert held.with_segment(_name(1, 7), 0) is held  # the first row's partition is kept
    assert MixedPartitions.from_json(held.to_json()) == held
    assert MixedPartitions.from_json({"segments": {"a": "x", "b": 1}}) == MixedPartitions({"b": 1})
    assert MixedPartitions.from_json([]) == MixedPartitions({})


def test_commit_end_carries_the_built_segments_partitions() -> None:
    parts = SegmentPartitions("u", "Murmur", 4, (1, 3))
    end = SegmentCommitEnd(LLCSegmentName.parse(_name(1, 0)), "s", 5, "", 1, 5, 10, partitions=parts)
    doc = end.to_dict()
    assert doc["partitionMetadata"] == {"column": "u", "functionName": "Murmur", "numPartitions": 4,
                                        "partitions": [1, 3]}
    assert request_from_dict(doc) == end
    assert "partitionMetadata" not in SegmentCommitEnd(end.segment, "s", 5, "", 1, 5, 10).to_dict()
    with pytest.raises(ProtocolError, match="partitionMetadata"):
        request_from_dict({**doc, "partitionMetadata": {"column": "u", "functionName": "Nope"}})
