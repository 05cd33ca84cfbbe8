"""Consumption operations on a realtime table: status of its consuming segments (with lag), pause/resume, and
force commit. The REST layer calls these; they raise ``cuvee.controller.errors`` for the user's mistakes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from cuvee.cluster.records import IdealState, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.errors import NotFound
from cuvee.controller.server_client import ServerClient, server_urls
from cuvee.controller.table_setup import latest_offsets, resume_partitions
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName


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
            "rowsFiltered", "error", "uploadError")


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


def set_paused(store: ClusterStore, table: TableConfig, paused: bool, now_ms: Callable[[], int]) -> dict[str, Any]:
    """Set the ideal state's ``paused`` flag (servers stop fetching; commits make no next segment). Resuming
    also gives partitions committed while paused their next consuming segment."""
    name = table.name_with_type
    _ideal(store, name)
    store.update_ideal_state(name, lambda ideal: dataclasses.replace(ideal, paused=paused))
    created = [] if paused else resume_partitions(store, table, now_ms())
    ideal = _ideal(store, name)
    return {
        "paused": ideal.paused,
        "consumingSegments": sorted(consuming_replicas(ideal)),
        "createdSegments": created,
    }


def pause_status(store: ClusterStore, table: TableConfig) -> dict[str, Any]:
    ideal = _ideal(store, table.name_with_type)
    return {"paused": ideal.paused, "consumingSegments": sorted(consuming_replicas(ideal))}


def force_commit(store: ClusterStore, client: ServerClient, table: TableConfig) -> dict[str, Any]:
    """Ask every server hosting a consuming segment of ``table`` to end those segments (reason forceCommit)."""
    name = table.name_with_type
    consuming = consuming_replicas(_ideal(store, name))
    per_server: dict[str, list[str]] = {}
    for seg, instances in consuming.items():
        for inst in instances:
            per_server.setdefault(inst, []).append(seg)
    urls = server_urls(store, set(per_server))
    replies = client.force_commit({i: (urls[i], segs) for i, segs in per_server.items()}, name)
    return {
        "segments": sorted(consuming),
        "servers": {r.instance: ("OK" if r.error is None else r.error) for r in replies},
    }
