"""Pinot's segment partition functions give Pinot's (Java's) partitions, and bad configs are refused up front."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cuvee.config import Schema
from cuvee.errors import UserError
from cuvee.segment.partitioning import (PartitionSpec, SegmentPartitions, java_string_hash, partition_spec,
                                        partitions, segment_partitions)
from cuvee.spi.stream import murmur2

SCHEMA = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [
    {"name": "s", "dataType": "STRING"}, {"name": "i", "dataType": "INT"}, {"name": "l", "dataType": "LONG"},
    {"name": "d", "dataType": "DOUBLE"}, {"name": "mv", "dataType": "STRING", "singleValueField": False}]})


def config(column: str, **spec: object) -> dict[str, object]:
    return {"segmentPartitionConfig": {"columnPartitionMap": {column: spec}}}


def signed(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


def test_hashes_match_java_and_kafka() -> None:
    # Kafka's UtilsTest values for murmur2; Java's String.hashCode (UTF-16 code units: a non-BMP character is two)
    assert [signed(murmur2(s.encode())) for s in ("21", "foobar", "abc")] == [-973932308, -790332482, 479470107]
    assert java_string_hash("hello") == 99162322 and java_string_hash("10") == 1567
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partitions_per_function() -> None:
    modulo = PartitionSpec("l", "Modulo", 4)
    assert partitions(pa.array([1, 6, -1, -8, None], pa.int64()), modulo).tolist() == [1, 2, 3, 0, 0]
    murmur = PartitionSpec("s", "Murmur", 8)
    words = ["21", "foobar", "abc", None, "21"]
    expected = [(murmur2(w.encode()) & 0x7FFFFFFF) % 8 if w is not None else 0 for w in words]
    assert partitions(pa.array(words), murmur).tolist() == expected
    ints = PartitionSpec("i", "Murmur", 8)
    assert partitions(pa.array([21], pa.int32()), ints).tolist() == [(murmur2(b"21") & 0x7FFFFFFF) % 8]
    hashcode = PartitionSpec("s", "HashCode", 10)
    assert partitions(pa.array(["hello", "abc"]), hashcode).tolist() == [99162322 % 10, 96354 % 10]
    assert partitions(pa.array(["polygenelubricants"]), PartitionSpec("s", "HashCode", 3)).tolist() == [0]
    assert partitions(pa.array([10], pa.int32()), PartitionSpec("i", "HashCode", 8)).tolist() == [1567 % 8]  # "10"
    assert partitions(pa.array([], pa.string()), hashcode).tolist() == []
    with_default = PartitionSpec("s", "Murmur", 8, null_value="null")  # a null is partitioned as the stored "null"
    assert partitions(pa.array([None], pa.string()), with_default).tolist() == [(murmur2(b"null") & 0x7FFFFFFF) % 8]


def test_configs_are_checked_against_the_schema() -> None:
    assert partition_spec({}, SCHEMA) is None
    assert partition_spec(config("s", numPartitions=4), SCHEMA) == PartitionSpec("s", "Murmur", 4, "null")  # default
    assert partition_spec(config("i", functionName="modulo", numPartitions=3), SCHEMA) == \
        PartitionSpec("i", "Modulo", 3, -(2**31))
    for bad, message in ((config("s", functionName="Modulo", numPartitions=4), "needs a column of type"),
                         (config("d", functionName="Murmur", numPartitions=4), "needs a column of type"),
                         (config("s", functionName="Crc32", numPartitions=4), "not supported"),
                         (config("s", numPartitions=0), "positive integer"),
                         (config("nope", numPartitions=2), "not a single-value column"),
                         (config("mv", numPartitions=2), "not a single-value column")):
        with pytest.raises(UserError, match=message):
            partition_spec(bad, SCHEMA)


def test_a_segments_partitions_round_trip_and_bad_descriptions_are_ignored() -> None:
    spec = PartitionSpec("k", "Modulo", 4)
    found = segment_partitions(pa.array([1, 5, 9, 3], pa.int64()), spec)
    assert found.partitions == (1, 3) and found.single is None and found.same_function(spec)
    assert SegmentPartitions.from_json(found.to_json()) == found
    assert segment_partitions(pa.array([2, 6], pa.int64()), spec).single == 2
    assert not found.same_function(PartitionSpec("k", "Modulo", 8))
    for bad in (None, [], {"column": "k", "functionName": "Modulo", "numPartitions": 4, "partitions": [4]},
                {"column": "k", "functionName": "Nope", "numPartitions": 4, "partitions": [0]},
                {"column": "k", "functionName": "Modulo", "numPartitions": True, "partitions": [0]}):
        assert SegmentPartitions.from_json(bad) is None
