"""Named fault points, so failure tests can stop the controller between commit steps.

A test adds a name to ``FAULTS``; the next ``fault(name)`` call raises FaultInjected (once per add: the name is
removed when it fires, unless it is in ``STICKY``). To interleave instead of fail, a test puts a callable in
``HOOKS``: the next ``fault(name)`` pops and runs it (before any armed fault), so another operation can run at
exactly that point of a commit. Production code never adds names or hooks, so a fault point costs two emptiness
checks.

Multi-process tests arm a whole controller process through the environment (``arm_from_environment``, called by
``cuvee controller``): ``CUVEE_FAULTS="commit.after_step1=kill"`` SIGKILLs the process at that point (a controller
dropped between commit steps), ``=fail`` makes the point fail once. Several entries are comma-separated.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping

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
# A batch job (``cuvee pipeline``) after its metadata push, before endReplaceSegments.
PIPELINE_AFTER_PUSH = "pipeline.after_push"
# A maintenance job (``cuvee pipeline merge-rollup`` …): its segments built and stored, nothing pushed; pushed
# under an IN_PROGRESS lineage entry; replaced, watermarks not yet advanced.
MAINTENANCE_AFTER_BUILD = "maintenance.after_build"
MAINTENANCE_AFTER_PUSH = "maintenance.after_push"
MAINTENANCE_AFTER_REPLACE = "maintenance.after_replace"
# An upsert compaction's swap on the controller: the segment's record names the new CRC, the ideal state not yet.
COMPACTION_AFTER_RECORD = "compaction.after_record"
POINTS = (COMMIT_BEFORE_STEP1, COMMIT_AFTER_STEP1, COMMIT_AFTER_STEP2, COMMIT_AFTER_STEP3, COMMIT_START_AFTER_PIN,
          COMMIT_START_AFTER_NEXT, PIPELINE_AFTER_PUSH, MAINTENANCE_AFTER_BUILD, MAINTENANCE_AFTER_PUSH,
          MAINTENANCE_AFTER_REPLACE, COMPACTION_AFTER_RECORD)


ENVIRONMENT = "CUVEE_FAULTS"
log = logging.getLogger(__name__)


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


def _kill_self() -> None:
    log.warning("fault point reached: SIGKILLing this process (%s)", ENVIRONMENT)
    logging.shutdown()
    os.kill(os.getpid(), signal.SIGKILL)


def arm_from_environment(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Arm the faults ``CUVEE_FAULTS`` names (``point=kill|fail``, comma-separated); returns the armed points.
    Unknown points or actions raise ValueError: a test that arms nothing must not pass by accident."""
    spec = environ.get(ENVIRONMENT, "").strip()
    armed: list[str] = []
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        point, _, action = entry.partition("=")
        if point not in POINTS:
            raise ValueError(f"{ENVIRONMENT}: unknown fault point {point!r} (known: {', '.join(POINTS)})")
        if action == "kill":
            with _lock:
                HOOKS[point] = _kill_self
        elif action == "fail":
            with _lock:
                FAULTS.add(point)
        else:
            raise ValueError(f"{ENVIRONMENT}: action for {point!r} must be 'kill' or 'fail', got {action!r}")
        armed.append(point)
    if armed:
        log.warning("%s armed fault points %s: for failure tests only", ENVIRONMENT, ", ".join(armed))
    return armed
