"""A partitioned table's consuming segment checks each row's partition against its stream partition: the first row
of another partition is reported (``report_mixed``) before it is readable, once; a report that fails stops the
replica with those rows unpublished (``cuvee.pruning.stream_partitions``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dataclasses
import time

import orjson
import pytest

from cuvee.cluster.records import SegmentRecord
from cuvee.config import TableConfig
from cuvee.protocol.completion import RequestKind, hold
from cuvee.segment.partitioning import SegmentPartitions
from cuvee.server.consuming import ConsumerState, SegmentCompletionClient
from cuvee.stream import open_producer
from tests.server.test_consuming_support import (FAST, TABLE, ScriptedController, event, make_replica, record,
                                                 serving, stream_configs, wait_until)


@pytest.fixture
def client() -> Iterator[SegmentCompletionClient]:
    with serving(ScriptedController(lambda request: hold(request.offset))) as service:
        made = SegmentCompletionClient(FAST, leader_url=service.url)
        yield made
        made.close()


def partitioned(log_dir: Path) -> TableConfig:
    return TableConfig.from_json({
        "tableName": TABLE, "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts"},
        "tableIndexConfig": {"streamConfigs": stream_configs(log_dir), "segmentPartitionConfig": {
            "columnPartitionMap": {"id": {"functionName": "Modulo", "numPartitions": 2}}}}})


def checked_record() -> SegmentRecord:
    """The segment's record as the controller writes it for this table: checked under Modulo/2, stream partition 0."""
    return dataclasses.replace(record(rows=100), partitions=SegmentPartitions("id", "Modulo", 2, (0,)))


def produce(log_dir: Path, ids: list[int]) -> None:
    with open_producer(stream_configs(log_dir)) as producer:  # all into stream partition 0, whatever the id
        for i in ids:
            producer.produce(orjson.dumps(event(i)), partition=0)
        producer.flush()


def test_the_first_row_of_another_partition_is_reported_once(tmp_path: Path, log_dir: Path, client, replicas) -> None:
    reports: list[tuple[str, int]] = []
    replica = make_replica(tmp_path, log_dir, checked_record(), instance="s1", client=client,
                           table_config=partitioned(log_dir), report_mixed=lambda s, p: reports.append((s, p)))
    replicas.append(replica)
    produce(log_dir, [0, 2, 4])
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 3)
    assert reports == []  # stream partition 0 holds partition 0's ids
    produce(log_dir, [6, 7, 9, 8])
    wait_until(lambda: replica.segment.num_docs == 7)
    assert reports == [(replica.segment.name, 1)]
    produce(log_dir, [11])
    wait_until(lambda: replica.segment.num_docs == 8)
    assert reports == [(replica.segment.name, 1)] and replica.segment.strays is not None


def test_a_report_that_fails_stops_the_replica_with_the_rows_unpublished(tmp_path: Path, log_dir: Path, client,
                                                                       replicas) -> None:
    def unreachable(segment: str, partition: int) -> None:
        raise ConnectionError("metadata store unreachable")

    replica = make_replica(tmp_path, log_dir, checked_record(), instance="s1", client=client,
                           table_config=partitioned(log_dir), report_mixed=unreachable)
    replicas.append(replica)
    produce(log_dir, [0, 2, 3])
    replica.segment.start()
    wait_until(lambda: replica.segment.state is ConsumerState.ERROR)
    assert replica.segment.num_docs == 0 and "checking rows" in replica.segment.info()["error"]


def test_an_unpartitioned_table_is_not_checked(tmp_path: Path, log_dir: Path, client, replicas) -> None:
    replica = make_replica(tmp_path, log_dir, record(rows=100), instance="s1", client=client,
                           report_mixed=lambda s, p: pytest.fail("reported"))
    replicas.append(replica)
    assert replica.segment.strays is None


def test_rows_are_checked_under_the_records_function_not_the_tables_config(tmp_path: Path, log_dir: Path, client,
                                                                            replicas) -> None:
    """A segment created before the table was partitioned has nothing recorded: nothing is checked (and no broker
    prunes it); one recorded under Modulo is checked under Modulo though the table says Murmur by then."""
    reports: list[tuple[str, int]] = []
    murmur = partitioned(log_dir).to_json()
    murmur["tableIndexConfig"]["segmentPartitionConfig"]["columnPartitionMap"]["id"]["functionName"] = "Murmur"
    unchecked = make_replica(tmp_path / "a", log_dir, record(rows=100), instance="s1", client=client,
                             table_config=partitioned(log_dir), report_mixed=lambda s, p: reports.append((s, p)))
    replicas.append(unchecked)
    assert unchecked.segment.strays is None
    checked = make_replica(tmp_path / "b", log_dir, checked_record(), instance="s2", client=client,
                           table_config=TableConfig.from_json(murmur), report_mixed=lambda s, p: reports.append((s, p)))
    replicas.append(checked)
    assert checked.segment.strays is not None and checked.segment.strays.spec.function == "Modulo"


def test_the_first_stray_batch_is_held_back_for_the_brokers_to_see_the_report(tmp_path: Path, log_dir: Path,
                                                                               client, replicas) -> None:
    """Between the report (the mixedpartitions node) and the brokers' view of it a query could still prune the
    segment: the batch holding the first row of another partition is published only ``stray_publish_grace_seconds``
    after the report."""
    grace = 0.3
    reported: list[float] = []
    published: list[tuple[float, int]] = []
    replica = make_replica(tmp_path, log_dir, checked_record(), instance="s1", client=client,
                           config=dataclasses.replace(FAST, stray_publish_grace_seconds=grace),
                           table_config=partitioned(log_dir),
                           report_mixed=lambda s, p: reported.append(time.monotonic()))
    replicas.append(replica)
    consumer = replica.segment._consumer
    follow = consumer.after_publish

    def stamped(docs: int) -> None:
        published.append((time.monotonic(), docs))
        if follow is not None:
            follow(docs)
    consumer.after_publish = stamped
    produce(log_dir, [0, 2, 4, 7])
    replica.segment.start()
    wait_until(lambda: replica.segment.num_docs == 4)
    assert len(reported) == 1
    first_with_stray = min(at for at, docs in published if docs == 4)
    assert first_with_stray - reported[0] >= grace


def test_the_grace_is_bounded() -> None:
    with pytest.raises(ValueError, match="stray_publish_grace_seconds"):
        dataclasses.replace(FAST, stray_publish_grace_seconds=3600)
    with pytest.raises(ValueError, match="stray_publish_grace_seconds"):
        dataclasses.replace(FAST, stray_publish_grace_seconds=-1)
