"""The embedded store's change log: trimmed by age, and a poller that fell behind re-syncs its watches."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cuvee.metastore import open_metastore
from cuvee.metastore.sqlite_watch import ChangeFeed
from cuvee.spi.metastore import WatchEvent, WatchEventType
from tests.metastore.helpers import wait_until


def test_resync_tells_every_watch_to_reread() -> None:
    feed, seen = ChangeFeed(), []
    feed.subscribe("/present", seen.append, on_children=False, after_seq=0)
    feed.subscribe("/gone", seen.append, on_children=False, after_seq=0)
    feed.subscribe("/dir", seen.append, on_children=True, after_seq=0)
    feed.resync(lambda path: path == "/present")
    assert seen == [
        WatchEvent(WatchEventType.CHANGED, "/present"),
        WatchEvent(WatchEventType.DELETED, "/gone"),
        WatchEvent(WatchEventType.CHILDREN, "/dir"),
    ]


def test_deliver_skips_changes_older_than_the_watch() -> None:
    feed, seen = ChangeFeed(), []
    feed.subscribe("/n", seen.append, on_children=False, after_seq=5)
    feed.deliver([(5, "/n", "CREATED"), (6, "/n", "CHANGED"), (7, "/other", "CHANGED")])
    assert seen == [WatchEvent(WatchEventType.CHANGED, "/n")]


def test_old_changes_are_trimmed_and_a_lagging_poller_resyncs(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    uri = f"sqlite://{db}?session_timeout=1.5&heartbeat_interval=0.1&poll_interval=0.02&changelog_retention=0.3"
    with open_metastore(uri) as store:
        seen: list[WatchEvent] = []
        store.create("/n", b"0")
        store.watch("/n", seen.append)
        wait_until(lambda: _count_changes(db) == 0, message="the heartbeat thread trims changes past retention")
        # Pretend this client's poller fell behind the trim; the next change it reads reveals the gap.
        store._last_seq = 0  # type: ignore[attr-defined]
        store.create("/unrelated")
        wait_until(lambda: WatchEvent(WatchEventType.CHANGED, "/n") in seen, message=lambda: f"resync: {seen}")
        assert seen == [WatchEvent(WatchEventType.CHANGED, "/n")]


def _count_changes(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM changes").fetchone()[0])
    finally:
        conn.close()
