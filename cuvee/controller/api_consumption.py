"""Consumption control of realtime tables: consumingSegmentsInfo, pause/resume (``consumeFrom``), forceCommit
(``partitions``, ``segments``) and its job status."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from cuvee.controller.api_common import readable_job
from cuvee.controller.catalog import Catalog
from cuvee.controller.consumption import (
    consuming_segments_info,
    force_commit,
    force_commit_status,
    pause_status,
    set_paused,
)
from cuvee.controller.consumption_params import ConsumeFrom
from cuvee.controller.jobs import FORCE_COMMIT, find_job
from cuvee.status.table_status import table_status

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.get("/tables/{table}/consumingSegmentsInfo")
    def consuming_info(table: str) -> dict[str, Any]:
        return consuming_segments_info(ctl.store, ctl.servers, Catalog(ctl.store).realtime(table))

    @api.post("/tables/{table}/pauseConsumption")
    def pause(table: str) -> dict[str, Any]:
        ctl.require_leader()
        return set_paused(ctl.store, Catalog(ctl.store).realtime(table), True, ctl.clock_ms)

    @api.post("/tables/{table}/resumeConsumption")
    def resume(table: str, consumeFrom: str | None = None) -> dict[str, Any]:  # noqa: N803 - Pinot's name
        ctl.require_leader()
        start = ConsumeFrom.parse(consumeFrom)
        return set_paused(ctl.store, Catalog(ctl.store).realtime(table), False, ctl.clock_ms, start, ctl.story)

    @api.get("/tables/{table}/status")
    def table_status_route(table: str) -> dict[str, Any]:
        """Per partition: segments and replicas, offsets and lag, rate, memory, errors, and a health word."""
        config = Catalog(ctl.store).realtime(table)
        stats = ctl.repair.stats.get(config.name_with_type)
        return table_status(ctl.store, ctl.servers, config, ctl.clock_ms(),
                            asdict(stats) if stats is not None else None)

    @api.get("/tables/{table}/pauseStatus")
    def status(table: str) -> dict[str, Any]:
        return pause_status(ctl.store, Catalog(ctl.store).realtime(table))

    @api.post("/tables/{table}/forceCommit")
    def force(table: str, partitions: str | None = None, segments: str | None = None) -> dict[str, Any]:
        ctl.require_leader()
        return force_commit(ctl.store, ctl.servers, Catalog(ctl.store).realtime(table), ctl.clock_ms(),
                            partitions=partitions, segments=segments)

    @api.get("/tables/forceCommitStatus/{job_id}")
    def force_status(job_id: str, request: Request) -> dict[str, Any]:
        """READ on the job's table (the auth policy's ``Need.JOB``)."""
        return force_commit_status(ctl.store, readable_job(request, find_job(ctl.store, job_id, FORCE_COMMIT)))

    return api
