"""UpsertCompactionTask on Spark: committed segments of a REALTIME upsert table rewritten with only the docs
every replica agrees may be kept (``cuvee.maintenance.compaction_plan``), swapped in under their own names.

The driver lists the committed segments old enough (``bufferTimePeriod``), asks every replica holding each of
them ONLINE for its kept docs (``GET /tables/{t}/segments/{s}/validDocIds``, an internal server route) and decides.
Spark tasks (each segment in one) read each segment to rewrite (deep store, else a peer; CRC checked), keep the
agreed docs in their order, and build its copy with the servers' builder under the same LLC name and offsets into
the deep store (``<table>/<segment>.<run>.tar.zst``: never an object a served record points at). The driver then
swaps each copy in (``POST /segments/{t}/{s}/compacted``, a compare-and-set on the CRC compacted): the
controller rewrites the record and names the new CRC in the ideal state, and each replica reloads the segment,
its registry and key map in one step. A segment with no doc kept gets a copy with no doc the same way (not deleted: see
``cuvee.controller.api_compaction``).

Failure: a job that dies before a segment's swap leaves it as it was (a job that fails there deletes the archives
its run stored; one killed leaks them, unserved); one that dies
between two swaps leaves some segments compacted and the others not: every answer is the same either way, and the
next run compacts what is left. A segment that changed since it was planned (409) is skipped, not failed.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pyarrow as pa

from cuvee.auth.client import cluster_headers, user_headers
from cuvee.cluster.records import SegmentRecord
from cuvee.cluster.time_boundary import millis_per_value
from cuvee.config import TableType
from cuvee.controller import faults
from cuvee.maintenance.compaction_plan import (Action, CompactionCandidate, Decision, ReplicaAnswer, candidates,
                                               decide, table_segments)
from cuvee.maintenance.config import UPSERT_COMPACTION, task_configs
from cuvee.maintenance.jobs import JobSummary, discard_run, failure_reason, job_owner, report_run
from cuvee.pipeline.controller_client import ControllerClient, PipelineError
from cuvee.pipeline.ingest import delete_archives
from cuvee.pipeline.read_plan import SegmentSource, plan_sources
from cuvee.pipeline.segments import BuildSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
READ_TIMEOUT_SECONDS = 600.0
ASK_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class CompactWork:
    """One Spark task's share: a segment, where to read it, the docs to keep (a serialised roaring bitmap) and how
    to build its copy (picklable)."""

    source: SegmentSource
    kept: bytes
    total_docs: int
    start_offset: int | None
    end_offset: int | None
    creation_time_ms: int
    spec: BuildSpec


def run_upsert_compaction(spark: SparkSession, controller: str, table: str, *, now_ms: int | None = None,
                          progress: Callable[[str], None] = lambda _: None) -> JobSummary:
    """One UpsertCompactionTask run over ``table``'s REALTIME half."""
    from cuvee.pipeline.datasource import InstanceUrls, half_state

    started = time.monotonic()
    summary = JobSummary(UPSERT_COMPACTION, table, uuid.uuid4().hex[:12])
    with ControllerClient(controller) as client:
        config, schema = client.table(table, TableType.REALTIME), client.schema(table)
        compaction = task_configs(config, schema).upsert_compaction
        if compaction is None:
            raise PipelineError(f"table {table!r} has no UpsertCompactionTask in task.taskTypeConfigsMap")
        full = config.name_with_type
        deep_store_uri = client.deep_store_uri()
        urls = InstanceUrls(client)
        half = half_state(client, table, TableType.REALTIME, full, None, urls)
        step = millis_per_value(schema, config.time_column)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        todo = candidates(compaction, table_segments(half.records, half.ideal, step), now)
        client.task_started(table, UPSERT_COMPACTION, summary.run_id, job_owner())
        try:
            progress(f"asking the replicas of {len(todo)} segment(s) for their valid docs")
            decisions = [decide(compaction, segment, ask_replicas(full, segment, urls.of(segment.replicas)))
                         for segment in todo]
            skipped = [d for d in decisions if d.action is Action.SKIP]
            work = _work(decisions, half, todo, config.to_json(), schema.to_json(), deep_store_uri, summary.run_id)
            built: list[dict[str, Any]] = []
            if work:
                progress(f"compacting {len(work)} segment(s) on Spark")
                built = _build_on_spark(spark, work)
            notes = _swap(client, table, built, {s.name: s for s in todo}, deep_store_uri, summary, progress)
            summary.tasks = max(1, min(len(work), 2 * spark.sparkContext.defaultParallelism)) if work else 0
            summary.status = "SUCCEEDED" if work else "NOTHING_TO_DO"
            summary.message = _message(skipped, notes)
        except Exception as exc:
            if not summary.swapping:  # stored by Spark tasks, never sent (after: _swap cleans up)
                discard_run(deep_store_uri, full, summary.run_id)
            summary.status, summary.message = "FAILED", failure_reason(exc, summary.run_id)
            report_run(client, table, summary, started)
            raise
        report_run(client, table, summary, started)
    return summary


