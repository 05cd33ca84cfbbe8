"""Gathering a realtime table's status: the ideal state, the external view, segment metadata, each consuming
replica's report (``consuming_segments_info``: the servers are asked, the stream's latest offsets read) and the
repair counters, arranged per partition with a health word (``cuvee.status.health``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cuvee.cluster.records import SegmentRecord
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.consumption import consuming_segments_info
from cuvee.controller.errors import BadGateway
from cuvee.controller.server_client import ServerClient
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.status.health import ReplicaFacts, partition_health, replica_error, segment_problems, table_health

RECENT = 3  # committed segments shown per partition


def table_status(store: ClusterStore, servers: ServerClient, table: TableConfig, now_ms: int,
                 repair: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The status of a REALTIME table (see the module docstring). ``repair``: its repair counters, if known."""
    name = table.name_with_type
    found = store.ideal_state(name)
    ideal = found.record if found is not None else None
    view = store.external_view(name)
    view_segments = view.segments if view is not None else {}
    segments = ideal.segments if ideal is not None else {}
    by_partition: dict[int, list[LLCSegmentName]] = {}
    for segment in segments:
        try:
            llc = LLCSegmentName.parse(segment)
        except InvalidSegmentNameError:
            continue
        by_partition.setdefault(llc.partition, []).append(llc)
    consuming: dict[str, list[dict[str, Any]]] = {}
    stream_error = None
    if table.stream is not None and ideal is not None:
        try:
            consuming = consuming_segments_info(store, servers, table)["_segmentToConsumingInfoMap"]
        except BadGateway as exc:  # the stream is down: the status is most needed now, so it answers without it
            stream_error = exc.message
    paused = bool(ideal is not None and ideal.paused)
    partitions = []
    for partition, members in sorted(by_partition.items()):
        ordered = sorted(members, key=lambda m: m.sequence)
        shown = ordered[-(RECENT + 1):]
        latest = ordered[-1].name
        records = {m.name: store.find_segment(name, m.name) for m in shown}
        reports = {r["serverName"]: r for r in consuming.get(latest, [])}
        latest_record = records[latest].record if records[latest] is not None else None
        facts = []
        for instance, state in sorted(segments[latest].items()):
            report = reports.get(instance)
            last = report.get("lastConsumedTimestampMs") if report else None
            facts.append(ReplicaFacts(
                state.value, _state(view_segments.get(latest, {}).get(instance)),
                reachable=report is None or report.get("consumerState") != "NOT_REACHABLE",  # NOT_REPORTED: starting
                records_lag=report.get("recordsLag") if report else None,
                delay_ms=now_ms - last if isinstance(last, int) else None,
                error=replica_error(report) if report else None))
        problems = []
        for member in ordered[:-1]:  # earlier segments: served? (pauseless: the previous one may still commit)
            record = records.get(member.name)
            problems += segment_problems(
                member.name, {i: st.value for i, st in segments[member.name].items()},
                {i: st.value for i, st in view_segments.get(member.name, {}).items()},
                record.record.status.value if record is not None else None,
                record.record.commit_time_ms if record is not None else None, now_ms)
        partitions.append({
            "partition": partition,
            "health": partition_health(facts, paused=paused, consuming=latest in consuming or any(
                s.value == "CONSUMING" for s in segments[latest].values()),
                committed_without_successor=latest_record is not None and latest_record.status.value == "DONE",
                problems=problems),
            "problems": problems,
            "latestUpstreamOffset": next((r.get("latestUpstreamOffset") for r in reports.values()), None),
            "segments": [_segment(m.name, records[m.name].record if records[m.name] else None, segments[m.name],
                                  view_segments.get(m.name, {})) for m in shown],
            "consuming": [_replica(r, now_ms) for r in consuming.get(latest, [])],
            "latestStatus": latest_record.status.value if latest_record is not None else None,
        })
    lost = sum(r.get("messagesLost") or 0 for rows in consuming.values() for r in rows)
    return {
        "table": name,
        "paused": paused,
        "health": table_health([p["health"] for p in partitions]),
        "partitions": partitions,
        "dataLost": {"offsetsSkippedByRepair": (repair or {}).get("offsets_lost", 0),
                     "messagesLostByConsumingReplicas": lost},
        "repair": dict(repair or {}),
        "streamError": stream_error,
    }


def _state(state: Any) -> str | None:
    return getattr(state, "value", None) if state is not None else None


def _segment(name: str, record: SegmentRecord | None, ideal: Mapping[str, Any], view: Mapping[str, Any]
             ) -> dict[str, Any]:
    replicas = {i: {"ideal": _state(s), "view": _state(view.get(i))} for i, s in sorted(ideal.items())}
    if record is None:
        return {"segmentName": name, "status": None, "replicas": replicas}
    return {"segmentName": name, "status": record.status.value, "startOffset": record.start_offset,
            "endOffset": record.end_offset, "totalDocs": record.total_docs, "sizeBytes": record.size_bytes,
            "creationTimeMs": record.creation_time_ms, "commitTimeMs": record.commit_time_ms,
            "downloadUri": record.download_uri, "replicas": replicas}


def _replica(report: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    last = report.get("lastConsumedTimestampMs")
    return {"server": report.get("serverName"), "state": report.get("consumerState"),
            "currentOffset": report.get("currentOffset"), "recordsLag": report.get("recordsLag"),
            "delayMs": now_ms - last if isinstance(last, int) else None,
            **{k: report.get(k) for k in ("rowsPerSecond", "rowsConsumed", "memoryBytes", "memoryByColumn",
                                          "badRecords", "messagesLost", "error", "uploadError",
                                          "decoderUnavailable", "decoderRetries")}}
