"""Pinot's reload endpoints: ``POST /segments/{t}/reload``, ``POST /segments/{t}/{segment}/reload`` and
``GET /segments/segmentReloadStatus/{jobId}`` (``cuvee.controller.reload``); reloads are leader-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request

from cuvee.config import TableType, raw_table_name
from cuvee.controller.api_common import readable_job, segment_param, table_type_param
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import BadRequest, NotFound
from cuvee.controller.jobs import RELOAD, find_job
from cuvee.controller.reload import reload_status, reload_table
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.post("/segments/{table}/reload")
    def reload_all(table: str, type: str | None = None,  # noqa: A002 - Pinot's names
                   forceDownload: bool = False) -> dict[str, Any]:  # noqa: N803
        """Every segment of the table (of one half with ``type``) served under the table's current schema."""
        ctl.require_leader()
        _no_force_download(forceDownload)
        details = reload_tables(ctl, table, table_type_param(type))
        return {"status": "Segment reload details: " + orjson.dumps(
            {t: {k: v for k, v in d.items() if k != "servers"} for t, d in details.items()}).decode(),
            "reloadJobs": details}

    @api.post("/segments/{table}/{segment}/reload")
    def reload_one(table: str, segment: str, type: str | None = None,  # noqa: A002
                   forceDownload: bool = False) -> dict[str, Any]:  # noqa: N803
        ctl.require_leader()
        _no_force_download(forceDownload)
        segment_param(segment)
        full = _table_of_segment(Catalog(ctl.store), table, segment, table_type_param(type))
        job = reload_table(ctl.store, ctl.servers, full, ctl.clock_ms(), segment)
        return {"status": f"Submitted reload job id: {job['reloadJobId']}, sent {job['numMessagesSent']} reload "
                          f"messages. Job meta ZK storage status: {job['reloadJobMetaZKStorageStatus']}",
                "reloadJobs": {full: job}}

    @api.get("/segments/segmentReloadStatus/{job_id}")
    def status(job_id: str, request: Request) -> dict[str, Any]:
        """READ on the job's table (the auth policy's ``Need.JOB``)."""
        return reload_status(readable_job(request, find_job(ctl.store, job_id, RELOAD)), ctl.clock_ms())

    return api


def reload_tables(ctl: Controller, table: str, table_type: TableType | None) -> dict[str, dict[str, Any]]:
    """Reload each half of ``table`` (raw or with type; only ``table_type`` when given) that exists."""
    names = [n for n in Catalog(ctl.store).resolve(table)
             if table_type is None or n.endswith(table_type.suffix)]
    if not names:
        raise NotFound(f"table {table!r} has no {table_type.value} part" if table_type else
                       f"table {table!r} does not exist")
    return {name: reload_table(ctl.store, ctl.servers, name, ctl.clock_ms()) for name in names}


def _no_force_download(force_download: bool) -> None:
    if force_download:
        raise BadRequest("forceDownload=true is not supported: a reload never rewrites or re-downloads a segment "
                         "here (a new column is served as its default value at read time); drop it from the call")


def _table_of_segment(catalog: Catalog, table: str, segment: str, table_type: TableType | None) -> str:
    """The half the segment belongs to: ``type``, the table name's suffix, else the segment name (an LLC name is
    a REALTIME segment, as Pinot derives it)."""
    names = catalog.resolve(table)
    if table_type is None and len(names) > 1:
        try:
            LLCSegmentName.parse(segment)
            table_type = TableType.REALTIME
        except InvalidSegmentNameError:
            table_type = TableType.OFFLINE
    wanted = [n for n in names if table_type is None or n.endswith(table_type.suffix)]
    if not wanted:
        raise NotFound(f"table {raw_table_name(table)!r} has no {table_type.value if table_type else ''} part")
    return wanted[0]
