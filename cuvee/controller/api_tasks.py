"""``/tasks``: a table's maintenance tasks (Pinot's minion task types, run as Spark jobs).

``GET /tasks/{table}`` shows, per configured task type of each half, the watermarks, what is due now (the
planner's answer over the served segments), the run going on and the last run. A job reports its start and its
end (``POST /tasks/{table}/{type}/start|finish``); watermarks only move forward, so a late report of an old run
cannot move one back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body

from cuvee.cluster.records import TaskState
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import TableConfig, TableType, raw_table_name
from cuvee.config.errors import ConfigValidationError
from cuvee.controller.api_common import require_body
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import BadRequest, NotFound
from cuvee.lineage.rules import hidden_segments
from cuvee.maintenance.compaction_plan import candidates as compaction_candidates
from cuvee.maintenance.compaction_plan import table_segments
from cuvee.maintenance.config import (MERGE_ROLLUP, TASK_TYPES, UPSERT_COMPACTION, TaskConfigs,
                                      UpsertCompactionConfig, task_configs)
from cuvee.maintenance.merge_plan import plan_merges
from cuvee.maintenance.periods import format_period
from cuvee.maintenance.spans import committed_spans

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

MAX_MESSAGE = 2000
_RUN_STATUSES = ("SUCCEEDED", "FAILED", "NOTHING_TO_DO")
_RUN_NUMBERS = ("segmentsIn", "segmentsOut", "rowsIn", "rowsOut", "tasks")


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    def halves(table: str) -> list[tuple[TableConfig, TaskConfigs]]:
        catalog = Catalog(ctl.store)
        found = []
        for full in catalog.resolve(table):
            config = catalog.find_table(full)
            if config is None:
                continue
            try:
                found.append((config, task_configs(config, catalog.schema(config.table_name))))
            except ConfigValidationError as exc:
                raise BadRequest(str(exc)) from None
        if not found:
            raise NotFound(f"table {table!r} does not exist")
        return found

    def half_with(table: str, task_type: str) -> TableConfig:
        if task_type not in TASK_TYPES:
            raise NotFound(f"unknown task type {task_type!r}; Cuvee runs {', '.join(TASK_TYPES)}")
        for config, tasks in halves(table):
            if task_type in tasks.types:
                return config
        raise NotFound(f"table {table!r} has no {task_type} configured (task.taskTypeConfigsMap)")

    def state(full: str, task_type: str) -> TaskState:
        found = ctl.store.find(TaskState, ctl.store.paths.task(full, task_type))
        return found.record if found is not None else TaskState(full, task_type)

    @api.get("/tasks/{table}")
    def show(table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for config, tasks in halves(table):
            for task_type in tasks.types:
                current = state(config.name_with_type, task_type)
                out[task_type] = {"tableNameWithType": config.name_with_type, **current.to_json(),
                                  "due": due(config, tasks, current)}
                out[task_type].pop("table"), out[task_type].pop("taskType")
        return {"tableName": raw_table_name(table), "tasks": out}

    def due(config: TableConfig, tasks: TaskConfigs, current: TaskState) -> list[dict[str, Any]]:
        if current.task_type == UPSERT_COMPACTION:
            return compaction_due(config, tasks.upsert_compaction) if tasks.upsert_compaction else []
        if current.task_type != MERGE_ROLLUP or tasks.merge_rollup is None:
            return []
        full = config.name_with_type
        ideal = ctl.store.ideal_state(full)
        segments = ideal.record.segments if ideal is not None else {}
        records = {}
        for name in segments:
            found = ctl.store.find_segment(full, name)
            if found is not None:
                records[name] = found.record
        step = millis_per_value(Catalog(ctl.store).schema(config.table_name), config.time_column)
        spans = committed_spans(records, segments, hidden_segments(ctl.store.lineage(full)), step)
        plan = plan_merges(tasks.merge_rollup, spans, current.watermark_map, ctl.clock_ms())
        return [{"level": t.level, "windowStartMs": t.window_start_ms, "windowEndMs": t.window_end_ms,
                 "bucket": format_period(t.window_end_ms - t.window_start_ms), "segments": len(t.segments),
                 "rows": t.total_docs} for t in plan.tasks]

    def compaction_due(config: TableConfig, compaction: UpsertCompactionConfig) -> list[dict[str, Any]]:
        """The segments old enough to compact (the job asks their replicas how many docs are invalid)."""
        full = config.name_with_type
        ideal = ctl.store.ideal_state(full)
        segments = ideal.record.segments if ideal is not None else {}
        records = {n: found.record for n in segments if (found := ctl.store.find_segment(full, n)) is not None}
        step = millis_per_value(Catalog(ctl.store).schema(config.table_name), config.time_column)
        return [{"segment": s.name, "endMs": s.end_ms, "totalDocs": s.total_docs}
                for s in compaction_candidates(compaction, table_segments(records, segments, step), ctl.clock_ms())]

    @api.post("/tasks/{table}/{task_type}/start")
    def start(table: str, task_type: str, body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        full = half_with(table, task_type).name_with_type
        doc = require_body(body)
        run_id = _text(doc, "runId", 64)
        running = {"runId": run_id, "startedMs": ctl.clock_ms(), "by": _text(doc, "by", 256, required=False)}
        previous = state(full, task_type).running

        def mark(current: TaskState) -> TaskState:
            return TaskState(full, task_type, current.watermarks, running, current.last_run)

        ctl.store.update(TaskState, ctl.store.paths.task(full, task_type), mark, initial=TaskState(full, task_type))
        return {"status": f"{task_type} run {run_id} of {full} started", "previouslyRunning": previous}

    @api.post("/tasks/{table}/{task_type}/finish")
    def finish(table: str, task_type: str, body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        full = half_with(table, task_type).name_with_type
        doc = require_body(body)
        run_id = _text(doc, "runId", 64)
        status = _text(doc, "status", 32)
        if status not in _RUN_STATUSES:
            raise BadRequest(f"status must be one of {', '.join(_RUN_STATUSES)}")
        marks = doc.get("watermarks") or {}
        if not isinstance(marks, dict) or len(marks) > 64 or not all(
                isinstance(k, str) and len(k) <= 64 and isinstance(v, int) and not isinstance(v, bool)
                for k, v in marks.items()):
            raise BadRequest("watermarks must map at most 64 level names to integers (epoch milliseconds)")
        now = ctl.clock_ms()
        last: dict[str, Any] = {"runId": run_id, "status": status,
                                "message": _text(doc, "message", MAX_MESSAGE, required=False), "endedMs": now}
        for key in _RUN_NUMBERS:
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                last[key] = value

        def report(current: TaskState) -> TaskState:
            merged = current.watermark_map
            for name, value in marks.items():
                merged[name] = max(value, merged.get(name, value))  # forward only
            running = current.running
            if running is not None and running.get("runId") == run_id:
                last["startedMs"] = running.get("startedMs")
                last["durationMs"] = now - int(running.get("startedMs") or now)
                running = None
            return TaskState(full, task_type, tuple(sorted(merged.items())), running, last)

        stored = ctl.store.update(TaskState, ctl.store.paths.task(full, task_type), report,
                                  initial=TaskState(full, task_type))
        return {"status": f"{task_type} run {run_id} of {full}: {status}", **stored.record.to_json()}

    return api


def _text(doc: Any, key: str, limit: int, *, required: bool = True) -> str:
    value = doc.get(key) if isinstance(doc, dict) else None
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value) or len(value) > limit:
        raise BadRequest(f"{key} must be a string of 1..{limit} characters")
    return value
