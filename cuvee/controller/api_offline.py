"""Batch data on the controller (Pinot's REST shapes): segment pushes, segment deletes, segment lineage
(atomic replace), a hybrid table's time boundary, and where the deep store is (pushers write to it directly)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Query, Request
from starlette.concurrency import run_in_threadpool

from cuvee.cluster.records import SegmentState, TimeBoundaryOverride
from cuvee.cluster.time_boundary import boundary_units, compute_time_boundary, expected_offline_segments
from cuvee.config import TableConfig, TableType, raw_table_name
from cuvee.config.string_times import MAX_MILLIS, MIN_MILLIS, clamp_millis, column_string_times, in_range, render
from cuvee.controller import lineage_ops
from cuvee.controller.api_common import segment_param, table_type_param
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import ApiError, BadRequest, NotFound
from cuvee.controller.segment_deletion import delete_segments
from cuvee.controller.segment_push import parse_push, register_segments, store_uploaded_archive
from cuvee.lineage.model import LineageState
from cuvee.lineage.rules import hidden_segments
from cuvee.node.http import read_json

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


class PayloadTooLarge(ApiError):
    status = 413


def _table_type(value: str | None) -> TableType | None:
    return table_type_param(value, TableType.OFFLINE)


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    def table_of(name: str, table_type: TableType) -> TableConfig:
        catalog = Catalog(ctl.store)
        full = raw_table_name(name) + table_type.suffix
        if full not in catalog.resolve(name):
            raise NotFound(f"table {name!r} has no {table_type.value} part")
        config = catalog.find_table(full)
        if config is None:
            raise NotFound(f"table {full!r} does not exist")
        return config

    def offline_table(name: str, type_param: str | None) -> TableConfig:
        table_type = _table_type(type_param)
        if table_type is not TableType.OFFLINE:
            raise BadRequest("segments can be pushed into OFFLINE tables only; a REALTIME table is fed by its stream")
        return table_of(name, TableType.OFFLINE)

    def replaced_table(name: str, type_param: str | None) -> TableConfig:
        """The half a lineage replace works on: OFFLINE, or REALTIME for maintenance jobs merging committed
        segments (never an upsert table's: its keys' valid docs live per segment on the servers)."""
        table_type = _table_type(type_param)
        assert table_type is not None
        table = table_of(name, table_type)
        if table.is_realtime and table.is_upsert:
            raise BadRequest("an upsert table's segments cannot be replaced (UpsertCompactionTask rewrites them in "
                             "place)")
        return table

    def pushed_table(name: str, type_param: str | None, names: list[str]) -> TableConfig:
        """OFFLINE tables take any push; a REALTIME table only the outputs of a replace in progress."""
        if _table_type(type_param) is not TableType.REALTIME:
            return offline_table(name, type_param)
        table = replaced_table(name, type_param)
        lineage = ctl.store.lineage(table.name_with_type)
        pending = {s for e in (lineage.entries.values() if lineage else ()) if e.state is LineageState.IN_PROGRESS
                   for s in e.segments_to}
        if not names or set(names) - pending:
            raise BadRequest("a REALTIME table is fed by its stream; it takes pushes only of segments a replace in "
                             "progress names in segmentsTo (maintenance jobs' merged segments)")
        return table

    @api.get("/deepStore")
    def deep_store() -> dict[str, Any]:
        if ctl.deep_store is None:
            raise NotFound("this controller has no deep store configured")
        return {"uri": ctl.deep_store.root_uri}

    async def push(request: Request, table_name: str | None, table_type: str | None) -> dict[str, Any]:
        ctl.require_leader()
        if not table_name:
            raise BadRequest("the tableName query parameter is required")
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("multipart/form-data"):
            return await tar_push(request, offline_table(table_name, table_type))
        try:
            body = await read_json(request)
        except ValueError:
            raise BadRequest("a metadata push body must be JSON; a tar push is multipart/form-data") from None
        pushed = parse_push(body)
        table = pushed_table(table_name, table_type, [p.name for p in pushed])
        # blocking (deep-store checks, metadata writes): off the event loop, which also serves segment completion
        names = await run_in_threadpool(register_segments, ctl.store, ctl.deep_store, table, pushed, ctl.clock_ms(),
                                        _grace_ms())
        return {"status": f"pushed {len(names)} segment(s) into {table.name_with_type}", "segments": names}

    async def tar_push(request: Request, table: TableConfig) -> dict[str, Any]:
        limit = ctl.config.max_upload_bytes
        form = await request.form(max_files=1, max_fields=4)
        try:
            files = [v for v in form.values() if hasattr(v, "read")]
            if len(files) != 1:
                raise BadRequest("a tar push sends exactly one file part: the segment's archive (.tar.zst or .tar.gz)")
            upload: Any = files[0]
            with tempfile.TemporaryDirectory(prefix="cuvee-upload-") as tmp:
                archive = Path(tmp) / "segment.archive"
                size = 0
                with open(archive, "wb") as out:
                    while chunk := await upload.read(1 << 20):
                        size += len(chunk)
                        if size > limit:
                            raise PayloadTooLarge(f"the segment archive is over max_upload_bytes ({limit} bytes); "
                                                  "use a metadata push for large segments")
                        out.write(chunk)
                ctl.received_segment_bytes += size
                pushed = await run_in_threadpool(store_uploaded_archive, ctl.deep_store, table, archive)
        finally:
            await form.close()
        names = await run_in_threadpool(register_segments, ctl.store, ctl.deep_store, table, [pushed],
                                        ctl.clock_ms(), _grace_ms())
        return {"status": f"pushed segment {names[0]} into {table.name_with_type}", "segments": names}

    @api.post("/v2/segments")
    async def push_v2(request: Request, tableName: str | None = None,  # noqa: N803 - Pinot's parameter names
                      tableType: str | None = None) -> dict[str, Any]:  # noqa: N803
        return await push(request, tableName, tableType)

    @api.post("/segments")
    async def push_v1(request: Request, tableName: str | None = None,  # noqa: N803
                      tableType: str | None = None) -> dict[str, Any]:  # noqa: N803
        return await push(request, tableName, tableType)

    @api.delete("/segments/{table}/{segment}")
    def delete_one(table: str, segment: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002
        ctl.require_leader()
        segment_param(segment)
        for table_type in ([_table_type(type)] if type else [TableType.OFFLINE, TableType.REALTIME]):
            assert table_type is not None
            full = raw_table_name(table) + table_type.suffix
            if full not in Catalog(ctl.store).resolve(table):
                continue
            if ctl.store.find_segment(full, segment) is not None or _in_ideal_state(full, segment):
                _refuse_consuming(full, segment)
                delete_segments(ctl.store, full, [segment], ctl.clock_ms(), _grace_ms(), "deleted by request")
                return {"status": f"Segment {segment} deleted"}
        raise NotFound(f"segment {segment!r} of table {table!r} does not exist")

    @api.delete("/segments/{table}")
    def delete_all(table: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002
        ctl.require_leader()
        if type is None:
            raise BadRequest("type=OFFLINE (or REALTIME) is required to delete all of a table's segments")
        table_type = _table_type(type)
        assert table_type is not None
        full = table_of(table, table_type).name_with_type
        if table_type is TableType.REALTIME:
            raise BadRequest("deleting every segment of a REALTIME table would stop its consumption; "
                             "delete committed segments one by one, or drop the table")
        ideal = ctl.store.ideal_state(full)
        names = set(ideal.record.segments) if ideal else set()
        names.update(ctl.store.segment_names(full))
        deleted = delete_segments(ctl.store, full, sorted(names), ctl.clock_ms(), _grace_ms(), "deleted by request")
        return {"status": f"All segments of table {full} deleted", "segments": deleted}

    def _in_ideal_state(full: str, segment: str) -> bool:
        ideal = ctl.store.ideal_state(full)
        return ideal is not None and segment in ideal.record.segments

    def _refuse_consuming(full: str, segment: str) -> None:
        ideal = ctl.store.ideal_state(full)
        record = ctl.store.find_segment(full, segment)
        consuming = record is not None and record.record.is_consuming
        if ideal is not None and SegmentState.CONSUMING in ideal.record.segments.get(segment, {}).values():
            consuming = True
        if consuming:
            raise BadRequest(f"segment {segment} is consuming; it can be deleted once committed")

    def _grace_ms() -> int:
        return round(ctl.config.deletion_grace_seconds * 1000)

    # ---- lineage ----

    @api.get("/segments/{table}/lineage")
    def lineage(table: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002
        table_type = _table_type(type)
        assert table_type is not None
        full = table_of(table, table_type).name_with_type
        found = ctl.store.lineage(full)
        return found.to_json() if found is not None else {"tableName": full, "lineageEntries": {}}

    @api.post("/segments/{table}/startReplaceSegments")
    def start_replace(table: str, type: str | None = None, forceCleanup: bool = True,  # noqa: A002,N803
                      body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        full = replaced_table(table, type).name_with_type
        entry_id = lineage_ops.start_replace(ctl.store, full, body, ctl.clock_ms(), force_cleanup=forceCleanup,
                                             deletion_grace_ms=_grace_ms())
        return {"segmentLineageEntryId": entry_id}

    @api.post("/segments/{table}/endReplaceSegments")
    def end_replace(table: str, segmentLineageEntryId: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002,N803
        ctl.require_leader()
        full = replaced_table(table, type).name_with_type
        lineage_ops.end_replace(ctl.store, full, segmentLineageEntryId, ctl.clock_ms(),
                                serve_timeout_seconds=ctl.config.lineage_end_timeout_seconds)
        return {"status": f"lineage entry {segmentLineageEntryId} completed"}

    @api.post("/segments/{table}/revertReplaceSegments")
    def revert_replace(table: str, segmentLineageEntryId: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002,N803
        ctl.require_leader()
        full = replaced_table(table, type).name_with_type
        lineage_ops.revert_replace(ctl.store, full, segmentLineageEntryId, ctl.clock_ms(),
                                   deletion_grace_ms=_grace_ms())
        return {"status": f"lineage entry {segmentLineageEntryId} reverted"}

    # ---- time boundary ----

    @api.get("/tables/{table}/timeBoundary")
    def time_boundary(table: str) -> dict[str, Any]:
        offline = table_of(table, TableType.OFFLINE)
        table_of(table, TableType.REALTIME)
        column = offline.time_column
        if column is None:
            raise NotFound(f"table {table!r} has no time column, so no time boundary")
        schema = Catalog(ctl.store).schema(offline.table_name)
        times = column_string_times(schema, column)

        def answer(value: int) -> dict[str, Any]:  # Pinot's shape: the value in the column's own format
            return {"timeColumn": column,
                    "timeValue": render(clamp_millis(value), times.pattern) if times else str(value)}

        override = ctl.store.time_boundary_override(offline.table_name)
        if override is not None:
            return answer(override)
        units = boundary_units(schema, column)
        if units is None:
            raise NotFound(f"time column {column!r} is not an epoch, TIMESTAMP or readable date-string column; "
                           "no computed boundary")
        full = offline.name_with_type
        ideal = ctl.store.ideal_state(full)
        view = ctl.store.external_view(full)
        records = {}
        for name in ideal.record.segments if ideal is not None else ():
            found = ctl.store.find_segment(full, name)
            records[name] = found.record if found is not None else None
        expected = expected_offline_segments(
            ideal.record.segments if ideal is not None else {}, view.segments if view is not None else {},
            hidden_segments(ctl.store.lineage(full)),
            {name: r.commit_time_ms if r is not None else None for name, r in records.items()},
            ctl.clock_ms(), int(ctl.config.new_segment_grace_seconds * 1000))
        ends = [r.time_max if (r := records[name]) is not None else None for name in expected]
        value = compute_time_boundary(ends, units[0], offline.push_frequency, units[1])
        if value is None:
            raise NotFound(f"table {table!r} has no served offline segment with an end time yet")
        return answer(value)

    @api.post("/tables/{table}/timeBoundary")
    def set_time_boundary(table: str, timeValue: int) -> dict[str, Any]:  # noqa: N803
        ctl.require_leader()
        offline = table_of(table, TableType.OFFLINE)
        table_of(table, TableType.REALTIME)
        if not _INT64_MIN <= timeValue <= _INT64_MAX:
            raise BadRequest(f"timeValue must be a 64-bit integer, got {timeValue}")
        column = offline.time_column
        if column is None:
            raise BadRequest(f"table {table!r} has no time column, so no time boundary")
        schema = Catalog(ctl.store).schema(offline.table_name)
        if boundary_units(schema, column) is None:  # e.g. a zoned date pattern: servers could not compare with it
            raise BadRequest(f"time column {column!r} is not an epoch, TIMESTAMP or readable date-string column; "
                             "a time boundary cannot split it")
        if column_string_times(schema, column) is not None and not in_range(timeValue):
            raise BadRequest(f"timeValue of the date-string column {column!r} is epoch milliseconds from "
                             f"{MIN_MILLIS} to {MAX_MILLIS} (years 0001 to 9999), got {timeValue}")
        ctl.store.put(ctl.store.paths.time_boundary(offline.table_name),
                      TimeBoundaryOverride(offline.table_name, timeValue))
        return {"status": f"time boundary of {offline.table_name} set to {timeValue}"}

    @api.delete("/tables/{table}/timeBoundary")
    def clear_time_boundary(table: str) -> dict[str, Any]:
        ctl.require_leader()
        offline = table_of(table, TableType.OFFLINE)
        deleted = ctl.store.delete(ctl.store.paths.time_boundary(offline.table_name))
        return {"status": f"time boundary of {offline.table_name} {'cleared' if deleted else 'was not set'}"}

    return api
