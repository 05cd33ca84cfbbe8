"""Each segment's story: every completion-protocol request and answer, commit, build, upload, download, transition
and repair action that any role took for it, in time order, kept in the metadata store (so it survives the
restart of the role that wrote it) and bounded (``MAX_EVENTS`` per segment, the oldest dropped first).

Writing is best effort: a story must never slow or fail the step it tells of, so events are written by a
thread of their own, and a write that fails is counted and logged, not raised. ``cuvee status --segment S`` prints one (``GET /segments/{t}/{s}/story``)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from cuvee.cluster.records import SegmentStory
from cuvee.cluster.store import ClusterStore

log = logging.getLogger(__name__)

MAX_EVENTS = 256
MAX_QUEUED = 10_000
_MAX_TEXT = 300


class StoryWriter:
    """``record(table, segment, kind, **details)`` on behalf of one role instance (``instance()`` is read at each
    event: a role learns its id after binding its port). Events are queued and written by one thread of the
    writer's own, so no step waits on the metadata store for its story; past ``MAX_QUEUED`` waiting events new
    ones are dropped and counted."""

    def __init__(self, store: Callable[[], ClusterStore | None], role: str, instance: Callable[[], str],
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        self._store = store
        self._role = role
        self._instance = instance
        self._clock_ms = clock_ms
        self._queue: queue.Queue[tuple[str, str, dict[str, Any]] | None] = queue.Queue(MAX_QUEUED)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.failures = 0
        self.dropped = 0

    def record(self, table: str, segment: str, kind: str, **details: Any) -> None:
        event = {"timeMs": self._clock_ms(), "role": self._role, "instance": self._instance(), "kind": kind,
                 **{k: _bounded(v) for k, v in details.items() if v is not None}}
        self._ensure_thread()
        try:
            self._queue.put_nowait((table, segment, event))
        except queue.Full:
            self.dropped += 1

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"story-{self._role}", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            table, segment, event = self._queue.get()  # type: ignore[misc]
            self._write(table, segment, event)

    def _write(self, table: str, segment: str, event: dict[str, Any]) -> None:
        store = self._store()
        if store is None:
            return
        try:
            store.update(SegmentStory, store.paths.story(table, segment),
                         lambda story: story.appended(event, MAX_EVENTS), initial=SegmentStory(table, segment))
        except Exception as exc:  # noqa: BLE001 - a story never fails the step it tells of
            self.failures += 1
            if self.failures <= 10 or self.failures % 1000 == 0:
                log.warning("could not add %s to the story of %s/%s (%d failures so far): %s", event["kind"], table,
                            segment, self.failures, exc)


def read_story(store: ClusterStore, table: str, segment: str) -> list[dict[str, Any]]:
    """The segment's events, oldest first (empty if it has none)."""
    found = store.find(SegmentStory, store.paths.story(table, segment))
    return sorted(found.record.events, key=lambda e: e.get("timeMs", 0)) if found is not None else []


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if isinstance(value, bool | int | float):
        return value
    return str(value)[:_MAX_TEXT]
