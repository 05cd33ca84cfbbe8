"""A server whose metadata-store session expires (LOST) keeps serving what it holds, then opens a new session:
registered and live again, its current states rewritten, its segments ONLINE in the external view, ingestion going
on. Consuming segments are not restarted: they talk to the controller over HTTP, and find it through the holder.

The follower's periodic re-read is set far away, so the ideal-state watch moved to the new session does the work.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.cluster.store import ClusterStore
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.controller.test_session_lost import (
    TABLE,
    THRESHOLD,
    count,
    expire_session,
    is_live,
    lost_cluster,
    online_in_view,
    produce,
    wait_renewed,
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[InProcessCluster, ClusterStore]]:
    with lost_cluster(tmp_path, server={"ideal_state_poll_seconds": 60}) as running:
        yield running


def test_server_is_live_again_after_its_session_expires(cluster: tuple[InProcessCluster, ClusterStore]) -> None:
    running, observer = cluster
    server = running.servers[0]
    url = server.url
    produce(running, 0, THRESHOLD + 20)
    wait_until(lambda: online_in_view(observer, server.instance_id), 30, message="no segment ONLINE before the outage")
    wait_until(lambda: count(running) == THRESHOLD + 20, 30, message="rows never served before the outage")
    committed = online_in_view(observer, server.instance_id)

    def held_rows() -> int:
        return sum(segment.num_docs for segment in server.registry.segments(TABLE))

    expire_session(server.metastore, observer, server.instance_id)  # type: ignore[arg-type]
    assert held_rows() == THRESHOLD + 20  # it kept serving what it holds (the broker just does not route here)

    wait_renewed(server.metastore, observer, server.instance_id)  # type: ignore[arg-type]
    assert server.url == url and server.is_serving
    wait_until(lambda: set(committed) <= set(online_in_view(observer, server.instance_id)), 20,
               message=lambda: f"external view {observer.external_view(TABLE)}")

    # Ingestion goes on: the consuming segment commits and its successor is taken up from the new ideal state.
    produce(running, THRESHOLD + 20, 2 * THRESHOLD + 50)
    wait_until(lambda: len(running.committed_segments(TABLE)) == 2, 30, message="no commit after the renewal")
    wait_until(lambda: count(running) == 2 * THRESHOLD + 50, 30, message=lambda: f"served {count(running)} rows")
    wait_until(lambda: len(online_in_view(observer, server.instance_id)) == 2, 20,
               message=lambda: f"external view {observer.external_view(TABLE)}")
    running.check_invariants(TABLE, replicas=1)
