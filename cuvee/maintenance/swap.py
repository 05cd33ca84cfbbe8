"""Swapping a maintenance job's output in: one lineage replace (startReplaceSegments → metadata push →
endReplaceSegments), so queries read exactly the old segments until every new one is served, and exactly the new
ones after. A job that dies before the end leaves the old segments served; its rerun's start reverts the dead
entry (the same inputs) and pushes again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuvee.controller import faults
from cuvee.pipeline.controller_client import ControllerClient

TASK_KEY = "taskType"  # lineage custom map: which task made the entry
RUN_KEY = "runId"


def swap_in(client: ControllerClient, table: str, sources: Sequence[str], built: Sequence[dict[str, Any]], *,
            task_type: str, run_id: str) -> str:
    """Replace ``sources`` by ``built`` (metadata dicts of stored archives); returns the lineage entry id."""
    targets = [b["segmentName"] for b in built]
    entry = client.start_replace(table, list(sources), targets, {TASK_KEY: task_type, RUN_KEY: run_id})
    if built:
        client.push(table, list(built))
    faults.fault(faults.MAINTENANCE_AFTER_PUSH)
    client.end_replace(table, entry)
    return entry

