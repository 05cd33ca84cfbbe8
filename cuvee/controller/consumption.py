"""Consumption operations on a realtime table: status of its consuming segments (with lag), pause/resume (with
Pinot's ``consumeFrom``), and force commit (of all, or some partitions or segments). The REST layer calls these;
they raise ``cuvee.controller.errors`` for the user's mistakes (parameters: ``consumption_params``)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Callable
from typing import Any

from cuvee.cluster.records import IdealState, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.consumption_params import ConsumeFrom, commit_targets
from cuvee.controller.errors import Conflict, NotFound
from cuvee.controller.jobs import FORCE_COMMIT, new_job_id, pinot_metadata, record_job
from cuvee.controller.server_client import ServerClient, server_urls
from cuvee.controller.table_setup import latest_offsets, latest_segments, resume_partitions, stream_offsets
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.story import StoryWriter

log = logging.getLogger(__name__)


def consuming_replicas(ideal: IdealState) -> dict[str, list[str]]:
    """Consuming segment -> the instances that should be consuming it."""
    return {
        seg: sorted(i for i, s in replicas.items() if s is SegmentState.CONSUMING)
        for seg, replicas in sorted(ideal.segments.items())
        if SegmentState.CONSUMING in replicas.values()
    }


def _ideal(store: ClusterStore, table: str) -> IdealState:
    found = store.ideal_state(table)
    if found is None:
        raise NotFound(f"table {table} has no ideal state")
    return found.record


# what a server reports of a consuming segment beyond Pinot's keys (cuvee status uses them)
_DETAILS = ("rowsConsumed", "rowsPerSecond", "memoryBytes", "memoryByColumn", "badRecords", "messagesLost",
            "rowsFiltered", "error", "uploadError", "decoderUnavailable", "decoderRetries")


def consuming_segments_info(store: ClusterStore, client: ServerClient, table: TableConfig) -> dict[str, Any]:
    """Per consuming segment: each replica's state and offset (asked from the servers), the stream's latest
    offset and the lag in records. Servers that fail are listed, not fatal."""
    name = table.name_with_type
    assert table.stream is not None
    consuming = consuming_replicas(_ideal(store, name))
    servers = {inst for insts in consuming.values() for inst in insts}
    replies = client.consuming_info(server_urls(store, servers), name)
    reported: dict[tuple[str, str], dict[str, Any]] = {}
    failing: dict[str, str] = {}
    for reply in replies:
        if reply.error is not None:
            failing[reply.instance] = reply.error
            continue
        body = reply.body if isinstance(reply.body, dict) else {}
        entries = body.get("segments")
        if not isinstance(entries, list):
            failing[reply.instance] = "answer has no 'segments' list"
            continue
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("segmentName"), str):
                reported[(entry["segmentName"], reply.instance)] = entry
    partitions = {}
    for seg in consuming:
        try:
            partitions[seg] = LLCSegmentName.parse(seg).partition
        except InvalidSegmentNameError:
            continue
    latest = latest_offsets(table.stream, set(partitions.values())) if partitions else {}
    out: dict[str, list[dict[str, Any]]] = {}
    for seg, instances in consuming.items():
        partition = partitions.get(seg)
        upstream = latest.get(partition) if partition is not None else None
        rows = []
        for inst in instances:
            entry = reported.get((seg, inst))
            current = entry.get("currentOffset") if entry else None
            lag = upstream - current if isinstance(current, int) and upstream is not None else None
            state = entry.get("consumerState") if entry else ("NOT_REACHABLE" if inst in failing else "NOT_REPORTED")
            p = str(partition)
            rows.append({
                "serverName": inst,
                "consumerState": state,
                "partition": partition,
                "currentOffset": current,
                "latestUpstreamOffset": upstream,
                "recordsLag": lag,
                "lastConsumedTimestampMs": entry.get("lastConsumedTimestampMs") if entry else None,
                **{key: entry.get(key) for key in _DETAILS if entry and key in entry},
                "partitionOffsetInfo": {
                    "currentOffsetsMap": {p: current},
                    "latestUpstreamOffsetMap": {p: upstream},
                    "recordsLagMap": {p: lag},
                },
            })
        out[seg] = rows
    return {
        "_segmentToConsumingInfoMap": out,
        "serversFailingToRespond": len(failing),
        "serverErrors": failing,
    }


def set_paused(store: ClusterStore, table: TableConfig, paused: bool, now_ms: Callable[[], int],
               consume_from: ConsumeFrom | None = None, story: StoryWriter | None = None) -> dict[str, Any]:
    """Set the ideal state's ``paused`` flag (servers stop fetching; commits make no next segment). Resuming
    also gives partitions committed while paused their next consuming segment: from where the last one ended, or,
    with ``consume_from``, from the stream's earliest or latest offset (``_resume_from``)."""
    name = table.name_with_type
    _ideal(store, name)
    created: list[str] = []
    if consume_from is not None:
        created = _resume_from(store, table, consume_from, now_ms(), story)
    store.update_ideal_state(name, lambda ideal: dataclasses.replace(ideal, paused=paused))
    if not paused:
        created += [next_name for next_name, _, _ in resume_partitions(store, table, now_ms())]
    ideal = _ideal(store, name)
    return {
        "paused": ideal.paused,
        "consumingSegments": sorted(consuming_replicas(ideal)),
        "createdSegments": created,
        # Pinot's PauseStatusDetails
        "pauseFlag": ideal.paused,
        "reasonCode": "ADMINISTRATIVE",
        "comment": "Table is paused." if ideal.paused else "Table is unpaused.",
        "timestamp": _iso(now_ms()),
    }


