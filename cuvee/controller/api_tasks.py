"""``/tasks``: a table's maintenance tasks (Pinot's minion task types, run as Spark jobs).

``GET /tasks/{table}`` shows, per configured task type of each half, the watermarks, what is due now (the
planner's answer over the served segments), the run going on, the last run and the job this controller launched
(``POST /tasks/{table}/{type}/run`` launches one now; ``cuvee.controller.task_scheduler``). A job reports its start and its
end (``POST /tasks/{table}/{type}/start|finish``); watermarks only move forward, so a late report of an old run
cannot move one back.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body

from cuvee.cluster.errors import RecordNotFoundError
from cuvee.cluster.records import SegmentRecord, TaskState
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import TableConfig, TableType, raw_table_name
from cuvee.config.errors import ConfigValidationError
from cuvee.controller.api_common import require_body
from cuvee.controller.catalog import Catalog
from cuvee.controller.task_scheduler import JobAlreadyRunning
from cuvee.controller.errors import BadRequest, Conflict, NotFound
from cuvee.lineage.rules import hidden_segments
from cuvee.controller.tasks_rto import rto_due
from cuvee.maintenance.compaction_plan import candidates as compaction_candidates
from cuvee.maintenance.compaction_plan import table_segments
from cuvee.maintenance.config import (MERGE_ROLLUP, REALTIME_TO_OFFLINE, TASK_TYPES, UPSERT_COMPACTION, TaskConfigs,
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
                launch = ctl.task_scheduler.running(config.table_name, task_type)
                out[task_type] = {"tableNameWithType": config.name_with_type, **current.to_json(),
                                  "due": due_work(ctl, config, tasks, current, task_type),
                                  "launched": launch.to_json() if launch is not None else None,
                                  "scheduler": ctl.config.tasks.mode}
                out[task_type].pop("table"), out[task_type].pop("taskType")
        return {"tableName": raw_table_name(table), "tasks": out}

    @api.post("/tasks/{table}/{task_type}/run")
    def run_now(table: str, task_type: str) -> dict[str, Any]:
        """Launch the job now (in either scheduler mode); 409 while one launched here is running."""
        ctl.require_leader()
        config = half_with(table, task_type)
        try:
            launch = ctl.task_scheduler.launch(config.table_name, config.name_with_type, task_type, "requested")
        except JobAlreadyRunning as exc:
            raise Conflict(str(exc)) from None
        return {"status": f"{task_type} job launched for {config.name_with_type}", **launch.to_json()}

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
        if any(v > now + 86_400_000 for v in marks.values()):
            raise BadRequest("a watermark is the start of the next window to process: it cannot be in the future")
        last: dict[str, Any] = {"runId": run_id, "status": status,
                                "message": _text(doc, "message", MAX_MESSAGE, required=False), "endedMs": now}
        for key in _RUN_NUMBERS:
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                last[key] = value

        def report(current: TaskState) -> TaskState:
            running = current.running
            if running is None or running.get("runId") != run_id:
                # not the run recorded as running (one presumed dead since, or of a table half made anew): its
                # report is kept, its watermarks are not (the next run plans from what is served)
                return TaskState(full, task_type, current.watermarks, running, last)
            merged = _forward(current, marks).watermark_map  # forward only
            last["startedMs"] = running.get("startedMs")
            last["durationMs"] = now - int(running.get("startedMs") or now)
            return TaskState(full, task_type, tuple(sorted(merged.items())), None, last)

        try:  # a run starts before it finishes: no state means the table half was deleted (and maybe made anew)
            stored = ctl.store.update(TaskState, ctl.store.paths.task(full, task_type), report)
        except RecordNotFoundError:
            raise Conflict(f"no {task_type} run of {full} is recorded (its state was deleted with the table since "
                           f"run {run_id} started); its report and watermarks are not kept") from None
        ctl.metrics.task_runs.labels(full, task_type, status).inc()
        if "durationMs" in last:
            ctl.metrics.task_run_seconds.labels(full, task_type).observe(max(0, last["durationMs"]) / 1000)
        return {"status": f"{task_type} run {run_id} of {full}: {status}", **stored.record.to_json()}

    return api


def due_work(ctl: Controller, config: TableConfig, tasks: TaskConfigs, current: TaskState,
             task_type: str) -> list[dict[str, Any]]:
    """What a run of ``task_type`` would do now, by the task's planner over the served segments (empty: nothing)."""
    return plan_now(ctl, config, tasks, current, task_type)[0]


