"""Persistent data and children watches: events arrive, keep arriving, and stop when cancelled."""

from __future__ import annotations

import threading

import pytest

from cuvee.spi.metastore import NoNodeError, WatchEvent, WatchEventType
from tests.metastore.conftest import Backend
from tests.metastore.helpers import wait_until

CREATED, CHANGED, DELETED, CHILDREN = (
    WatchEventType.CREATED,
    WatchEventType.CHANGED,
    WatchEventType.DELETED,
    WatchEventType.CHILDREN,
)


class Recorder:
    """Collects events from a watch callback (which runs on a background thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[WatchEvent] = []

    def __call__(self, event: WatchEvent) -> None:
        with self._lock:
            self.events.append(event)

    def types(self) -> list[WatchEventType]:
        with self._lock:
            return [e.type for e in self.events]

    def wait_for(self, event_type: WatchEventType, count: int = 1) -> None:
        wait_until(
            lambda: self.types().count(event_type) >= count,
            message=lambda: f"{count} x {event_type.value}, got {self.types()}",
        )


def test_data_watch_sees_create_change_delete_from_another_client(backend: Backend) -> None:
    watcher, writer = backend.open(), backend.open()
    recorder = Recorder()
    watcher.watch("/idealstate/t1", recorder)
    writer.create("/idealstate/t1", b"{}")
    recorder.wait_for(CREATED)
    writer.set("/idealstate/t1", b'{"s": 1}')
    recorder.wait_for(CHANGED)
    writer.set("/idealstate/t1", b'{"s": 2}')
    recorder.wait_for(CHANGED, 2)
    writer.delete("/idealstate/t1")
    recorder.wait_for(DELETED)
    writer.create("/idealstate/t1", b"again")  # persistent: it outlives a delete
    recorder.wait_for(CREATED, 2)
    assert {e.path for e in recorder.events} == {"/idealstate/t1"}
    assert recorder.types()[:2] == [CREATED, CHANGED]


def test_data_watch_ignores_other_paths_and_children(backend: Backend) -> None:
    store = backend.open()
    store.create("/w/node", b"")
    node_events, sibling_events = Recorder(), Recorder()
    store.watch("/w/node", node_events)
    store.watch("/w/sibling", sibling_events)
    store.create("/w/node/child")
    store.create("/w/other")
    store.set("/w/node", b"x")
    node_events.wait_for(CHANGED)
    assert node_events.types() == [CHANGED]
    assert sibling_events.types() == []


def test_cancelled_watch_stops_firing(backend: Backend) -> None:
    store = backend.open()
    store.create("/c", b"0")
    cancelled, kept = Recorder(), Recorder()
    subscription = store.watch("/c", cancelled)
    store.watch("/c", kept)
    subscription.cancel()
    store.set("/c", b"1")
    kept.wait_for(CHANGED, 1)
    store.set("/c", b"2")
    kept.wait_for(CHANGED, 2)  # the cancelled watch would have seen "1" by now
    assert cancelled.types() == []


def test_children_watch_sees_joins_and_leaves(backend: Backend) -> None:
    watcher, member = backend.open(), backend.open()
    watcher.create("/live")
    recorder = Recorder()
    watcher.watch_children("/live", recorder)
    member.create("/live/server-1", ephemeral=True)
    recorder.wait_for(CHILDREN, 1)
    assert watcher.children("/live") == ["server-1"]
    member.set("/live/server-1", b"data changes are not membership changes")
    member.create("/live/server-2", ephemeral=True)
    recorder.wait_for(CHILDREN, 2)
    member.close()  # both ephemeral members leave
    wait_until(lambda: watcher.children("/live") == [], message="members gone")
    recorder.wait_for(CHILDREN, 3)
    assert {e.path for e in recorder.events} == {"/live"}


def test_children_watch_needs_an_existing_node(backend: Backend) -> None:
    store = backend.open()
    with pytest.raises(NoNodeError):
        store.watch_children("/not/there", Recorder())


def test_a_failing_callback_does_not_stop_other_watches(backend: Backend) -> None:
    store = backend.open()
    store.create("/f", b"")

    def broken(_event: WatchEvent) -> None:
        raise RuntimeError("subscriber bug")

    store.watch("/f", broken)
    healthy = Recorder()
    store.watch("/f", healthy)
    store.set("/f", b"1")
    healthy.wait_for(CHANGED)
    store.set("/f", b"2")
    healthy.wait_for(CHANGED, 2)
