"""Routing an upsert table: a partition stays on the replica it was read from while the replicas report their
transitions one after the other, so a key shown once never vanishes from the next query.

The external views replayed here are those of a failure of ``test_counts_stay_exact_while_segments_commit``
under load: replica A served N committed later than B, and its N+1 waited for that (its upsert gate) before
reading a row. While only B listed N+1, B was read (every key shown); once A listed N+1 too, still empty, the
stable hash picked A, and the keys whose only version was in N+1 vanished until A caught up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.broker.cluster_view import ClusterView
from cuvee.broker.routing import RoutingTable, route
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from tests.broker.helpers import CLUSTER, FAST_META, segment_name, write_table

ON, CO, ERR = SegmentState.ONLINE, SegmentState.CONSUMING, SegmentState.ERROR
N, N1, N2 = (segment_name(0, i) for i in range(3))


def upsert_route(view: dict[str, dict[str, SegmentState]], available: frozenset[str], request: int,
                 sticky: dict[str, str] | None = None) -> RoutingTable:
    return route(view, available, request, hold_back=False, strict=True, upsert=True, sticky=sticky)


def replica_of(table: RoutingTable) -> str:
    (instance,) = table.servers  # one partition: one replica
    return instance


def lagging_and_ahead() -> tuple[str, str]:
    """Two instance names where the stable hash, choosing afresh between both, picks the first: the replica that
    reported N+1 last (so the test fails without the memory, whatever the hash)."""
    both = {N: {"X": ON, "Y": ON}, N1: {"X": CO, "Y": CO}}
    first = replica_of(upsert_route(both, frozenset({"X", "Y"}), 0))
    return first, "Y" if first == "X" else "X"


def test_a_partition_stays_on_the_replica_that_listed_the_new_segment_first() -> None:
    lagging, ahead = lagging_and_ahead()
    servers = frozenset({lagging, ahead})
    mid_commit = {N: {lagging: CO, ahead: ON}, N1: {ahead: CO}}  # the lagging one still commits N
    first = upsert_route(mid_commit, servers, 17)
    assert replica_of(first) == ahead and first.unavailable == ()
    both_listed = {N: {lagging: ON, ahead: ON}, N1: {lagging: CO, ahead: CO}}
    for request in range(18, 22):
        again = upsert_route(both_listed, servers, request, sticky=dict(first.replicas))
        assert replica_of(again) == ahead, "the partition moved to the replica whose N+1 had read nothing yet"
        assert set(again.servers[ahead]) == {N, N1} and again.replicas == first.replicas


def test_a_partition_of_committed_segments_is_not_rotated() -> None:
    """The external view lists N and N+1 ONLINE, not yet N+2: every routed segment is committed, but both servers
    read N+2 too (it is in their partition's view), each at its own point of the stream."""
    committed = {N: {"A": ON, "B": ON}, N1: {"A": ON, "B": ON}}
    assert len({replica_of(upsert_route(committed, frozenset({"A", "B"}), request)) for request in range(6)}) == 1


def test_a_partition_moves_only_when_its_replica_stops_serving_it() -> None:
    servers = frozenset({"A", "B"})
    view = {N: {"A": ON, "B": ON}, N1: {"A": CO, "B": CO}}
    (group,) = upsert_route(view, servers, 0).replicas
    on_a = {group: "A"}
    assert [replica_of(upsert_route(view, servers, r, sticky=on_a)) for r in range(4)] == ["A"] * 4
    assert replica_of(upsert_route(view, frozenset({"B"}), 0, sticky=on_a)) == "B"  # A is down
    broken = {N: {"A": ERR, "B": ON}, N1: {"A": CO, "B": CO}}  # A lost a committed segment
    assert replica_of(upsert_route(broken, servers, 0, sticky=on_a)) == "B"
    gone = {N: {"A": ON, "B": ON}, N1: {"B": ON}, N2: {"B": CO}}  # A dropped N+1 (a rebalance moved it)
    moved = upsert_route(gone, servers, 0, sticky=on_a)
    assert moved.servers == {"B": (N, N1, N2)} and moved.unavailable == () and moved.replicas == {group: "B"}
    failed = {N: {"A": ON, "B": ON}, N1: {"A": ON, "B": ON}, N2: {"A": ERR, "B": CO}}  # A's N+2 failed to start
    assert replica_of(upsert_route(failed, servers, 0, sticky=on_a)) == "B"


def test_a_partition_stays_while_only_its_newest_consuming_segment_is_not_listed_on_its_replica() -> None:
    """Stop 34's CI failure: the partition was read from A, whose server had already swapped N for its committed
    copy and read a key's only version into N+1, while the external view (which lags the servers) still listed N
    CONSUMING on A and N+1 only on B. Moving to B, whose N+1 had read nothing yet, made the key vanish for a query.
    A's report lags, not A: it stays, N+1 held back (A's server reads its unlisted consuming segments too)."""
    servers = frozenset({"A", "B"})
    on_a = {next(iter(upsert_route({N: {"A": CO, "B": CO}}, servers, 0).replicas)): "A"}
    for lagging_report in ({N: {"A": CO, "B": ON}, N1: {"B": CO}},
                           {N: {"A": ON, "B": ON}, N1: {"A": CO, "B": ON}, N2: {"B": CO}}):
        stayed = upsert_route(lagging_report, servers, 3, sticky=on_a)
        newest = max(lagging_report)
        assert replica_of(stayed) == "A" and stayed.replicas == on_a
        assert stayed.held_back == (newest,) and stayed.unavailable == ()
        assert newest not in stayed.servers["A"]
    assert replica_of(upsert_route({N: {"A": CO, "B": ON}, N1: {"B": CO}}, frozenset({"B"}), 0, sticky=on_a)) == "B"


def test_a_partition_waits_for_its_replica_to_list_the_newest_segment_only_for_a_grace_period() -> None:
    """A replica that still does not list the newest segment long after it was created is stuck (its transition
    queued behind downloads, a failing start), not late to report: the partition moves to the replica serving
    it, rather than hiding that segment's rows with no error."""
    from cuvee.broker.routing import UNLISTED_GRACE_MS
    from cuvee.protocol.segment_name import LLCSegmentName

    servers = frozenset({"A", "B"})
    on_a = {next(iter(upsert_route({N: {"A": CO, "B": CO}}, servers, 0).replicas)): "A"}
    lagging = {N: {"A": ON, "B": ON}, N1: {"B": CO}}
    created = LLCSegmentName.parse(N1).created_ms
    for now, replica in ((created + 1_000, "A"), (created + UNLISTED_GRACE_MS - 1, "A"),
                         (created + UNLISTED_GRACE_MS + 1, "B")):
        routed = route(lagging, servers, 5, hold_back=False, strict=True, upsert=True, sticky=on_a, now_ms=now)
        assert replica_of(routed) == replica, now - created
        assert routed.held_back == ((N1,) if replica == "A" else ())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ClusterStore]:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    try:
        yield ClusterStore(meta, CLUSTER)
    finally:
        meta.close()


def test_the_broker_keeps_a_partition_on_its_replica_across_view_refreshes(store: ClusterStore) -> None:
    """The same replay through the broker's cluster view, whose table entries are rebuilt at every refresh."""
    lagging, ahead = lagging_and_ahead()
    table = write_table(store, upsertConfig={"mode": "FULL"})
    servers = frozenset({lagging, ahead})
    view = ClusterView(store, poll_seconds=600)
    chosen = []
    for number, segments in enumerate([{N: {lagging: CO, ahead: ON}, N1: {ahead: CO}},
                                       {N: {lagging: ON, ahead: ON}, N1: {lagging: CO, ahead: CO}},
                                       {N: {lagging: ON, ahead: ON}, N1: {lagging: ON, ahead: ON}}]):
        store.put_external_view(ExternalView(table, segments))
        view.refresh()
        (target,) = view.targets(table)
        assert target.entry.upsert
        chosen.append(replica_of(target.entry.route(servers, number)))
    assert chosen == [ahead] * 3