def ask_replicas(table: str, segment: CompactionCandidate, urls: dict[str, str]) -> dict[str, ReplicaAnswer]:
    """Each replica's kept docs of ``segment`` (an answer with ``error`` when it gave none, or a bad one)."""
    from cuvee.server.compaction_routes import VALID_DOC_IDS_PATH

    headers = cluster_headers() or user_headers()
    out: dict[str, ReplicaAnswer] = {}
    for instance in segment.replicas:
        url = urls.get(instance)
        if url is None:
            out[instance] = ReplicaAnswer(instance, error="not live")
            continue
        try:
            response = httpx.get(url + VALID_DOC_IDS_PATH.format(table=table, segment=segment.name), headers=headers,
                                 timeout=ASK_TIMEOUT_SECONDS)
            doc = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("%s/%s: replica %s unreachable: %s", table, segment.name, instance, exc)
            out[instance] = ReplicaAnswer(instance, error=f"unreachable: {type(exc).__name__}")
            continue
        out[instance] = replica_answer(instance, response.status_code, doc)
        if out[instance].error:
            log.warning("%s/%s: replica %s answered %s: %.300s", table, segment.name, instance, out[instance].error,
                        doc.get("error", doc) if isinstance(doc, dict) else doc)
    return out


def replica_answer(instance: str, status: int, doc: Any) -> ReplicaAnswer:
    """A replica's ``validDocIds`` answer read defensively: an error status or a malformed body is an answer with
    a short ``error`` of our own (the run's message is read by READ users: no server text goes into it)."""
    from cuvee.server.compaction_routes import decode_bitmap

    if status != 200:
        return ReplicaAnswer(instance, error=f"HTTP {status}")
    if not isinstance(doc, dict):
        return ReplicaAnswer(instance, error="malformed answer (not a JSON object)")
    crc, total, bitmap = doc.get("crc"), doc.get("totalDocs"), doc.get("bitmap")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (crc, total)) or not isinstance(bitmap, str):
        return ReplicaAnswer(instance, error="malformed answer (crc, totalDocs, bitmap)")
    try:
        kept = tuple(decode_bitmap(bitmap))
    except (ValueError, IndexError, TypeError):
        return ReplicaAnswer(instance, error="malformed answer (bitmap)")
    return ReplicaAnswer(instance, crc, total, kept)


def _work(decisions: list[Decision], half: Any, todo: list[CompactionCandidate], table_json: dict[str, Any],
          schema_json: dict[str, Any], deep_store_uri: str, run_id: str) -> list[CompactWork]:
    from pyroaring import BitMap

    wanted = {d.segment: d for d in decisions if d.action in (Action.COMPACT, Action.EMPTY)}
    if not wanted:
        return []
    sources = {s.segment: s for s in plan_sources(half, include_consuming=False, predicates=(), time_spec=None)}
    spec = BuildSpec(table_json, schema_json, deep_store_uri, fingerprint=run_id[:8], run_id=run_id)
    out = []
    for segment in todo:
        decision = wanted.get(segment.name)
        if decision is None:
            continue
        source, record = sources.get(segment.name), half.records.get(segment.name)
        if source is None or record is None:
            raise PipelineError(f"segment {segment.name} has no record or source; run the job again")
        if source.crc != segment.crc:
            raise PipelineError(f"segment {segment.name} changed while the run was planned; run the job again")
        assert isinstance(record, SegmentRecord)
        out.append(CompactWork(source, BitMap(decision.kept).serialize(), segment.total_docs, record.start_offset,
                               record.end_offset, record.creation_time_ms, spec))
    return out


def _build_on_spark(spark: SparkSession, work: list[CompactWork]) -> list[dict[str, Any]]:
    """The segments spread over at most twice the default parallelism of Spark tasks (many small segments do
    not each pay a task's start)."""
    slices = max(1, min(len(work), 2 * spark.sparkContext.defaultParallelism))
    return spark.sparkContext.parallelize(work, slices).mapPartitions(_run_tasks).collect()


