"""Realtime table creation against the sqlite metastore and a real embedded-log topic (no servers needed)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from cuvee.cluster.records import InstanceInfo, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller import Controller
from cuvee.protocol.segment_name import LLCSegmentName
from tests.controller.test_controller_support import (
    post,
    produce,
    register_servers,
    schema_doc,
    table_doc,
)

T = "events_REALTIME"


def _create(leader: Controller, log_dir: Path, **kwargs: object) -> None:
    post(leader.url, "/schemas", schema_doc())
    response = post(leader.url, "/tables", table_doc(log_dir, **kwargs))  # type: ignore[arg-type]
    assert response.status_code == 200, response.text


def test_one_consuming_segment_per_partition_spread_over_tagged_servers(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    servers = register_servers(side_store, 3)
    side_store.register_instance(InstanceInfo("Other_0", "h", {}, ("Other_REALTIME",)))
    side_store.metastore.create(side_store.paths.live("Other_0"), b"", ephemeral=True)
    produce(log_dir, {0: 5, 1: 3})
    _create(leader, log_dir, replicas=2, rows=1000, reset="smallest")

    ideal = side_store.ideal_state(T)
    assert ideal is not None
    names = sorted(ideal.record.segments, key=lambda n: LLCSegmentName.parse(n).partition)
    parsed = [LLCSegmentName.parse(n) for n in names]
    assert [(p.table, p.partition, p.sequence) for p in parsed] == [("events", p, 0) for p in range(4)]
    load: Counter[str] = Counter()
    for name in names:
        replicas = ideal.record.segments[name]
        assert len(replicas) == 2 and set(replicas.values()) == {SegmentState.CONSUMING}
        assert set(replicas) <= set(servers)  # never the Other tenant's server
        load.update(list(replicas))
    assert sorted(load.values()) == [2, 3, 3]  # 8 replicas sprayed over 3 servers
    for name in names:
        record = side_store.segment(T, name).record
        assert record.status is SegmentStatus.IN_PROGRESS
        assert record.start_offset == 0  # smallest
        assert record.row_threshold == 1000 // 3  # flush rows / consuming segments on the busiest server


def test_largest_starts_at_the_end_of_each_partition(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    register_servers(side_store, 1)
    produce(log_dir, {0: 5, 1: 3, 3: 1})
    _create(leader, log_dir, replicas=1, reset="largest")
    starts = {
        side_store.segment(T, n).record.partition: side_store.segment(T, n).record.start_offset
        for n in side_store.segment_names(T)
    }
    assert starts == {0: 5, 1: 3, 2: 0, 3: 1}


def test_auto_tuned_table_starts_at_the_initial_rows(
    leader: Controller, side_store: ClusterStore, log_dir: Path
) -> None:
    register_servers(side_store, 2)
    _create(leader, log_dir, replicas=1, rows=0, **{"realtime.segment.flush.autotune.initialRows": "1234"})
    thresholds = {side_store.segment(T, n).record.row_threshold for n in side_store.segment_names(T)}
    assert thresholds == {1234}
