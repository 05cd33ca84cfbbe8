"""A push of a partitioned table reads each segment's partitions from its archive in the deep store, never from the
push body; an archive that cannot be read, or that holds another segment, leaves the segment unpartitioned."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from cuvee.config import Schema, TableConfig
from cuvee.controller.segment_push import PushedSegment, _archive_partitions
from cuvee.deepstore import open_deepstore
from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
from cuvee.segment.builder import build_segment

SCHEMA = Schema.from_json({"schemaName": "t", "dimensionFieldSpecs": [{"name": "k", "dataType": "LONG"}]})
TABLE = TableConfig.from_json({"tableName": "t", "tableType": "OFFLINE", "tableIndexConfig": {
    "segmentPartitionConfig": {"columnPartitionMap": {"k": {"functionName": "Modulo", "numPartitions": 4}}}}})


def _stored(tmp: Path, name: str, keys: list[int]) -> PushedSegment:
    built = build_segment(pa.table({"k": pa.array(keys, pa.int64())}), SCHEMA, TABLE.indexing, tmp / "built", name,
                          table_name="t_OFFLINE")
    archive = pack(built.path, tmp / f"{name}{ARCHIVE_SUFFIX}")
    uri = open_deepstore((tmp / "deep").as_uri()).put(archive, f"t_OFFLINE/{name}{ARCHIVE_SUFFIX}")
    return PushedSegment(name, uri, built.crc, built.total_docs, 1, None, None)


def test_the_partitions_come_from_the_archive(tmp_path: Path) -> None:
    (tmp_path / "deep").mkdir()
    deep = open_deepstore((tmp_path / "deep").as_uri())
    one = _stored(tmp_path, "one", [2, 6, 10])
    two = _stored(tmp_path, "two", [1, 2])
    assert _archive_partitions(deep, one).partitions == (2,)  # type: ignore[union-attr]
    assert _archive_partitions(deep, two).partitions == (1, 2)  # type: ignore[union-attr]
    # the body names another segment than the archive holds, or another CRC: not trusted
    assert _archive_partitions(deep, PushedSegment("three", one.download_uri, one.crc, 3, 1, None, None)) is None
    assert _archive_partitions(deep, PushedSegment("one", one.download_uri, one.crc + 1, 3, 1, None, None)) is None
    # not an archive at all, or gone
    garbage = tmp_path / "garbage.tar.zst"
    garbage.write_bytes(b"not a tar")
    uri = deep.put(garbage, "t_OFFLINE/garbage.tar.zst")
    assert _archive_partitions(deep, PushedSegment("one", uri, one.crc, 3, 1, None, None)) is None
    deep.delete(deep.key_of(one.download_uri))
    assert _archive_partitions(deep, one) is None
