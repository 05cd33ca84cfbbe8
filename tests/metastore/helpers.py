"""Small helpers shared by the metastore tests, their child processes, and role tests that need a live node held
by another process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cuvee.testing.waiting import wait_until

__all__ = ["hold_live_node", "spawn", "wait_until"]

REPO = Path(__file__).resolve().parents[2]


def spawn(*args: str) -> subprocess.Popen[str]:
    """``python -m tests.metastore.child ARGS`` with pipes (its commands print JSON lines)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.metastore.child", *args],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def hold_live_node(uri: str, path: str) -> subprocess.Popen[str]:
    """Another process holding ephemeral node ``path`` in its own session (SIGKILL it to leave the node behind
    until the session expires)."""
    holder = spawn("hold-ephemeral", uri, path)
    assert holder.stdout is not None
    ready = json.loads(holder.stdout.readline() or "{}")
    if not ready.get("ready"):
        holder.kill()
        raise AssertionError(f"the holder did not start: {holder.stderr.read() if holder.stderr else ''}")
    return holder
