"""The maintenance jobs on Spark. The driver plans (pure planners over the controller's view of the table), one
Spark task per planned merge reads its input segments (deep store, else a peer), merges their rows and builds
the output segments with the servers' builder into the deep store; the driver swaps them in with one lineage
replace and then advances the watermarks. Every step before the watermark is safe to die in: the old segments
stay served and a rerun plans the same work again.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import Schema, TableConfig, TableType
from cuvee.controller import faults
from cuvee.deepstore import open_deepstore
from cuvee.errors import CuveeError
from cuvee.maintenance.config import MERGE_ROLLUP, REALTIME_TO_OFFLINE, UPSERT_COMPACTION, MergeLevel, MergeRollupConfig, task_configs
from cuvee.maintenance.merge_plan import MergeTask, plan_merges
from cuvee.maintenance.rows import merge_rows
from cuvee.maintenance.spans import committed_spans
from cuvee.maintenance.swap import swap_in
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.read_plan import SegmentSource, plan_sources
from cuvee.segment.archive import ARCHIVE_SUFFIX
from cuvee.pipeline.segments import BUCKET, PART, BuildSpec, bucket_and_partition, build_groups, grouped

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
READ_TIMEOUT_SECONDS = 600.0


@dataclass
class JobSummary:
    task_type: str
    table: str
    run_id: str
    status: str = "NOTHING_TO_DO"
    tasks: int = 0
    segments_in: int = 0
    segments_out: int = 0
    rows_in: int = 0
    rows_out: int = 0
    seconds: float = 0.0
    watermarks: dict[str, int] = field(default_factory=dict)
    lineage_entry: str | None = None
    message: str = ""
    swapping: bool = False  # the swap began: what was pushed is the lineage entry's to clean up

    def report(self) -> dict[str, Any]:
        """The body of ``POST /tasks/{table}/{type}/finish``."""
        return {"runId": self.run_id, "status": self.status, "message": self.message[:2000],
                "watermarks": self.watermarks, "tasks": self.tasks, "segmentsIn": self.segments_in,
                "segmentsOut": self.segments_out, "rowsIn": self.rows_in, "rowsOut": self.rows_out}


@dataclass(frozen=True)
class MergeWork:
    """One Spark task's share: a planned merge, its sources and how to merge and build (picklable)."""

    task: MergeTask
    sources: tuple[SegmentSource, ...]
    level: MergeLevel
    aggregations: dict[str, str]
    spec: BuildSpec
    round_units: int | None


def run_merge_rollup(spark: SparkSession, controller: str, table: str, *, now_ms: int | None = None,
                     progress: Callable[[str], None] = lambda _: None) -> JobSummary:
    """One MergeRollupTask run over ``table``'s OFFLINE half: what is due now, merged and swapped in."""
    from cuvee.pipeline.datasource import InstanceUrls, half_state

    started = time.monotonic()
    summary = JobSummary(MERGE_ROLLUP, table, uuid.uuid4().hex[:12])
    with ControllerClient(controller) as client:
        schema = client.schema(table)
        config = _half_with(client, table, MERGE_ROLLUP)
        merge = task_configs(config, schema).merge_rollup
        assert merge is not None
        if not config.is_realtime and any(level.round_bucket_ms for level in merge.levels) \
                and TableType.REALTIME in client.tables(table):
            raise PipelineError(f"{table} is a hybrid table: rounding its offline half's times "
                                "(roundBucketTimePeriod) would move the time boundary under rows the realtime half "
                                "also serves; remove roundBucketTimePeriod from its MergeRollupTask")
        deep_store_uri = client.deep_store_uri()
        watermarks = dict((client.tasks(table).get(MERGE_ROLLUP) or {}).get("watermarks") or {})
        half = half_state(client, table, config.table_type, config.name_with_type, None, InstanceUrls(client))
        step = millis_per_value(schema, config.time_column)
        spans = committed_spans(half.records, half.ideal, half.hidden, step)
        plan = plan_merges(merge, spans, watermarks, int(time.time() * 1000) if now_ms is None else now_ms)
        summary.watermarks = dict(plan.watermarks)
        client.task_started(table, MERGE_ROLLUP, summary.run_id, job_owner())
        try:
            if plan.tasks:
                sources = {s.segment: s for s in plan_sources(half, include_consuming=False, predicates=(),
                                                               time_spec=None)}
                work = [_merge_work(task, sources, merge, config, schema, deep_store_uri, summary.run_id, step)
                        for task in plan.tasks]
                progress(f"merging {len(plan.segments)} segment(s) in {len(work)} Spark task(s)")
                built, rows_in = _build_on_spark(spark, work)
                summary.tasks, summary.segments_in, summary.rows_in = len(work), len(plan.segments), rows_in
                summary.segments_out, summary.rows_out = len(built), sum(int(b["totalDocs"]) for b in built)
                _swap(client, config, list(plan.segments), built, summary, deep_store_uri, progress)
            summary.status = "SUCCEEDED" if plan.tasks else "NOTHING_TO_DO"
            summary.message = f"{plan.skipped} due window(s) needed no merge" if plan.skipped else ""
        except Exception as exc:
            if summary.lineage_entry is None and not summary.swapping:
                discard_run(deep_store_uri, config.name_with_type, summary.run_id)  # stored by tasks, never pushed
            summary.status, summary.message, summary.watermarks = "FAILED", failure_reason(exc, summary.run_id), {}
            report_run(client, table, summary, started)
            raise
        report_run(client, table, summary, started)
    return summary