def _resume_from(store: ClusterStore, table: TableConfig, consume_from: ConsumeFrom, now_ms: int,
                 story: StoryWriter | None) -> list[str]:
    """Pinot's ``resumeConsumption?consumeFrom``: each partition's next consuming segment starts at the stream's
    earliest (``smallest``: offsets re-read) or latest (``largest``: offsets skipped) offset. Only for a paused
    table whose partitions have all committed (a consuming segment is paused, not ended: its offsets would decide
    where the next one starts), else 409 and nothing changes. The new segments are placed while the table is
    still paused (no commit or repair places a successor meanwhile: both skip a paused table); the caller then
    resumes. What was skipped or re-read is the caller's explicit choice: logged, and told in each new segment's
    story (``consumeFrom``)."""
    name = table.name_with_type
    raw = table.table_name
    ideal = _ideal(store, name)
    if not ideal.paused:
        raise Conflict(f"consumeFrom applies when resuming a paused table, and {name} is not paused: pause it "
                       f"(POST /tables/{raw}/pauseConsumption), commit its consuming segments (POST "
                       f"/tables/{raw}/forceCommit), then resume with consumeFrom")
    consuming = consuming_replicas(ideal)
    if consuming:
        raise Conflict(f"consumeFrom starts each partition's next consuming segment at the stream's "
                       f"{consume_from.value} offset, but {len(consuming)} segment(s) still consume: "
                       f"{', '.join(sorted(consuming)[:10])}; commit them (POST /tables/{raw}/forceCommit) and "
                       f"resume once GET /tables/{raw}/pauseStatus lists no consuming segment")
    assert table.stream is not None
    partitions = set(latest_segments(ideal))
    offsets = stream_offsets(table.stream, partitions, earliest=consume_from is ConsumeFrom.SMALLEST)
    created = []
    for next_name, done, record in resume_partitions(store, table, now_ms, start_offsets=offsets):
        # told from the stored record (a leftover reused had its start offset set by compare-and-set)
        start, end = record.start_offset, done.end_offset or 0
        assert start is not None  # a consuming segment's record always has one
        # smallest re-reads end - start offsets; when retention removed everything up to past the end, the
        # offsets in between are gone, not re-read: said as lost (largest: always past the end, skipped)
        counts = ({"offsetsSkipped": start - end} if consume_from is ConsumeFrom.LARGEST else
                  {"offsetsReRead": end - start} if start <= end else {"offsetsLost": start - end})
        (what, moved), = counts.items()
        log.warning("%s partition %d: %s consumes from the stream's %s offset %d, not from %d where %s ended: "
                    "%s %d (resumeConsumption?consumeFrom=%s)", name, done.partition, next_name,
                    consume_from.value, start, end, done.segment_name, what, moved, consume_from.value)
        if story is not None:
            story.record(name, next_name, "consumeFrom", consumeFrom=consume_from.value, startOffset=start,
                         previousSegment=done.segment_name, previousEndOffset=end, **counts)
        created.append(next_name)
    return created


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def pause_status(store: ClusterStore, table: TableConfig) -> dict[str, Any]:
    ideal = _ideal(store, table.name_with_type)
    consuming = sorted(consuming_replicas(ideal))
    return {"paused": ideal.paused, "consumingSegments": consuming, "pauseFlag": ideal.paused,
            "comment": "Table is paused." if ideal.paused else "Table is unpaused."}


