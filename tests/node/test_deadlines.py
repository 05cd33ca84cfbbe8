"""The shared deadline watcher: actions run at their deadline in its thread, in deadline order, and a cancelled
one never runs."""

from __future__ import annotations

import threading
import time

from cuvee.node.deadlines import Deadlines
from cuvee.testing.waiting import wait_until


def test_actions_run_at_their_deadlines_in_order_and_cancelled_ones_never() -> None:
    deadlines = Deadlines()
    ran: list[tuple[str, str]] = []
    now = time.monotonic()
    late = deadlines.watch(now + 0.3, lambda: ran.append(("late", threading.current_thread().name)))
    deadlines.watch(now + 0.1, lambda: ran.append(("early", threading.current_thread().name)))
    cancelled = deadlines.watch(now + 0.05, lambda: ran.append(("cancelled", "")))
    cancelled.cancel()
    wait_until(lambda: len(ran) == 2, 5)
    assert [name for name, _ in ran] == ["early", "late"] and {t for _, t in ran} == {"query-deadlines"}
    assert time.monotonic() - now >= 0.3 and late.action is None  # run, then let go
    deadlines.watch(time.monotonic() - 1, lambda: 1 / 0)  # a failing action does not stop the watcher
    deadlines.watch(time.monotonic(), lambda: ran.append(("after", "")))
    wait_until(lambda: len(ran) == 3, 5)


def test_queries_that_end_in_time_leave_neither_their_action_nor_a_growing_heap() -> None:
    deadlines = Deadlines()
    far = time.monotonic() + 3600  # an hour-long timeout: the entries would otherwise stay that long
    handles = []
    for _ in range(1000):
        handle = deadlines.watch(far, lambda: None)
        handle.cancel()
        handles.append(handle)
    assert all(h.action is None for h in handles)  # no cursor kept alive by a closure
    assert len(deadlines) <= 130  # compacted as cancelled entries came to outnumber live ones


def test_a_repeating_action_runs_again_until_its_handle_is_cancelled() -> None:
    """DuckDB forgets an interrupt that comes before its statement starts: past the deadline a query is
    interrupted again and again until it ends."""
    deadlines = Deadlines()
    ran: list[float] = []
    handle = deadlines.watch(time.monotonic(), lambda: ran.append(time.monotonic()), every=0.02)
    wait_until(lambda: len(ran) >= 3, 5)
    handle.cancel()
    seen = len(ran)
    later: list[float] = []  # the watcher runs in time order: once this ran, 5 periods passed the cancel
    deadlines.watch(time.monotonic() + 0.1, lambda: later.append(time.monotonic()))
    wait_until(lambda: later, 5)
    assert len(ran) <= seen + 1  # one may have been under way
    assert handle.action is None
