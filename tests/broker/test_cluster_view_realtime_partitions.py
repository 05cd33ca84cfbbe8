"""The broker's view of a partitioned REALTIME table on a real (sqlite) metadata store, polling effectively off:
committed segments' partitions come from their records (read once), consuming segments' from their stream
partition while the stream has the declared partition count and no replica reported rows of another partition
(the ``mixedpartitions`` node, reaching the view through its watch)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from cuvee.broker.cluster_view import ClusterView
from cuvee.cluster.records import ExternalView, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.pruning.stream_partitions import MixedPartitions
from cuvee.segment.partitioning import SegmentPartitions
from tests.broker.helpers import CLUSTER, FAST_META, TABLE, TABLE_DOC, segment_name, wait_until, write_table

ON, CO = SegmentState.ONLINE, SegmentState.CONSUMING
INDEX = {**TABLE_DOC["tableIndexConfig"], "segmentPartitionConfig": {"columnPartitionMap": {
    "id": {"functionName": "Murmur", "numPartitions": 2}}}}


def parts(*found: int) -> SegmentPartitions:
    return SegmentPartitions("id", "Murmur", 2, found)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    store = ClusterStore(meta, CLUSTER)
    write_table(store, tableIndexConfig=INDEX, routing={"segmentPrunerTypes": ["partition"]})
    try:
        yield store
    finally:
        meta.close()


def commit(store: ClusterStore, name: str, partitions: SegmentPartitions | None) -> None:
    store.put(store.paths.segment(TABLE, name), SegmentRecord(name, SegmentStatus.DONE, 1, partitions=partitions))


def consuming(store: ClusterStore, name: str, partitions: SegmentPartitions | None) -> None:
    """A consuming segment's record as the controller writes it: the function its replicas check it under."""
    store.put(store.paths.segment(TABLE, name), SegmentRecord(name, SegmentStatus.IN_PROGRESS, 1, start_offset=0,
                                                              partitions=partitions))


def test_segments_partitions_from_records_stream_partitions_and_the_mixed_node(store: ClusterStore) -> None:
    c0, c1, n0, n1 = segment_name(0, 0), segment_name(1, 0), segment_name(0, 1), segment_name(1, 1)
    consuming(store, n0, parts(0))
    consuming(store, n1, parts(1))
    commit(store, c0, parts(0))
    commit(store, c1, parts(0, 1))  # a producer keyed otherwise wrote partition 0's rows into stream partition 1
    store.put_external_view(ExternalView(TABLE, {c0: {"A": ON}, c1: {"B": ON}, n0: {"A": CO}, n1: {"B": CO}}))
    view = ClusterView(store, poll_seconds=600).start()
    try:
        entry = view.snapshot.tables[TABLE]
        assert dict(entry.partitions) == {c0: parts(0), c1: parts(0, 1), n0: parts(0), n1: parts(1)}
        assert entry.stream_partitions == 2 and set(entry.pruning_facts) == {c0, c1, n0, n1}
        reads = store.find_segment
        seen: list[str] = []
        store.find_segment = lambda table, name: seen.append(name) or reads(table, name)  # type: ignore[method-assign]
        # a replica reports rows of another partition in n1: from then on, its partitions are not known
        store.update(MixedPartitions, store.paths.mixed_partitions(TABLE), lambda m: m.with_segment(n1, 0),
                     initial=MixedPartitions({}))
        wait_until(lambda: n1 not in view.snapshot.tables[TABLE].partitions, 10)
        assert seen == []  # committed segments' records are not read again
        # n1 commits (its record tells the truth) and leaves the node when a later segment of partition 1 is
        # reported (the one right after it would stay: a pauseless partition's two consuming segments): read once
        # from its record
        commit(store, n1, parts(0, 1))
        n2 = segment_name(1, 3)
        store.put_external_view(ExternalView(TABLE, {c0: {"A": ON}, c1: {"B": ON}, n0: {"A": CO}, n1: {"B": ON},
                                                     n2: {"B": CO}}))
        store.update(MixedPartitions, store.paths.mixed_partitions(TABLE), lambda m: m.with_segment(n2, 0))
        wait_until(lambda: view.snapshot.tables[TABLE].partitions.get(n1) == parts(0, 1), 10)
        assert n2 not in view.snapshot.tables[TABLE].partitions and seen == [n1]
    finally:
        view.stop()


def test_a_consuming_segment_is_pruned_only_while_the_table_declares_the_function_its_record_names(
        store: ClusterStore) -> None:
    before, other, n1 = segment_name(0, 0), segment_name(1, 0), segment_name(1, 1)
    consuming(store, before, None)  # created while the table was not partitioned: its rows were never checked
    consuming(store, other, SegmentPartitions("id", "Modulo", 2, (1,)))  # checked under the function before a PUT
    consuming(store, n1, parts(1))
    store.put_external_view(ExternalView(TABLE, {before: {"A": CO}, other: {"B": ON}, n1: {"B": CO}}))
    commit(store, other, SegmentPartitions("id", "Modulo", 2, (1,)))
    view = ClusterView(store, poll_seconds=600).start()
    try:
        entry = view.snapshot.tables[TABLE]
        assert dict(entry.partitions) == {before: None, other: SegmentPartitions("id", "Modulo", 2, (1,)),
                                          n1: parts(1)}
        assert set(entry.pruning_facts) == {n1}  # the committed one was partitioned by another function
        # the table's function changes: n1 was checked under Murmur, so it is no longer pruned
        modulo = {**INDEX, "segmentPartitionConfig": {"columnPartitionMap": {
            "id": {"functionName": "Modulo", "numPartitions": 2}}}}
        store.metastore.set(store.paths.table(TABLE), orjson.dumps({
            **TABLE_DOC, "tableName": TABLE, "tableIndexConfig": modulo,
            "routing": {"segmentPrunerTypes": ["partition"]}}))
        wait_until(lambda: view.snapshot.tables[TABLE].partition_spec.function == "Modulo", 10)
        entry = view.snapshot.tables[TABLE]
        assert entry.partitions[n1] is None and entry.partitions[before] is None
        assert set(entry.pruning_facts) == {other}
    finally:
        view.stop()


def test_consuming_segments_are_not_known_when_the_stream_has_another_partition_count(store: ClusterStore) -> None:
    names = [segment_name(p, 0) for p in range(3)]  # 3 stream partitions, 2 declared
    for p, name in enumerate(names):
        consuming(store, name, parts(p) if p < 2 else None)
    store.put_external_view(ExternalView(TABLE, {n: {"A": CO} for n in names}))
    view = ClusterView(store, poll_seconds=600).start()
    try:
        entry = view.snapshot.tables[TABLE]
        assert entry.stream_partitions == 3 and dict(entry.partitions) == dict.fromkeys(names) \
            and entry.pruning_facts == {}
    finally:
        view.stop()
