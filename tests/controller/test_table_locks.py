"""The per-table lock of pushes and deletes: one holder per table, bounded waits answer 503."""

from __future__ import annotations

import threading

import pytest

from cuvee.controller.table_locks import TableBusy, TableLocks


def test_one_holder_per_table_and_bounded_waits() -> None:
    locks = TableLocks()
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with locks.hold("t_OFFLINE"):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)
    with pytest.raises(TableBusy) as busy:
        with locks.hold("t_OFFLINE", timeout_seconds=0.05):
            pass
    assert busy.value.status == 503
    with locks.hold("other_OFFLINE", timeout_seconds=0.05):  # other tables are not held up
        with locks.hold("other_OFFLINE", timeout_seconds=0.05):  # re-entrant for its holder
            pass
    release.set()
    thread.join(5)
    with locks.hold("t_OFFLINE", timeout_seconds=1):
        pass
