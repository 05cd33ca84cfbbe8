"""Which due maintenance jobs the scheduler launches now (pure): none already running for the same table and
task type, at most ``capacity`` at once, the longest-waiting first (never run, then the oldest last run)."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    table: str  # raw name
    task_type: str
    last_run_ended_ms: int | None = None
    full: str = ""  # the half it runs on (``sales_OFFLINE``)

    @property
    def key(self) -> tuple[str, str]:
        return (self.table, self.task_type)


def pick_launches(due: Iterable[Candidate], running: Set[tuple[str, str]], capacity: int) -> list[Candidate]:
    free = max(0, capacity - len(running))
    waiting = sorted((c for c in due if c.key not in running),
                     key=lambda c: (c.last_run_ended_ms is not None, c.last_run_ended_ms or 0, c.table, c.task_type))
    return waiting[:free]
