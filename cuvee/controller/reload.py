"""Reload: every server holding a table's segments serves them under the table's current schema version.

``POST /segments/{t}/reload`` (and ``POST /segments/{t}/{segment}/reload``, ``PUT /schemas/{name}?reload=true``)
first records the table's served schema version (``cuvee.cluster.schemas``: the schema's version now), then sends
``POST {server}/tables/{tableWithType}/reload`` to each server the ideal state places any of the table's segments
on, in parallel. What a server does is in ``cuvee.server.reload_routes``: it serves the recorded version; nothing is
rewritten; a column added since a segment was built answers its default null value there from then on (REALTIME
committed and consuming segments, OFFLINE segments alike), and a consuming segment built under other columns is
force-committed so its successor ingests under the new ones (Pinot reloads a consuming segment the same way).

The served version is the table's, on every server: a server not reached (down, failing, or holding none of the
table's segments then) serves it once it loads one of the table's segments, or at its follower's next pass over
the ideal state (``ideal_state_poll_seconds`` at most) while it holds some (``cuvee.server.served_schemas``), so
replicas never stay on different versions. Reloading one segment records the table's version too and calls every
server holding any of the table's segments; only that segment is force-committed if it is consuming. The reload
is done when the call returns (nothing waits on disk), so the job recorded (``cuvee.controller.jobs``) already
holds each server's outcome and ``GET /segments/segmentReloadStatus/{jobId}`` only reads it back. Servers that
failed are listed, never fatal.
"""

from __future__ import annotations

import logging
from typing import Any

from cuvee.cluster.records import SegmentState
from cuvee.cluster.schemas import SchemaVersions
from cuvee.cluster.store import ClusterStore
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import NotFound
from cuvee.controller.jobs import RELOAD, new_job_id, pinot_metadata, record_job
from cuvee.controller.server_client import ServerClient, server_urls

log = logging.getLogger(__name__)


def reload_table(store: ClusterStore, client: ServerClient, table: str, now_ms: int,
                 segment: str | None = None) -> dict[str, Any]:
    """Reload ``table`` (name with type) on its servers, or only ``segment`` (404 if the ideal state has no
    replica of it). First records the table's served schema version (the schema's version now), then calls every
    server holding any of the table's segments: the served version is the table's, so each of them serves it (with
    ``segment``, only that one is force-committed if it consumes under other columns). Returns the job: Pinot's
    ``numMessagesSent``/``reloadJobId``/``reloadJobMetaZKStorageStatus``, the version and each server's outcome."""
    config = Catalog(store).find_table(table)
    if config is None:
        raise NotFound(f"table {table!r} does not exist")
    found = store.ideal_state(table)
    placed = found.record.segments if found is not None else {}
    per_server: dict[str, list[str]] = {}  # every server holding a segment of the table: the segments reloaded
    for name, replicas in sorted(placed.items()):
        for instance, state in replicas.items():
            if state in (SegmentState.ONLINE, SegmentState.CONSUMING):
                per_server.setdefault(instance, [])
                if segment is None or name == segment:
                    per_server[instance].append(name)
    if segment is not None and not any(per_server.values()):
        raise NotFound(f"Failed to find segment: {segment} in table: {table}")
    served = SchemaVersions(store).serve_current(config)  # before the calls: each server reads it
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
            log.warning("reload %s of %s: server %s failed (it takes schema version %d at its next pass over the "
                        "ideal state, or when it loads a segment of the table): %s", job_id, table, reply.instance,
                        served.version, reply.error)
            continue
        servers[reply.instance] = {"schemaVersion": body.get("schemaVersion"),
                                   "segments": len(body.get("segments") or []),
                                   "forceCommitted": list(body.get("forceCommitted") or [])}
    stored = record_job(store, table, _job_record(job_id, table, now_ms, per_server, servers, segment,
                                                  served.version))
    log.info("reload %s of %s%s: schema %s version %d, %d server(s), %d failed", job_id, table,
             f" segment {segment}" if segment else "", served.schema_name, served.version, len(per_server),
             sum(1 for s in servers.values() if "error" in s))
    return {"numMessagesSent": str(len(per_server)), "reloadJobId": job_id,
            "reloadJobMetaZKStorageStatus": "SUCCESS" if stored else "FAILED", "schemaVersion": served.version,
            "servers": servers}


def _job_record(job_id: str, table: str, now_ms: int, per_server: dict[str, list[str]], servers: dict[str, Any],
                segment: str | None, schema_version: int) -> dict[str, Any]:
    """What the job's record keeps: counts, the failed servers' errors and the segments force-committed (lists
    that ``jobs.bounded`` may cut; the counts stay whole), never a map of every server."""
    failed = {inst: s["error"] for inst, s in sorted(servers.items()) if "error" in s}
    committed = sorted({name for s in servers.values() for name in s.get("forceCommitted") or []})
    return {"jobId": job_id, "jobType": RELOAD, "tableName": table, "submissionTimeMs": now_ms,
            "schemaVersion": schema_version,
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
