"""Broker start/stop: a live node left by a previous session is replaced, the server connection pool is closed by
stop() (HTTP drained, no pool left open), and stop() waits for the routing thread only ``stop_timeout_seconds``."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from cuvee.broker.broker import Broker
from cuvee.broker.cluster_view import ClusterView
from cuvee.broker.config import BrokerConfig
from cuvee.cluster.records import InstanceInfo, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.metastore import open_metastore
from cuvee.node.liveness import InstanceIdTaken
from tests.broker.helpers import (
    CLUSTER,
    FAST_META,
    TABLE,
    committed,
    event_rows,
    register_server,
    segment_name,
    start_query_server,
    wait_until,
    write_table,
    write_view,
)
from tests.metastore.helpers import hold_live_node


def test_a_broker_killed_and_restarted_at_once_takes_its_place_and_a_live_twin_is_refused(tmp_path: Path) -> None:
    """The id's live node held by a process that is then SIGKILLed (a supervisor restarting the broker at once):
    the new broker waits for that session to expire and goes live; while the holder lives, a broker with its id
    is refused."""
    uri = f"sqlite://{tmp_path / 'meta.db'}?session_timeout=1&heartbeat_interval=0.1&poll_interval=0.02"
    live = ClusterStore(open_metastore(uri), CLUSTER)
    holder = hold_live_node(uri, live.paths.live("Broker_fixed"))
    try:
        with pytest.raises(InstanceIdTaken, match="Broker_fixed is live in another process"):
            Broker(BrokerConfig(cluster=CLUSTER, metadata=uri, instance_id="Broker_fixed")).start()
        held = live.metastore.exists(live.paths.live("Broker_fixed"))
        assert held is not None and held.data != b""  # the live twin's node is untouched ...
        assert live.find(InstanceInfo, live.paths.instance("Broker_fixed")) is None  # ... and its record too
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        broker = Broker(BrokerConfig(cluster=CLUSTER, metadata=uri, instance_id="Broker_fixed")).start()
        try:
            assert "Broker_fixed" in live.live_instance_ids()
            node = live.metastore.get(live.paths.live("Broker_fixed"))
            assert node.data.decode() == broker.metastore.session_id  # type: ignore[union-attr]
        finally:
            broker.stop()
    finally:
        if holder.poll() is None:
            holder.kill()
        live.metastore.close()


def test_stop_closes_the_server_pool_and_opens_none_after(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}"
    meta = open_metastore(uri)
    store = ClusterStore(meta, CLUSTER)
    server = start_query_server("Server_A")
    broker = None
    try:
        write_table(store)
        server.registry.put(TABLE, committed(tmp_path / "a", segment_name(0, 0), event_rows(20, 0, 1)))
        register_server(meta, store, server)
        write_view(store, {segment_name(0, 0): {"Server_A": SegmentState.ONLINE}})
        broker = Broker(BrokerConfig(cluster=CLUSTER, metadata=uri, stop_timeout_seconds=3.0)).start()
        url = broker.url + "/query/sql"
        answer = wait_until(lambda: (r := httpx.post(url, json={"sql": "SELECT COUNT(*) FROM events"},
                                                     timeout=10).json())["exceptions"] == [] and r,
                            message="the broker answers from Server_A")
        assert answer["resultTable"]["rows"] == [[20]]
        handler = broker.handler
        assert handler.pool_open and handler.pools_opened == 1
        broker.stop()
        assert not handler.pool_open and handler.pools_opened == 1
        assert broker.view is not None and broker.view.stop_timeout_seconds == 3.0
    finally:
        if broker is not None:
            broker.stop()
        server.http.stop()
        meta.close()


def test_view_stop_waits_for_a_stuck_refresh_only_stop_timeout_seconds(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    meta = open_metastore(f"sqlite://{tmp_path / 'meta.db'}?{FAST_META}")
    view = ClusterView(ClusterStore(meta, CLUSTER), poll_seconds=60.0, stop_timeout_seconds=0.05).start()
    entered, release = threading.Event(), threading.Event()

    def stuck_refresh() -> None:  # a metadata-store call that does not return
        entered.set()
        release.wait(30)

    monkeypatch.setattr(view, "refresh", stuck_refresh)
    try:
        view._dirty.set()
        assert entered.wait(10)
        view.stop()  # returns after 0.05 s although the refresher is still stuck
        assert view._thread is not None and view._thread.is_alive()
    finally:
        release.set()
        if view._thread is not None:
            view._thread.join(10)
        meta.close()


def test_stop_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stop_timeout_seconds"):
        BrokerConfig(metadata="sqlite:///x", stop_timeout_seconds=0)
