"""RealtimeToOfflineSegmentsTask on Spark: a hybrid table's finished windows of committed realtime rows move into
its OFFLINE half.

The driver plans (``rto_plan.plan_moves`` over the controller's view of both halves and the stream's latest
offsets); one Spark task per window reads the committed realtime segments overlapping it (deep store, else a
server holding them; never a consuming segment), keeps the rows whose time lies in the window, merges them as
configured (concat, rollup, dedup, time rounding) and builds OFFLINE segments named ``rto_<start>_<end>_…`` into
the deep store. The driver then swaps each window in, oldest first, with its own lineage replace whose
``inputKey`` names the window (a rerun's replace reverts a dead run's entry for it), and finally advances the
watermark. The realtime segments are left alone (retention removes them); the broker's time boundary follows the
offline half's newest end time, so queries switch halves as the windows arrive, each row counted once.

Windows go in oldest first and one at a time, so the offline half always holds every row up to its newest end
time: a boundary computed over it never hides a row. A run that dies before a window's ``endReplaceSegments``
leaves that window unmoved (its pushed segments hidden); one that dies after it leaves the window moved and the
rerun skips it (its completed entry) before moving the watermark.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import Schema, TableConfig, TableType
from cuvee.controller import faults
from cuvee.lineage.rules import INPUT_KEY, TASK_TYPE
from cuvee.maintenance.config import REALTIME_TO_OFFLINE, RealtimeToOfflineConfig, task_configs
from cuvee.maintenance.jobs import READ_TIMEOUT_SECONDS, JobSummary, discard_run, failure_reason, job_owner, report_run
from cuvee.maintenance.rows import merge_rows
from cuvee.maintenance.rto_plan import (WATERMARK, MovePlan, MoveWindow, iso, moved_windows, plan_moves,
                                        realtime_segments, window_bounds)
from cuvee.maintenance.spans import committed_spans
from cuvee.maintenance.swap import RUN_KEY
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.ingest import delete_archives
from cuvee.pipeline.read_plan import HalfState, SegmentSource, plan_sources
from cuvee.pipeline.segments import BUCKET, PART, BuildSpec, bucket_and_partition, build_groups, grouped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MoveWork:
    """One Spark task's share: a window, the realtime segments to read for it and how to build (picklable)."""

    window: MoveWindow
    sources: tuple[SegmentSource, ...]
    config: RealtimeToOfflineConfig
    spec: BuildSpec  # the OFFLINE half's config: the segments go there
    step_ms: float


@dataclass(frozen=True)
class HybridTable:
    realtime: TableConfig
    offline: TableConfig
    schema: Schema
    task: RealtimeToOfflineConfig
    step_ms: float


def hybrid_table(client: ControllerClient, table: str) -> HybridTable:
    """The table's two halves and task config; a clear PipelineError when the task cannot run on it."""
    halves = client.tables(table)
    realtime, offline = halves.get(TableType.REALTIME), halves.get(TableType.OFFLINE)
    if realtime is None:
        raise PipelineError(f"table {table!r} has no REALTIME half: RealtimeToOfflineSegmentsTask moves a hybrid "
                            "table's realtime rows")
    schema = client.schema(table)
    task = task_configs(realtime, schema).realtime_to_offline
    if task is None:
        raise PipelineError(f"table {table!r} has no RealtimeToOfflineSegmentsTask in its REALTIME config's "
                            "task.taskTypeConfigsMap")
    if offline is None:
        raise PipelineError(f"table {table!r} has no OFFLINE half to move rows into: create the OFFLINE half first "
                            f"(POST /tables with tableName {table!r}, tableType OFFLINE and the same timeColumnName)")
    if offline.time_column != realtime.time_column:
        raise PipelineError(f"table {table!r}: the OFFLINE half's time column {offline.time_column!r} is not the "
                            f"REALTIME half's {realtime.time_column!r}; the time boundary needs one time column")
    step = millis_per_value(schema, realtime.time_column)
    if step is None:
        raise PipelineError(f"table {table!r}: time column {realtime.time_column!r} holds no epoch values; "
                            "RealtimeToOfflineSegmentsTask needs an epoch (or TIMESTAMP) time column")
    return HybridTable(realtime, offline, schema, task, step)


