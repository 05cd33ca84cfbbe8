"""The broker's cluster view of a hybrid table on a real (sqlite) metadata store, with polling effectively off: the
raw name resolves to one table, lineage, overrides and new offline segments reach the view through watches, and a
refresh reads the metadata of new segments only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from cuvee.broker.cluster_view import ClusterView
from cuvee.cluster.records import (ExternalView, IdealState, SegmentRecord, SegmentState, SegmentStatus,
                                  TimeBoundaryOverride)
from cuvee.cluster.store import ClusterStore
from cuvee.cluster.time_boundary import DAY_MS
from cuvee.lineage.model import LineageEntry, LineageState
from cuvee.metastore import open_metastore
from cuvee.protocol.query import TimeFilter
from tests.broker.helpers import CLUSTER, FAST_META, SCHEMA_DOC, TABLE_DOC, segment_name, wait_until, write_table

ON, CO = SegmentState.ONLINE, SegmentState.CONSUMING
OFFLINE_DOC = {"tableName": "h_OFFLINE", "tableType": "OFFLINE",
               "segmentsConfig": {"timeColumnName": "ts", "replication": "1"}}


@pytest.fixture
def view(tmp_path: Path) -> Iterator[tuple[ClusterStore, ClusterView]]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    store = ClusterStore(meta, CLUSTER)
    write_table(store, "h")
    store.put_external_view(ExternalView("h_REALTIME", {segment_name(0, 0, "h"): {"A": CO}}))
    view = ClusterView(store, poll_seconds=600).start()
    try:
        yield store, view
    finally:
        view.stop()
        meta.close()


def add_offline(store: ClusterStore, end_times: dict[str, int], *, served: bool = True, crc: int = 1,
                pushed_at_ms: int = 1) -> None:
    """What a push does (records, then the ideal state) and, when ``served``, what server A's load then shows."""
    for name, end in end_times.items():
        store.put(store.paths.segment("h_OFFLINE", name), SegmentRecord(
            name, SegmentStatus.UPLOADED, 1, time_min=0, time_max=end, crc=crc, commit_time_ms=pushed_at_ms))
    store.update_ideal_state("h_OFFLINE", lambda ideal: IdealState(
        "h_OFFLINE", {**ideal.segments, **{n: {"A": ON} for n in end_times}}).with_crcs(
        {**ideal.crcs, **{n: crc for n in end_times}}))
    if served:
        old = store.external_view("h_OFFLINE") or ExternalView("h_OFFLINE")
        store.put_external_view(ExternalView("h_OFFLINE", {**old.segments, **{n: {"A": ON} for n in end_times}}))


def filters(view: ClusterView) -> list[tuple[str, TimeFilter | None]]:
    return [(t.entry.name, t.time_filter) for t in view.targets("h")]


def test_hybrid_view_follows_watches(view: tuple[ClusterStore, ClusterView]) -> None:
    store, v = view
    assert v.resolve("h").name == "h_REALTIME"  # not hybrid yet
    store.metastore.create(store.paths.table("h_OFFLINE"), orjson.dumps(OFFLINE_DOC))
    wait_until(lambda: v.resolve("h").name == "h", 5)  # one table to the planner, named by its raw name
    assert v.resolve("h_OFFLINE").name == "h_OFFLINE" and v.resolve("h_REALTIME").name == "h_REALTIME"
    assert filters(v) == [("h_REALTIME", None)]  # no served offline segment yet

    add_offline(store, {"h_0": 3 * DAY_MS, "h_1": 5 * DAY_MS})
    boundary = 4 * DAY_MS
    wait_until(lambda: filters(v) == [("h_OFFLINE", TimeFilter("ts", "<=", boundary)),
                                      ("h_REALTIME", TimeFilter("ts", ">", boundary))], 5)
    assert [t.time_filter for t in v.targets("h_OFFLINE")] == [None]

    store.put(store.paths.time_boundary("h"), TimeBoundaryOverride("h", 7))
    wait_until(lambda: filters(v)[0][1] == TimeFilter("ts", "<=", 7), 5)
    store.metastore.delete(store.paths.time_boundary("h"))
    wait_until(lambda: filters(v)[0][1] == TimeFilter("ts", "<=", boundary), 5)

    store.update_lineage("h_OFFLINE", lambda lin: lin.with_entry(
        "e", LineageEntry(("h_1",), (), LineageState.COMPLETED, 1)))
    wait_until(lambda: v.table("h_OFFLINE").hidden == {"h_1"}, 5)
    assert filters(v)[0][1] == TimeFilter("ts", "<=", 2 * DAY_MS)  # a replaced segment's end time no longer counts


