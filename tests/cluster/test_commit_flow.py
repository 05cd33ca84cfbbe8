"""Table creation and the three commit steps against a real (sqlite) store; every step re-run changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from cuvee.cluster.assignment import (
    complete_in_ideal_state,
    mark_done,
    next_segment_name,
    next_segment_record,
    plan_consuming_segments,
    rows_per_segment,
)
from cuvee.cluster.errors import RequirementFailedError
from cuvee.cluster.records import SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore

T = "events_REALTIME"
NOW = int(datetime(2026, 11, 21, 16, 47, tzinfo=UTC).timestamp() * 1000)
C, O = SegmentState.CONSUMING, SegmentState.ONLINE


def _create_table(cluster: ClusterStore) -> None:
    existing = cluster.ideal_state(T)
    plan = plan_consuming_segments(
        T, {p: 0 for p in range(4)}, 2, ["s0", "s1", "s2"], NOW,
        existing=existing.record if existing else None, flush_rows=300,
    )
    for record in plan.segments:  # metadata first: a server told to consume must find its start offset
        cluster.create_segment(T, record)
    cluster.update_ideal_state(T, lambda ideal: plan.ideal_state if not ideal.segments else ideal)


def _commit(cluster: ClusterStore, segment: str, end_offset: int, now_ms: int) -> str:
    step1 = mark_done(end_offset=end_offset, total_docs=end_offset, size_bytes=10, crc=1, download_uri="", now_ms=now_ms)
    done = cluster.update_segment(T, segment, step1).record
    ideal = cluster.ideal_state(T)
    assert ideal is not None
    name = next_segment_name(done, cluster.segment_names(T), now_ms)
    cluster.create_segment(T, next_segment_record(done, name, rows_per_segment(300, ideal.record), now_ms))
    cluster.update_ideal_state(T, complete_in_ideal_state(segment, name))
    return name


def _versions(cluster: ClusterStore) -> dict[str, int]:
    paths = [cluster.paths.ideal_state(T)] + [cluster.paths.segment(T, s) for s in cluster.segment_names(T)]
    return {p: cluster.metastore.get(p).version for p in paths}


def test_create_then_commit_then_rerun_everything(cluster: ClusterStore) -> None:
    _create_table(cluster)
    before = _versions(cluster)
    _create_table(cluster)
    assert _versions(cluster) == before

    first = "events__0__0__20261121T1647Z"
    assert cluster.segment(T, first).record.row_threshold == 100  # 300 rows / 3 consuming on the busiest server
    nxt = _commit(cluster, first, 120, NOW + 3_600_000)
    assert nxt == "events__0__1__20261121T1747Z"
    after = _versions(cluster)
    assert _commit(cluster, first, 120, NOW + 3_700_000) == nxt  # the whole commit re-run, a few minutes later
    assert _versions(cluster) == after

    ideal = cluster.ideal_state(T)
    assert ideal is not None
    assert ideal.record.segments[first] == {"s0": O, "s1": O}
    assert ideal.record.segments[nxt] == {"s0": C, "s1": C}
    new = cluster.segment(T, nxt).record
    assert (new.status, new.start_offset, new.sequence, new.row_threshold) == (SegmentStatus.IN_PROGRESS, 120, 1, 100)
    assert cluster.segment(T, first).record.status is SegmentStatus.DONE


def test_a_second_committer_with_another_end_offset_is_refused(cluster: ClusterStore) -> None:
    _create_table(cluster)
    first = "events__1__0__20261121T1647Z"
    _commit(cluster, first, 50, NOW + 60_000)
    with pytest.raises(RequirementFailedError, match="already DONE"):
        _commit(cluster, first, 70, NOW + 120_000)
    assert cluster.segment(T, first).record.end_offset == 50
