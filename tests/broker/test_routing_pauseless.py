"""Routing a pauseless table (``hold_back=False``): mid-commit a partition has two CONSUMING segments with disjoint
offset ranges, and both are read; and the broker picks that rule from the table's config."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.broker import handler as handler_module
from cuvee.broker.cluster_view import ClusterSnapshot, ClusterView, TableEntry, table_info
from cuvee.broker.config import BrokerConfig
from cuvee.broker.handler import QueryHandler
from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.routing import RoutingTable, route
from cuvee.broker.scatter import ServerCall, ServerReply
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.protocol.query import ServerQueryStats
from cuvee.query import TableInfo
from tests.broker.helpers import CLUSTER, FAST_META, SCHEMA_DOC, TABLE, TABLE_DOC, schema, segment_name, write_view

ON, CO, OFF, ERR = SegmentState.ONLINE, SegmentState.CONSUMING, SegmentState.OFFLINE, SegmentState.ERROR
ALL = frozenset({"A", "B", "C"})
N, N1, N2 = (segment_name(0, s) for s in (4, 5, 6))


def routed(table: RoutingTable) -> dict[str, str]:
    return {seg: inst for inst, segs in table.servers.items() for seg in segs}


def pauseless(view: dict[str, dict[str, SegmentState]], available: frozenset[str] = ALL,
              request: int = 0) -> RoutingTable:
    return route(view, available, request, hold_back=False)


# ---- the pure rule ------------------------------------------------------------------------------------------


def test_both_consuming_segments_of_a_committing_partition_are_read() -> None:
    """N committing (consumption stopped at its end) and N+1 consuming: both routed, each from one stable replica."""
    view = {segment_name(0, 3): {"A": ON, "B": ON}, N: {"A": CO, "B": CO}, N1: {"A": CO, "B": CO}}
    tables = [pauseless(view, request=r) for r in range(4)]
    assert set(routed(tables[0])) == {segment_name(0, 3), N, N1}
    assert tables[0].consuming == {N, N1}
    assert tables[0].held_back == () and tables[0].unavailable == ()
    assert all(routed(t)[N] == routed(tables[0])[N] and routed(t)[N1] == routed(tables[0])[N1] for t in tables)
    assert route(view, ALL, 0).held_back == (N1,), "hold_back=True (the default) still holds N+1 back"


def test_online_replicas_are_preferred() -> None:
    """N ONLINE on A (its commit ended there) and still CONSUMING on B: N is read from A, not as consuming."""
    view = {N: {"A": ON, "B": CO}, N1: {"A": CO, "B": CO}}
    for request in range(4):
        table = pauseless(view, request=request)
        assert routed(table)[N] == "A"
        assert table.consuming == {N1}


def test_a_later_segment_without_replicas_is_held_back_not_unavailable() -> None:
    """N+1 whose consumers are not up yet (ERROR, OFFLINE, or on a server that is gone) is no 305 error."""
    for n1_replicas, available in (({"A": ERR}, ALL), ({"B": OFF}, ALL), ({"C": CO}, frozenset({"A", "B"}))):
        table = pauseless({N: {"A": CO, "B": CO}, N1: n1_replicas}, available)
        assert set(routed(table)) == {N}
        assert table.held_back == (N1,)
        assert table.unavailable == ()


def test_the_first_segment_without_replicas_is_unavailable_and_the_next_one_still_read() -> None:
    view = {N: {"A": ERR}, N1: {"B": CO}, N2: {"A": OFF}}
    table = pauseless(view)
    assert table.unavailable == (N,)
    assert routed(table) == {N1: "B"} and table.consuming == {N1}
    assert table.held_back == (N2,)


def test_partitions_are_independent() -> None:
    p0, p1 = [segment_name(0, s) for s in range(2)], [segment_name(1, s) for s in range(2)]
    view = {p0[0]: {"A": CO}, p0[1]: {"A": CO}, p1[0]: {"B": ERR}, p1[1]: {"B": CO}}
    table = pauseless(view)
    assert table.consuming == {p0[0], p0[1], p1[1]}
    assert table.unavailable == (p1[0],)


STATES = st.sampled_from([ON, CO, OFF, ERR])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["A", "B", "C"]), STATES, max_size=3), min_size=1, max_size=6),
       st.frozensets(st.sampled_from(["A", "B", "C"])), st.integers(0, 50))
def test_invariants_for_any_view_of_one_partition(replicas, available, request) -> None:  # noqa: ANN001
    names = [segment_name(0, i) for i in range(len(replicas))]
    view = dict(zip(names, replicas))
    table = pauseless(view, available, request)
    chosen = routed(table)

    def serving(name: str, state: SegmentState) -> set[str]:
        return {i for i, s in view[name].items() if s is state and i in available}

    stopped = False  # an earlier consuming segment had no replica holding its successor
    for k, name in enumerate(names):
        online, consuming = serving(name, ON), serving(name, CO)
        if online:  # ONLINE preferred
            assert chosen[name] in online and name not in table.consuming
        elif consuming and not stopped:  # read, from a replica that holds its successor if any server does
            assert chosen[name] in consuming and name in table.consuming
            if k + 1 < len(names):
                holders = serving(names[k + 1], CO) | serving(names[k + 1], ON)
                if consuming & holders:
                    assert chosen[name] in holders  # capped there: never a row the successor holds too
                elif holders:
                    stopped = True
        elif consuming:
            assert name in table.held_back
        else:
            assert name not in chosen
    not_online = [n for n in names if not serving(n, ON)]
    assert set(table.unavailable) <= set(not_online[:1])
    assert set(table.held_back) <= set(not_online[1:])
    accounted = list(chosen) + list(table.unavailable) + list(table.held_back)
    assert sorted(accounted) == sorted(names)


# ---- the broker takes the rule from the table's config ---------------------------------------------------------


def table_doc(enabled: bool) -> bytes:
    return orjson.dumps({**TABLE_DOC, "ingestionConfig": {
        "streamIngestionConfig": {"pauselessConsumptionEnabled": enabled}}})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    yield ClusterStore(meta, CLUSTER)
    meta.close()


def test_the_cluster_view_reads_the_flag_and_follows_a_config_change(store: ClusterStore) -> None:
    store.metastore.create(store.paths.schema("events"), orjson.dumps(SCHEMA_DOC))
    store.metastore.create(store.paths.table(TABLE), table_doc(True))
    write_view(store, {N: {"A": CO}, N1: {"A": CO}})
    view = ClusterView(store, poll_seconds=60)
    entry = view.refresh().tables[TABLE]
    assert entry.pauseless and not entry.hold_back
    assert entry.route(frozenset({"A"})).consuming == {N, N1}

    store.metastore.set(store.paths.table(TABLE), table_doc(False))
    entry = view.refresh().tables[TABLE]
    assert not entry.pauseless
    table = entry.route(frozenset({"A"}))
    assert table.consuming == {N} and table.held_back == (N1,)


class OneTableView:
    """The handler's view of ``events``: N and N+1 CONSUMING on Server_A."""

    def __init__(self, pauseless: bool):
        self.entry = TableEntry(TABLE, table_info(TABLE, schema()), schema().arrow_schema(),
                                ExternalView(TABLE, {N: {"Server_A": CO}, N1: {"Server_A": CO}}), pauseless=pauseless)
        self.snapshot = ClusterSnapshot({TABLE: self.entry}, {"Server_A": "http://127.0.0.1:9"})

    def resolve(self, name: str) -> TableInfo | None:
        return self.entry.info if name.lower() in ("events", TABLE.lower()) else None

    def table(self, name: str) -> TableEntry | None:
        return self.entry if name == TABLE else None

    def targets(self, name: str) -> list[QueryTarget]:
        return [QueryTarget(self.entry)] if name == TABLE else []


@pytest.mark.parametrize("pauseless_table, asked", [(True, (N, N1)), (False, (N,))], ids=["pauseless", "default"])
def test_the_query_handler_routes_by_the_tables_rule(monkeypatch: pytest.MonkeyPatch, pauseless_table: bool,
                                                     asked: tuple[str, ...]) -> None:
    calls: list[ServerCall] = []

    async def fake_scatter(client: object, sent: list[ServerCall], wait: float, **_: object) -> list[ServerReply]:
        calls.extend(sent)
        return [ServerReply(c.instance, None, ServerQueryStats(numSegmentsQueried=len(c.request.segments)))
                for c in sent]

    monkeypatch.setattr(handler_module, "scatter", fake_scatter)
    view = OneTableView(pauseless_table)
    handler = QueryHandler(BrokerConfig(metadata="sqlite:///unused"), view)  # type: ignore[arg-type]
    answer = asyncio.run(handler.handle("SELECT COUNT(*) FROM events"))
    handler.close()
    assert [c.instance for c in calls] == ["Server_A"]
    assert tuple(calls[0].request.segments) == asked
    assert answer["exceptions"] == []