def plan_now(ctl: Controller, config: TableConfig, tasks: TaskConfigs, current: TaskState,
             task_type: str) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(the work due, the watermarks a run would store without any work: windows that need no merge)."""
    if task_type == REALTIME_TO_OFFLINE and tasks.realtime_to_offline is not None:
        return rto_due(ctl, config, tasks.realtime_to_offline, current), {}
    if task_type == UPSERT_COMPACTION and tasks.upsert_compaction is not None:
        return compaction_due(ctl, config, tasks.upsert_compaction), {}
    if task_type != MERGE_ROLLUP or tasks.merge_rollup is None:
        return [], {}
    full = config.name_with_type
    segments, records, step = _segments(ctl, config)
    spans = committed_spans(records, segments, hidden_segments(ctl.store.lineage(full)), step)
    plan = plan_merges(tasks.merge_rollup, spans, current.watermark_map, ctl.clock_ms())
    due = [{"level": t.level, "windowStartMs": t.window_start_ms, "windowEndMs": t.window_end_ms,
            "bucket": format_period(t.window_end_ms - t.window_start_ms), "segments": len(t.segments),
            "rows": t.total_docs} for t in plan.tasks]
    return due, ({} if plan.tasks else dict(plan.watermarks))


def _segments(ctl: Controller, config: TableConfig) -> tuple[dict[str, Any], dict[str, SegmentRecord], float | None]:
    """The half's ideal state, its segments' records, and milliseconds per unit of its time column."""
    full = config.name_with_type
    ideal = ctl.store.ideal_state(full)
    segments = ideal.record.segments if ideal is not None else {}
    records = {n: found.record for n in segments if (found := ctl.store.find_segment(full, n)) is not None}
    return segments, records, millis_per_value(Catalog(ctl.store).schema(config.table_name), config.time_column)


def compaction_due(ctl: Controller, config: TableConfig, compaction: UpsertCompactionConfig) -> list[dict[str, Any]]:
    """The segments old enough to compact (the job asks their replicas how many docs are invalid)."""
    segments, records, step = _segments(ctl, config)
    return [{"segment": s.name, "endMs": s.end_ms, "totalDocs": s.total_docs}
            for s in compaction_candidates(compaction, table_segments(records, segments, step), ctl.clock_ms())]


def due_for(ctl: Controller, full: str, task_type: str) -> list[dict[str, Any]]:
    """``due_work`` for the scheduler, by table name with type. Windows that need no merge (one segment each,
    or empty) move the watermarks here, without a Spark job: else a higher level, which waits for the level
    below to pass its windows, would wait for ever."""
    catalog = Catalog(ctl.store)
    config = catalog.find_table(full)
    if config is None:
        return []
    tasks = task_configs(config, catalog.schema(config.table_name))
    found = ctl.store.find(TaskState, ctl.store.paths.task(full, task_type))
    current = found.record if found is not None else TaskState(full, task_type)
    due, marks = plan_now(ctl, config, tasks, current, task_type)
    if marks:
        ctl.store.update(TaskState, ctl.store.paths.task(full, task_type), lambda state: _forward(state, marks),
                         initial=TaskState(full, task_type))
    return due


def _forward(state: TaskState, marks: dict[str, int]) -> TaskState:
    merged = state.watermark_map
    for name, value in marks.items():
        merged[name] = max(value, merged.get(name, value))
    return dataclasses.replace(state, watermarks=tuple(sorted(merged.items())))


def _text(doc: Any, key: str, limit: int, *, required: bool = True) -> str:
    value = doc.get(key) if isinstance(doc, dict) else None
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value) or len(value) > limit:
        raise BadRequest(f"{key} must be a string of 1..{limit} characters")
    return value