def plan_table(client: ControllerClient, table: str, hybrid: HybridTable,
               now_ms: int) -> tuple[MovePlan, HalfState]:
    """The plan over both halves as the controller describes them now, and the realtime half's state (to read)."""
    from cuvee.pipeline.datasource import InstanceUrls, half_state

    state = client.tasks(table).get(REALTIME_TO_OFFLINE) or {}
    watermark = (state.get("watermarks") or {}).get(WATERMARK)
    urls = InstanceUrls(client)
    realtime = half_state(client, table, TableType.REALTIME, hybrid.realtime.name_with_type, None, urls)
    try:
        offsets = client.latest_offsets(table)  # read after the segments: a later offset can only block more
    except PipelineError as exc:  # the stream did not answer: every partition waits for its committed rows
        log.warning("%s: the stream's latest offsets are unknown (%s); only committed rows count", table, exc)
        offsets = {}
    offline = half_state(client, table, TableType.OFFLINE, hybrid.offline.name_with_type, None, urls)
    lineage = client.lineage(table, TableType.OFFLINE)
    spans = committed_spans(offline.records, offline.ideal, offline.hidden, hybrid.step_ms)
    segments = realtime_segments(realtime.records, realtime.ideal, hybrid.step_ms, realtime.hidden)
    plan = plan_moves(hybrid.task, segments, offsets, spans, moved_windows(lineage, (s.name for s in spans)),
                      int(watermark) if isinstance(watermark, int) else None, now_ms, step_ms=hybrid.step_ms)
    return plan, realtime


def run_realtime_to_offline(spark: SparkSession, controller: str, table: str, *, now_ms: int | None = None,
                            progress: Callable[[str], None] = lambda _: None) -> JobSummary:
    """One RealtimeToOfflineSegmentsTask run over the hybrid ``table``: the due windows moved, the watermark on."""
    started = time.monotonic()
    summary = JobSummary(REALTIME_TO_OFFLINE, table, uuid.uuid4().hex[:12])
    with ControllerClient(controller) as client:
        hybrid = hybrid_table(client, table)
        deep_store_uri = client.deep_store_uri()
        plan, realtime = plan_table(client, table, hybrid, int(time.time() * 1000) if now_ms is None else now_ms)
        client.task_started(table, REALTIME_TO_OFFLINE, summary.run_id, job_owner())
        try:
            if plan.windows:
                sources = {s.segment: s for s in plan_sources(realtime, include_consuming=False, predicates=(),
                                                               time_spec=None)}
                work = [_work(window, sources, hybrid, deep_store_uri, summary.run_id) for window in plan.windows]
                progress(f"moving {len(work)} window(s) from {iso(plan.windows[0].start_ms)} in Spark tasks")
                built, rows_in = _build_on_spark(spark, work)
                summary.tasks, summary.rows_in = len(work), sum(rows_in.values())
                summary.segments_in = len({s for w in plan.windows for s in w.segments})
                _swap_windows(client, table, plan.windows, built, summary, deep_store_uri, progress)
            if plan.watermark is not None:
                summary.watermarks = {WATERMARK: plan.watermark}
            summary.status = "SUCCEEDED" if plan.windows else "NOTHING_TO_DO"
            summary.message = "; ".join(filter(None, (
                f"{plan.skipped} due window(s) were empty or moved already" if plan.skipped else "",
                f"next: {plan.waiting}" if plan.waiting else "")))
        except Exception as exc:
            if not summary.swapping:  # stored by Spark tasks, never pushed (after: _swap_windows cleans up)
                discard_run(deep_store_uri, hybrid.offline.name_with_type, summary.run_id)
            summary.status, summary.message = "FAILED", failure_reason(exc, summary.run_id)
            report_run(client, table, summary, started)  # with the watermark of the windows moved before the failure
            raise
        report_run(client, table, summary, started)
    return summary


def _work(window: MoveWindow, sources: dict[str, SegmentSource], hybrid: HybridTable, deep_store_uri: str,
          run_id: str) -> MoveWork:
    missing = [name for name in window.segments if name not in sources]
    if missing:
        raise PipelineError(f"realtime segments {', '.join(missing[:3])} have no record; run the job again")
    # names without a run id: a run racing another over the same window builds the same names, and its replace
    # then clashes with the other's instead of moving the window twice
    spec = BuildSpec(hybrid.offline.to_json(), hybrid.schema.to_json(), deep_store_uri, fingerprint="",
                     rows_per_segment=hybrid.task.max_records_per_segment, run_id=run_id,
                     name_prefix=window.name_prefix)
    return MoveWork(window, tuple(sources[name] for name in window.segments), hybrid.task, spec, hybrid.step_ms)


