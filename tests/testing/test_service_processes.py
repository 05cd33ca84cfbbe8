"""Services started for tests must not outlive a test process that is killed without cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from cuvee.testing.process import die_with_parent

CHILD = """
import subprocess, sys
from cuvee.testing.process import die_with_parent
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=die_with_parent())
print(p.pid, flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child stays as a zombie until init reaps it; a zombie counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_service_dies_when_its_starter_is_sigkilled() -> None:
    starter = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    service_pid = int(starter.stdout.readline())
    assert _alive(service_pid)
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 10
    while _alive(service_pid) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a condition with a deadline
    assert not _alive(service_pid), "the service outlived the process that started it"


def test_die_with_parent_is_a_preexec_hook_on_linux() -> None:
    hook = die_with_parent()
    assert callable(hook) == sys.platform.startswith("linux")
