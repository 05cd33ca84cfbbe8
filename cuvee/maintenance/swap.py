"""Swapping a maintenance job's output in: one lineage replace (startReplaceSegments → metadata push →
endReplaceSegments), so queries read exactly the old segments until every new one is served, and exactly the new
ones after. A job that dies before the end leaves the old segments served; its rerun's start reverts the dead
entry (the same inputs) and pushes again. Inputs that lineage already hides (a concurrent run replaced them
first) are refused by the controller (409): the loser's outputs are deleted and its run fails, so rows are
never added twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cuvee.config import TableType
from cuvee.controller import faults
from cuvee.lineage.rules import TASK_TYPE
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.ingest import delete_archives

RUN_KEY = "runId"


def swap_in(client: ControllerClient, table: str, sources: Sequence[str], built: Sequence[dict[str, Any]], *,
            task_type: str, run_id: str, deep_store_uri: str = "", table_type: TableType = TableType.OFFLINE) -> str:
    """Replace ``sources`` by ``built`` (metadata dicts of stored archives); returns the lineage entry id."""
    targets = [b["segmentName"] for b in built]
    try:
        entry = client.start_replace(table, list(sources), targets, {TASK_TYPE: task_type, RUN_KEY: run_id},
                                     table_type)
    except PipelineError:
        if deep_store_uri:
            delete_archives(deep_store_uri, list(built))  # nothing references them: e.g. another run replaced the inputs
        raise
    if built:
        client.push(table, list(built), table_type)
    faults.fault(faults.MAINTENANCE_AFTER_PUSH)
    client.end_replace(table, entry, table_type)
    return entry