def force_commit(store: ClusterStore, client: ServerClient, table: TableConfig, now_ms: int, *,
                 partitions: str | None = None, segments: str | None = None) -> dict[str, Any]:
    """Ask the servers hosting the table's consuming segments (all, or those ``partitions`` or ``segments`` name:
    ``consumption_params.commit_targets``) to end them (reason forceCommit); recorded as a job for
    ``GET /tables/forceCommitStatus/{jobId}``."""
    name = table.name_with_type
    ideal = _ideal(store, name)
    consuming = consuming_replicas(ideal)
    targets = commit_targets(consuming, latest_segments(ideal), by_partition=partitions, by_segment=segments)
    per_server: dict[str, list[str]] = {}
    for seg in targets:
        for inst in consuming[seg]:
            per_server.setdefault(inst, []).append(seg)
    urls = server_urls(store, set(per_server))
    replies = client.force_commit({i: (urls[i], segs) for i, segs in per_server.items()}, name)
    job_id = new_job_id()
    stored = record_job(store, name, {"jobId": job_id, "jobType": FORCE_COMMIT, "tableName": name,
                                      "submissionTimeMs": now_ms, "numberOfSegmentsForceCommitted": len(targets),
                                      "segmentsForceCommitted": targets})  # the list cut to the job's bound
    return {
        "forceCommitStatus": "SUCCESS",  # Pinot's answer: the commits are asked for, they end asynchronously
        "jobMetaZKWriteStatus": "SUCCESS" if stored else "FAILED",
        "forceCommitJobId": job_id,
        "segments": targets,
        "servers": {r.instance: ("OK" if r.error is None else r.error) for r in replies},
    }


def force_commit_status(store: ClusterStore, job: dict[str, Any]) -> dict[str, Any]:
    """Pinot's answer: the job's record, and which of its segments are not committed yet (no ONLINE replica).
    A job whose list was cut to its record's bound (``jobs.bounded``) checks the segments it lists, and says how
    many it does not (``numberOfSegmentsNotListed``)."""
    table = str(job.get("tableName"))
    found = store.ideal_state(table)
    placed = found.record.segments if found is not None else {}
    asked = [str(s) for s in job.get("segmentsForceCommitted") or []]
    pending = sorted(s for s in asked if SegmentState.ONLINE not in placed.get(s, {}).values())
    total = job.get("numberOfSegmentsForceCommitted")
    unlisted = max(0, total - len(asked)) if isinstance(total, int) else 0
    return {**pinot_metadata(job), "segmentsYetToBeCommitted": pending,
            "numberOfSegmentsYetToBeCommitted": len(pending),
            **({"numberOfSegmentsNotListed": unlisted} if unlisted else {})}