def _half_with(client: ControllerClient, table: str, task_type: str) -> TableConfig:
    """The half of ``table`` whose config has ``task_type`` (PipelineError when none has)."""
    for config in client.tables(table).values():
        if task_type in task_configs(config).types:
            return config
    raise PipelineError(f"table {table!r} has no {task_type} in task.taskTypeConfigsMap")


def _swap(client: ControllerClient, config: TableConfig, sources: list[str], built: list[dict[str, Any]],
          summary: JobSummary, deep_store_uri: str, progress: Callable[[str], None]) -> None:
    faults.fault(faults.MAINTENANCE_AFTER_BUILD)  # a failure here: run_merge_rollup discards the archives
    progress(f"swapping {len(sources)} segment(s) for {len(built)}")
    summary.swapping = True
    summary.lineage_entry = swap_in(client, config.table_name, sources, built, task_type=summary.task_type,
                                    run_id=summary.run_id, deep_store_uri=deep_store_uri,
                                    table_type=config.table_type)
    faults.fault(faults.MAINTENANCE_AFTER_REPLACE)


def report_run(client: ControllerClient, table: str, summary: JobSummary, started: float) -> None:
    summary.seconds = time.monotonic() - started
    try:
        client.task_finished(table, summary.task_type, summary.report())
    except PipelineError as exc:
        if summary.status != "FAILED":
            raise  # the work is in but the watermarks are not: the rerun finds nothing left and moves them
        log.warning("could not report the failed run %s: %s", summary.run_id, exc)