def _build_on_spark(spark: SparkSession, work: list[MoveWork]
                    ) -> tuple[dict[int, list[dict[str, Any]]], dict[int, int]]:
    """Each window in its own Spark task; returns per window start its built segments and the rows it kept."""
    results = spark.sparkContext.parallelize(work, len(work)).mapPartitions(_run_tasks).collect()
    built: dict[int, list[dict[str, Any]]] = {w.window.start_ms: [] for w in work}
    rows: dict[int, int] = {}
    for kind, start, meta in results:
        if kind == "segment":
            built[start].append(meta)
        else:
            rows[start] = int(meta["rows"])
    return built, rows


def _swap_windows(client: ControllerClient, table: str, windows: tuple[MoveWindow, ...],
                  built: dict[int, list[dict[str, Any]]], summary: JobSummary, deep_store_uri: str,
                  progress: Callable[[str], None]) -> None:
    """Oldest window first, each in its own replace; the watermark to report follows each window that is in."""
    faults.fault(faults.MAINTENANCE_AFTER_BUILD)  # a failure here: the run's archives go with discard_run
    summary.swapping = True
    for index, window in enumerate(windows):
        outputs = built[window.start_ms]
        entry = None
        try:
            if outputs:
                progress(f"moving window {iso(window.start_ms)}: {len(outputs)} segment(s)")
                entry = client.start_replace(table, [], [b["segmentName"] for b in outputs],
                                             {TASK_TYPE: REALTIME_TO_OFFLINE, RUN_KEY: summary.run_id,
                                              INPUT_KEY: window.input_key})
                client.push(table, outputs)
                faults.fault(faults.MAINTENANCE_AFTER_PUSH)
                client.end_replace(table, entry)
                summary.lineage_entry = entry
                faults.fault(faults.MAINTENANCE_AFTER_REPLACE)
        except Exception:
            # this window's pushed segments stay hidden by its IN_PROGRESS entry (the rerun reverts it and deletes
            # them); what was built for it without an entry, and for the windows after it, is deleted now
            unowned = [] if entry is not None else outputs
            delete_archives(deep_store_uri, unowned + [m for w in windows[index + 1:] for m in built[w.start_ms]])
            raise
        summary.segments_out += len(outputs)
        summary.rows_out += sum(int(b["totalDocs"]) for b in outputs)
        summary.watermarks = {WATERMARK: window.end_ms}


def _run_tasks(items: Iterator[MoveWork]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for work in items:
        yield from move_task(work)


def move_task(work: MoveWork) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Inside a Spark task: read the window's segments, keep its rows, merge, build. Yields ("read", start,
    {"rows": n}) then ("segment", start, metadata)…"""
    from cuvee.pipeline.scan import read_segment

    schema, table, start = work.spec.schema, work.spec.table, work.window.start_ms
    parts = [in_window(read_segment(source, schema.fields, deep_store_uri=work.spec.deep_store_uri,
                                    timeout_seconds=READ_TIMEOUT_SECONDS).cast(schema.arrow_schema()),
                       table.time_column or "", work.window, work.step_ms) for source in work.sources]
    rows = pa.concat_tables(parts)
    yield "read", start, {"rows": rows.num_rows}
    merged = merge_rows(rows, schema, work.config.merge_type, time_column=table.time_column,
                        aggregations=dict(work.config.aggregations))
    if merged.num_rows == 0:
        return
    batch = merged.combine_chunks().to_batches()[0]
    _, partition = bucket_and_partition(batch, table, schema)
    bucket = pa.array([start] * batch.num_rows, pa.int64())
    staged = pa.Table.from_batches([batch]).append_column(BUCKET, bucket).append_column(PART, partition)
    for meta in build_groups(grouped(staged).to_batches(), work.spec):
        yield "segment", start, meta


def in_window(rows: pa.Table, time_column: str, window: MoveWindow, step_ms: float) -> pa.Table:
    """The rows whose time lies in ``window`` (stored units: TIMESTAMP in milliseconds); rows without a time
    belong to no window."""
    if rows.num_rows == 0:
        return rows
    column = rows.column(time_column)
    if pa.types.is_timestamp(column.type):
        column, low, high = column.cast(pa.timestamp("ms")).cast(pa.int64()), window.start_ms, window.end_ms
    elif pa.types.is_floating(column.type):
        column = pc.multiply(column.cast(pa.float64()), step_ms)
        low, high = window.start_ms, window.end_ms
    else:
        column = column.cast(pa.int64())
        low, high = window_bounds(window.start_ms, window.end_ms, step_ms)
    keep = pc.and_(pc.greater_equal(column, pa.scalar(low, column.type)),
                   pc.less(column, pa.scalar(high, column.type)))
    return rows.filter(keep, null_selection_behavior="drop")