def test_a_refresh_reads_only_new_segments_metadata(view: tuple[ClusterStore, ClusterView],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store, v = view
    store.metastore.create(store.paths.table("h_OFFLINE"), orjson.dumps(OFFLINE_DOC))
    add_offline(store, {f"h_{i}": i * DAY_MS for i in range(5)})
    wait_until(lambda: len(v.targets("h")) == 2, 5)
    read: list[str] = []
    find = store.find_segment
    monkeypatch.setattr(store, "find_segment", lambda table, segment: read.append(segment) or find(table, segment))
    add_offline(store, {"h_9": 9 * DAY_MS})
    wait_until(lambda: filters(v)[0][1] == TimeFilter("ts", "<=", 8 * DAY_MS), 5)
    v.refresh()
    assert read == ["h_9"]
    read.clear()
    v.refresh()
    assert read == []  # cached by name and CRC
    add_offline(store, {"h_9": 20 * DAY_MS}, crc=2)  # pushed again under its name, other content: read again
    wait_until(lambda: filters(v)[0][1] == TimeFilter("ts", "<=", 19 * DAY_MS), 5)


def test_boundary_comes_from_the_ideal_state_and_unserved_segments_are_unavailable(
        view: tuple[ClusterStore, ClusterView]) -> None:
    store, v = view
    store.metastore.create(store.paths.table("h_OFFLINE"), orjson.dumps(OFFLINE_DOC))
    add_offline(store, {"h_0": 3 * DAY_MS, "h_1": 5 * DAY_MS})
    wait_until(lambda: filters(v)[0][1] == TimeFilter("ts", "<=", 4 * DAY_MS), 5)
    assert v.table("h_OFFLINE").route(frozenset({"A"})).unavailable == ()

    store.put_external_view(ExternalView("h_OFFLINE"))  # every offline server died: the view lists nothing
    wait_until(lambda: v.table("h_OFFLINE").view.segments == {}, 5)
    assert filters(v)[0][1] == TimeFilter("ts", "<=", 4 * DAY_MS)  # the boundary stays: no silent realtime-only
    assert v.table("h_OFFLINE").route(frozenset({"A"})).unavailable == ("h_0", "h_1")  # reported, 305

    now = int(time.time() * 1000)
    add_offline(store, {"h_2": 9 * DAY_MS}, served=False, pushed_at_ms=now)  # just pushed, still loading
    wait_until(lambda: "h_2" in v.table("h_OFFLINE").end_times, 5)
    assert filters(v)[0][1] == TimeFilter("ts", "<=", 4 * DAY_MS)  # not counted within the grace period
    assert "h_2" not in v.table("h_OFFLINE").route(frozenset({"A"})).unavailable
    v.new_segment_grace_ms = 0  # the grace period is over
    v.refresh()
    assert filters(v)[0][1] == TimeFilter("ts", "<=", 8 * DAY_MS)
    assert "h_2" in v.table("h_OFFLINE").route(frozenset({"A"})).unavailable


def test_an_override_on_a_time_column_no_boundary_can_split_is_not_applied(tmp_path: Path) -> None:
    """An override stored before the controller refused it (a zoned date pattern: servers could not compare its
    strings with a number) leaves the table served by its realtime half, as without one, not failing every query."""
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    store = ClusterStore(meta, CLUSTER)
    zoned = {"name": "ts", "dataType": "STRING", "format": "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss Z",
             "granularity": "1:SECONDS"}
    store.metastore.create(store.paths.schema("h"), orjson.dumps({**SCHEMA_DOC, "schemaName": "h",
                                                                   "dateTimeFieldSpecs": [zoned]}))
    store.metastore.create(store.paths.table("h_REALTIME"), orjson.dumps({**TABLE_DOC, "tableName": "h_REALTIME"}))
    store.metastore.create(store.paths.table("h_OFFLINE"), orjson.dumps(OFFLINE_DOC))
    store.put_external_view(ExternalView("h_REALTIME", {segment_name(0, 0, "h"): {"A": CO}}))
    store.put(store.paths.time_boundary("h"), TimeBoundaryOverride("h", 7))
    add_offline(store, {"h_0": 3 * DAY_MS})
    view = ClusterView(store, poll_seconds=600).start()
    try:
        wait_until(lambda: view.resolve("h").name == "h", 5)
        assert filters(view) == [("h_REALTIME", None)]
    finally:
        view.stop()
        meta.close()
