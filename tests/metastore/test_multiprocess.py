"""Several processes on one store: compare-and-set has exactly one winner, a killed holder's ephemeral node
expires, and one process's writes are seen (and watched) by another."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter

import pytest

from cuvee.spi.metastore import WatchEvent, WatchEventType
from tests.metastore.conftest import Backend
from tests.metastore.helpers import spawn, wait_until

pytestmark = pytest.mark.multiprocess

SESSION_TIMEOUT = 1.5


def results(process: subprocess.Popen[str], timeout: float = 60.0) -> list[dict[str, object]]:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"child failed ({process.returncode}):\n{err}"
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_concurrent_compare_and_set_has_one_winner_per_round(backend: Backend) -> None:
    processes, rounds = 4, 5
    store = backend.open()
    store.create("/contended", b"start")
    store.create("/barrier")
    args = [backend.uri(), "/contended", str(rounds)]
    children = [spawn("cas", *args, str(i), str(processes)) for i in range(processes)]
    outcomes = [outcome for child in children for outcome in results(child)]
    assert len(outcomes) == processes * rounds
    winners = Counter(o["round"] for o in outcomes if o["won"])
    assert winners == {r: 1 for r in range(rounds)}, f"winners per round: {winners}"
    assert sum(not o["won"] for o in outcomes) == (processes - 1) * rounds
    final = store.get("/contended")
    assert final.version == rounds
    last_winner = next(o["process"] for o in outcomes if o["won"] and o["round"] == rounds - 1)
    assert final.data == f"round {rounds - 1} won by {last_winner}".encode()


def test_ephemeral_node_of_a_killed_process_expires(backend: Backend) -> None:
    observer = backend.open()
    holder = spawn("hold-ephemeral", backend.uri(session_timeout=SESSION_TIMEOUT), "/live/doomed")
    try:
        assert holder.stdout is not None
        ready = json.loads(holder.stdout.readline() or "{}")
        assert ready.get("ready"), holder.stderr.read() if holder.stderr else ""
        assert observer.get("/live/doomed").ephemeral
        os.kill(holder.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        holder.wait(10)
        wait_until(lambda: observer.exists("/live/doomed") is None, SESSION_TIMEOUT + 5, message="expiry")
        elapsed = time.monotonic() - killed_at
        assert elapsed < SESSION_TIMEOUT + 2.0, f"expired after {elapsed:.2f}s"
        assert observer.exists("/live") is not None  # only the ephemeral node goes
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)


def test_another_process_sees_and_triggers_changes(backend: Backend) -> None:
    store = backend.open()
    store.create("/shared")
    lock, seen = threading.Lock(), []

    def record(event: WatchEvent) -> None:
        with lock:
            seen.append(event.type)

    store.watch("/shared/from-child", record)
    store.watch_children("/shared", record)
    (outcome,) = results(spawn("write", backend.uri(), "/shared/from-child", "hello"))
    assert outcome == {"version": 1}
    assert store.get("/shared/from-child").data == b"hello!"
    assert store.children("/shared") == ["from-child"]

    def watched() -> bool:  # ZooKeeper may coalesce the create and the set into one data event
        with lock:
            data_events = {WatchEventType.CREATED, WatchEventType.CHANGED} & set(seen)
            return WatchEventType.CHILDREN in seen and bool(data_events)

    wait_until(watched, message=lambda: f"events seen: {seen}")
