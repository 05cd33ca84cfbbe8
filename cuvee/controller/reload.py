"""Reload: every server holding a table's segments serves them under the table's current schema.

``POST /segments/{t}/reload`` (and ``POST /segments/{t}/{segment}/reload``, ``PUT /schemas/{name}?reload=true``)
sends ``POST {server}/tables/{tableWithType}/reload`` to each server the ideal state places the table's (or the
segment's) replicas on, in parallel. What a server does is in ``cuvee.server.reload_routes``: nothing is rewritten;
a column added since a segment was built answers its default null value there from then on (REALTIME committed and
consuming segments, OFFLINE segments alike), and a consuming segment started under an older schema is
force-committed so its successor ingests the new columns' values (Pinot reloads a consuming segment the same way).

A schema is served per table on a server, as Pinot's servers do since they read the latest schema on each segment
load: reloading one segment makes each server holding it serve the current schema for all of the table's segments
it holds; only that segment is force-committed if it is consuming. The reload is done when the call returns
(nothing waits on disk), so the job recorded (``cuvee.controller.jobs``) already holds each server's outcome and
``GET /segments/segmentReloadStatus/{jobId}`` only reads it back. Servers that failed are listed, never fatal.
"""

from __future__ import annotations

import logging
from typing import Any

from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.controller.errors import NotFound
from cuvee.controller.jobs import RELOAD, new_job_id, pinot_metadata, record_job
from cuvee.controller.server_client import ServerClient, server_urls

log = logging.getLogger(__name__)


def reload_table(store: ClusterStore, client: ServerClient, table: str, now_ms: int,
                 segment: str | None = None) -> dict[str, Any]:
    """Reload ``table`` (name with type) on its servers, or only ``segment`` (404 if the ideal state has no
    replica of it). Returns the job: Pinot's ``numMessagesSent``/``reloadJobId``/``reloadJobMetaZKStorageStatus``
    and each server's outcome."""
    found = store.ideal_state(table)
    placed = found.record.segments if found is not None else {}
    per_server: dict[str, list[str]] = {}
    for name, replicas in sorted(placed.items()):
        if segment is not None and name != segment:
            continue
        for instance, state in replicas.items():
            if state in (SegmentState.ONLINE, SegmentState.CONSUMING):
                per_server.setdefault(instance, []).append(name)
    if segment is not None and not per_server:
        raise NotFound(f"Failed to find segment: {segment} in table: {table}")
    job_id = new_job_id()
    urls = server_urls(store, set(per_server))
    # a whole table: each server reloads every segment it holds (none listed), the ones placed since included
    calls = {inst: (urls[inst], [segment] if segment is not None else []) for inst in per_server}
    replies = client.reload(calls, table, job_id)
    servers: dict[str, Any] = {}
    for reply in replies:
        body = reply.body if isinstance(reply.body, dict) else {}
        if reply.error is not None:
            servers[reply.instance] = {"error": reply.error[:300]}
            log.warning("reload %s of %s: server %s failed: %s", job_id, table, reply.instance, reply.error)
            continue
        servers[reply.instance] = {"schemaVersion": body.get("schemaVersion"),
                                   "segments": len(body.get("segments") or []),
                                   "forceCommitted": list(body.get("forceCommitted") or [])}
    stored = record_job(store, table, _job_record(job_id, table, now_ms, per_server, servers, segment))
    log.info("reload %s of %s%s: %d server(s), %d failed", job_id, table, f" segment {segment}" if segment else "",
             len(per_server), sum(1 for s in servers.values() if "error" in s))
    return {"numMessagesSent": str(len(per_server)), "reloadJobId": job_id,
            "reloadJobMetaZKStorageStatus": "SUCCESS" if stored else "FAILED", "servers": servers}


def _job_record(job_id: str, table: str, now_ms: int, per_server: dict[str, list[str]], servers: dict[str, Any],
                segment: str | None) -> dict[str, Any]:
    """What the job's record keeps: counts, the failed servers' errors and the segments force-committed (lists
    that ``jobs.bounded`` may cut; the counts stay whole), never a map of every server."""
    failed = {inst: s["error"] for inst, s in sorted(servers.items()) if "error" in s}
    committed = sorted({name for s in servers.values() for name in s.get("forceCommitted") or []})
    return {"jobId": job_id, "jobType": RELOAD, "tableName": table, "submissionTimeMs": now_ms,
            "messageCount": len(per_server), "segmentCount": sum(len(s) for s in per_server.values()),
            "serverCount": len(servers), "failedServerCount": len(failed),
            "successCount": sum(int(s.get("segments") or 0) for s in servers.values() if "error" not in s),
            "forceCommittedCount": len(committed), "forceCommitted": committed, "failedServers": failed,
            **({"segmentName": segment} if segment is not None else {})}


def reload_status(job: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """Pinot's ``ServerReloadControllerJobStatusResponse`` from a recorded reload job (its servers answered
    before the job was recorded, so the counts are final). Jobs recorded before the counts were kept hold a
    ``servers`` map instead."""
    if "servers" in job:
        servers = job.get("servers") or {}
        failed = sum(1 for s in servers.values() if isinstance(s, dict) and "error" in s)
        done = sum(int(s.get("segments") or 0) for s in servers.values() if isinstance(s, dict) and "error" not in s)
        queried = len(servers)
    else:
        failed, done, queried = (int(job.get(key) or 0) for key in ("failedServerCount", "successCount",
                                                                      "serverCount"))
    total = int(job.get("segmentCount") or 0)
    elapsed = max(0, now_ms - int(job.get("submissionTimeMs") or now_ms)) / 60_000
    return {"timeElapsedInMinutes": elapsed, "estimatedTimeRemainingInMinutes": 0.0 if failed == 0 else -1.0,
            "totalSegmentCount": total, "successCount": done, "totalServersQueried": queried,
            "totalServerCallsFailed": failed, "metadata": pinot_metadata(job)}
