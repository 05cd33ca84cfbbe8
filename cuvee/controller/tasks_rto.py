"""``GET /tasks/{table}``'s answer for RealtimeToOfflineSegmentsTask: what a run would move now. The same planner
(``cuvee.maintenance.rto_plan``) over the same view the job reads: both halves' segments from the store, the
stream's latest offsets of the partitions consuming now (unknown when the stream does not answer)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.table_setup import latest_offsets
from cuvee.errors import CuveeError
from cuvee.lineage.rules import hidden_segments
from cuvee.maintenance.config import RealtimeToOfflineConfig
from cuvee.maintenance.periods import format_period
from cuvee.maintenance.rto_plan import WATERMARK, moved_windows, plan_moves, realtime_segments
from cuvee.maintenance.spans import committed_spans

if TYPE_CHECKING:
    from cuvee.cluster.records import TaskState
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)


def rto_due(ctl: Controller, config: TableConfig, task: RealtimeToOfflineConfig,
            current: TaskState) -> list[dict[str, Any]]:
    """The windows a run would move now (none while the table has no OFFLINE half: the job refuses to run)."""
    catalog = Catalog(ctl.store)
    offline = catalog.find_table(f"{config.table_name}_OFFLINE")
    step = millis_per_value(catalog.schema(config.table_name), config.time_column)
    if offline is None or step is None:
        return []
    rt_ideal = _ideal(ctl, config.name_with_type)
    rt_records = _records(ctl, config.name_with_type, rt_ideal)
    partitions = {r.partition for name, r in rt_records.items() if r.partition is not None
                  and SegmentState.CONSUMING in rt_ideal.segments.get(name, {}).values()}
    offsets: dict[int, int | None] = {}
    if partitions and config.stream is not None:
        try:
            offsets = dict(latest_offsets(config.stream, partitions))
        except CuveeError as exc:
            log.warning("%s: the stream's latest offsets are unknown: %s", config.name_with_type, exc)
    off_ideal = _ideal(ctl, offline.name_with_type)
    lineage = ctl.store.lineage(offline.name_with_type)
    spans = committed_spans(_records(ctl, offline.name_with_type, off_ideal), off_ideal.segments,
                            hidden_segments(lineage), step)
    realtime = realtime_segments(rt_records, rt_ideal.segments, step,
                                 hidden_segments(ctl.store.lineage(config.name_with_type)))
    plan = plan_moves(task, realtime, offsets, spans, moved_windows(lineage, (s.name for s in spans)),
                      current.watermark_map.get(WATERMARK), ctl.clock_ms(), step_ms=step)
    return [{"windowStartMs": w.start_ms, "windowEndMs": w.end_ms, "bucket": format_period(w.end_ms - w.start_ms),
             "segments": len(w.segments), "rows": w.total_docs} for w in plan.windows]


def _ideal(ctl: Controller, table: str) -> IdealState:
    found = ctl.store.ideal_state(table)
    return found.record if found is not None else IdealState(table)


def _records(ctl: Controller, table: str, ideal: IdealState) -> dict[str, SegmentRecord]:
    out = {}
    for name in ideal.segments:
        found = ctl.store.find_segment(table, name)
        if found is not None:
            out[name] = found.record
    return out
