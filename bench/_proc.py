"""What a role's process has spent, read from Linux ``/proc`` (the benches start the roles as processes)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (10 ms ticks); NaN when it cannot be read (gone, not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
