"""Named fault points, so failure tests can stop the controller between commit steps.

A test adds a name to ``FAULTS``; the next ``fault(name)`` call raises FaultInjected (once per add: the name is
removed when it fires, unless it is in ``STICKY``). To interleave instead of fail, a test puts a callable in
``HOOKS``: the next ``fault(name)`` pops and runs it (before any armed fault), so another operation can run at
exactly that point of a commit. Production code never adds names or hooks, so a fault point costs two emptiness
checks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cuvee.errors import CuveeError

FAULTS: set[str] = set()
STICKY: set[str] = set()
HOOKS: dict[str, Callable[[], None]] = {}
FIRED: list[str] = []
_lock = threading.Lock()

COMMIT_BEFORE_STEP1 = "commit.before_step1"
COMMIT_AFTER_STEP1 = "commit.after_step1"
COMMIT_AFTER_STEP2 = "commit.after_step2"
COMMIT_AFTER_STEP3 = "commit.after_step3"
# Pauseless commit start: after the end offset is fixed (COMMITTING), after the next segment is placed.
COMMIT_START_AFTER_PIN = "commit_start.after_pin"
COMMIT_START_AFTER_NEXT = "commit_start.after_next"
POINTS = (COMMIT_BEFORE_STEP1, COMMIT_AFTER_STEP1, COMMIT_AFTER_STEP2, COMMIT_AFTER_STEP3, COMMIT_START_AFTER_PIN,
          COMMIT_START_AFTER_NEXT)


class FaultInjected(CuveeError):
    """A test asked this fault point to fail."""


def fault(name: str) -> None:
    """Run the hook a test put at ``name`` (once); raise FaultInjected if a test armed ``name``."""
    if HOOKS:
        with _lock:
            hook = HOOKS.pop(name, None)
            if hook is not None:
                FIRED.append(name)
        if hook is not None:
            hook()
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
        HOOKS.clear()
        FIRED.clear()
