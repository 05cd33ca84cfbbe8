"""Child-process hygiene for the services tests and tools start (ZooKeeper, tansu).

A test run killed with SIGKILL cannot run its cleanup, so the services it started would live on and hold
ports. On Linux the child asks the kernel to send it SIGTERM when its parent dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for subprocess.Popen that ties the child's life to this process (Linux only).

    The signal fires when the *thread* that started the child exits, so start long-lived services from a
    thread that lives as long as they should (the main thread, for test fixtures)."""
    return _set_parent_death_signal if sys.platform.startswith("linux") else None