def _merge_work(task: MergeTask, sources: dict[str, SegmentSource], merge: MergeRollupConfig, config: TableConfig,
                schema: Schema, deep_store_uri: str, run_id: str, step: float | None) -> MergeWork:
    missing = [name for name in task.segments if name not in sources]
    if missing:
        raise PipelineError(f"segments {', '.join(missing[:3])} have no record; run the job again")
    level = merge.level(task.level)
    spec = BuildSpec(config.to_json(), schema.to_json(), deep_store_uri, fingerprint=run_id[:8],
                     rows_per_segment=level.max_records_per_segment, run_id=run_id, name_prefix=task.name_prefix)
    round_units = None
    if level.round_bucket_ms and step:
        round_units = max(1, int(level.round_bucket_ms // step))
    return MergeWork(task, tuple(sources[name] for name in task.segments), level,
                     {c: a.value for c, a in merge.aggregations.items()}, spec, round_units)


def _build_on_spark(spark: SparkSession, work: list[MergeWork]) -> tuple[list[dict[str, Any]], int]:
    """Each MergeWork in its own Spark task; returns the built segments' metadata and the rows read."""
    results = spark.sparkContext.parallelize(work, len(work)).mapPartitions(_run_tasks).collect()
    built = [meta for kind, meta in results if kind == "segment"]
    rows_in = sum(int(meta["rows"]) for kind, meta in results if kind == "read")
    return built, rows_in


def _run_tasks(items: Iterator[MergeWork]) -> Iterator[tuple[str, dict[str, Any]]]:
    for work in items:
        yield from merge_task(work)


def merge_task(work: MergeWork) -> Iterator[tuple[str, dict[str, Any]]]:
    """Inside a Spark task: read, merge, build. Yields ("read", {"rows": n}) then ("segment", metadata)…"""
    from cuvee.maintenance.config import Aggregation
    from cuvee.pipeline.scan import read_segment

    schema, table = work.spec.schema, work.spec.table
    parts = [read_segment(source, schema.fields, deep_store_uri=work.spec.deep_store_uri,
                          timeout_seconds=READ_TIMEOUT_SECONDS) for source in work.sources]
    rows = pa.concat_tables([p.cast(schema.arrow_schema()) for p in parts])
    yield "read", {"rows": rows.num_rows}
    merged = merge_rows(rows, schema, work.level.merge_type, time_column=table.time_column,
                        round_units=work.round_units,
                        aggregations={c: Aggregation(a) for c, a in work.aggregations.items()})
    if merged.num_rows == 0:
        return
    batch = merged.combine_chunks().to_batches()[0]
    _, partition = bucket_and_partition(batch, table, schema)
    bucket = pa.array([work.task.window_start_ms] * batch.num_rows, pa.int64())
    staged = pa.Table.from_batches([batch]).append_column(BUCKET, bucket).append_column(PART, partition)
    for meta in build_groups(grouped(staged).to_batches(), work.spec):
        yield "segment", meta


def job_owner() -> str:
    return f"{socket.gethostname()}:{__name__}"


def failure_reason(exc: BaseException, run_id: str) -> str:
    """What the controller (and every READ user) is told: a Cuvee error's own message; for anything else (a
    Spark, DuckDB or OS error, whose text may carry paths and internals) only its kind and the run."""
    if isinstance(exc, CuveeError):
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return text[:2000]
    return f"the job failed ({type(exc).__name__}); the job's own log has the details (run {run_id})"


def discard_run(deep_store_uri: str, table: str, run_id: str) -> None:
    """Delete the archives this run's tasks stored (``<table>/<segment>.<run_id>.tar.zst``) when it failed before
    its swap: no record references them. Every maintenance job (merge, realtime-to-offline, upsert compaction)
    calls it for a failure before its swap began, e.g. a Spark stage that failed after some tasks had stored their
    archives. A failure here only leaks unserved objects."""
    try:
        deep = open_deepstore(deep_store_uri)
        keys = [k for k in deep.list(f"{table}/") if k.endswith(f".{run_id}{ARCHIVE_SUFFIX}")]
        for key in keys:
            deep.delete(key)
    except (CuveeError, OSError) as exc:
        log.warning("could not delete the archives of failed run %s: %s", run_id, exc)


def _realtime_to_offline(*args: Any, **kwargs: Any) -> JobSummary:
    from cuvee.maintenance.rto_job import run_realtime_to_offline  # it imports this module

    return run_realtime_to_offline(*args, **kwargs)


def _upsert_compaction(*args: Any, **kwargs: Any) -> JobSummary:
    from cuvee.maintenance.compaction_job import run_upsert_compaction  # it imports this module

    return run_upsert_compaction(*args, **kwargs)


JOBS: dict[str, Callable[..., JobSummary]] = {MERGE_ROLLUP: run_merge_rollup, REALTIME_TO_OFFLINE: _realtime_to_offline,
                                              UPSERT_COMPACTION: _upsert_compaction}


def tables_with_task(controller: str, task_type: str) -> list[str]:
    """The tables (raw names) whose config has ``task_type``; a table whose task config does not parse is skipped
    with a warning (the controller refuses such configs; an older one may still be stored)."""
    from cuvee.config.errors import ConfigValidationError

    found = []
    with ControllerClient(controller) as client:
        for name in client.table_names():
            for config in client.tables(name).values():
                try:
                    if task_type in task_configs(config).types:
                        found.append(name)
                        break
                except ConfigValidationError as exc:
                    log.warning("skipping %s: %s", name, exc)
    return found
