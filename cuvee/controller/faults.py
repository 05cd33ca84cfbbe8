"""Named fault points, so failure tests can stop the controller between commit steps.

A test adds a name to ``FAULTS``; the next ``fault(name)`` call raises FaultInjected (once per add: the name is
removed when it fires, unless it is in ``STICKY``). Production code never adds names, so a fault point costs one
set lookup.
"""

from __future__ import annotations

import threading

from cuvee.errors import CuveeError

FAULTS: set[str] = set()
STICKY: set[str] = set()
FIRED: list[str] = []
_lock = threading.Lock()

COMMIT_BEFORE_STEP1 = "commit.before_step1"
COMMIT_AFTER_STEP1 = "commit.after_step1"
COMMIT_AFTER_STEP2 = "commit.after_step2"
COMMIT_AFTER_STEP3 = "commit.after_step3"
POINTS = (COMMIT_BEFORE_STEP1, COMMIT_AFTER_STEP1, COMMIT_AFTER_STEP2, COMMIT_AFTER_STEP3)


class FaultInjected(CuveeError):
    """A test asked this fault point to fail."""


def fault(name: str) -> None:
    """Raise FaultInjected if a test armed ``name``."""
    if not FAULTS:
        return
    with _lock:
        if name not in FAULTS:
            return
        if name not in STICKY:
            FAULTS.discard(name)
        FIRED.append(name)
    raise FaultInjected(f"fault injected at {name}")


def reset() -> None:
    with _lock:
        FAULTS.clear()
        STICKY.clear()
        FIRED.clear()