def _run_tasks(items: Iterator[CompactWork]) -> Iterator[dict[str, Any]]:
    for work in items:
        yield compact_task(work)


def compact_task(work: CompactWork) -> dict[str, Any]:
    """Inside a Spark task: read the segment, keep the agreed docs in their order, build the copy under the same
    name and offsets, store its archive; returns the copy's metadata."""
    from pyroaring import BitMap

    from cuvee.deepstore import open_deepstore
    from cuvee.pipeline.convert import from_wire
    from cuvee.pipeline.scan import read_segment
    from cuvee.segment.archive import ARCHIVE_SUFFIX, pack
    from cuvee.segment.builder import build_segment

    schema, table = work.spec.schema, work.spec.table
    name = work.source.segment
    kept = np.asarray(BitMap.deserialize(work.kept).to_array(), np.int64)
    if len(kept):
        rows = read_segment(work.source, schema.fields, deep_store_uri=work.spec.deep_store_uri,
                            timeout_seconds=READ_TIMEOUT_SECONDS).cast(schema.arrow_schema())
        if rows.num_rows != work.total_docs:
            raise PipelineError(f"{name}: read {rows.num_rows} docs, the replicas hold {work.total_docs}")
        rows = rows.take(pa.array(kept))
    else:  # every doc invalid: a copy with no doc, nothing to read
        rows = pa.Table.from_pylist([], schema=schema.arrow_schema())
    columns = [from_wire(rows.column(f.name).combine_chunks(), f) for f in schema.fields]
    rows = pa.Table.from_arrays(columns, schema=schema.arrow_schema())
    deep = open_deepstore(work.spec.deep_store_uri)
    with tempfile.TemporaryDirectory(prefix="cuvee-compact-") as tmp:
        segment = build_segment(rows, schema, table.indexing, tmp, name, start_offset=work.start_offset,
                                end_offset=work.end_offset, table_name=table.name_with_type,
                                time_column=table.time_column, creation_time_ms=work.creation_time_ms)
        archive = pack(segment.path, Path(tmp) / f"{name}{ARCHIVE_SUFFIX}")
        uri = deep.put(archive, work.spec.archive_key(table.name_with_type, name))
        return {"segmentName": name, "downloadUri": uri, "crc": segment.crc, "totalDocs": segment.total_docs,
                "sizeBytes": segment.size_bytes, "rowsIn": work.total_docs}


def _swap(client: ControllerClient, table: str, built: list[dict[str, Any]],
          planned: dict[str, CompactionCandidate], deep_store_uri: str, summary: JobSummary,
          progress: Callable[[str], None]) -> list[str]:
    """Each copy swapped in; returns notes on segments that changed since they were planned (left for the next
    run, their archives deleted)."""
    faults.fault(faults.MAINTENANCE_AFTER_BUILD)  # a failure here: the run's archives go with discard_run
    summary.swapping = True
    notes: list[str] = []
    progress(f"swapping {len(built)} compacted segment(s) in")
    ordered = sorted(built, key=lambda b: str(b["segmentName"]))
    for index, copy in enumerate(ordered):
        name = str(copy["segmentName"])
        meta = {k: v for k, v in copy.items() if k != "rowsIn"}
        try:
            client.swap_compacted(table, name, planned[name].crc, meta)
        except PipelineError as exc:
            if " answered 409" not in str(exc):
                # those never sent; not this one: the controller may have taken it before the answer was lost
                delete_archives(deep_store_uri, ordered[index + 1:])
                raise
            delete_archives(deep_store_uri, [copy])
            log.warning("%s: not swapped in: %s", name, exc)
            notes.append(f"{name}: changed since it was planned (409), left for the next run")
            continue
        summary.segments_in += 1
        summary.segments_out += 1 if int(copy["totalDocs"]) else 0
        summary.rows_in += int(copy["rowsIn"])
        summary.rows_out += int(copy["totalDocs"])
        if index == 0:
            faults.fault(faults.MAINTENANCE_AFTER_PUSH)  # a job killed between two swaps
    faults.fault(faults.MAINTENANCE_AFTER_REPLACE)
    return notes


def _message(skipped: list[Decision], notes: list[str]) -> str:
    parts = [f"{d.segment}: {d.reason}" for d in skipped if d.reason != "no invalid doc"][:5] + notes[:5]
    quiet = sum(1 for d in skipped if d.reason == "no invalid doc")
    if quiet:
        parts.append(f"{quiet} segment(s) had no invalid doc")
    return "; ".join(parts)
