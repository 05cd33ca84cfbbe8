"""``/segments``, ``/instances`` and ``/health``: read-only views any controller serves."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from cuvee.cluster.paths import check_name
from cuvee.cluster.records import InstanceInfo
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import BadRequest, NotFound
from cuvee.errors import UserError
from cuvee.story import read_story

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "OK", "leader": ctl.is_leader, "leaderUrl": ctl.leader_url(), "instance": ctl.instance_id,
                "receivedSegmentBytes": ctl.received_segment_bytes + ctl.repair.received_bytes}

    @api.get("/segments/{table}")
    def segments(table: str, type: str | None = None) -> list[dict[str, list[str]]]:  # noqa: A002 - Pinot's name
        out = []
        wanted = type.upper() if type else None
        if wanted not in (None, "OFFLINE", "REALTIME"):
            raise BadRequest(f"type must be OFFLINE or REALTIME, got {type!r}")
        for full in Catalog(ctl.store).resolve(table):
            if wanted and not full.endswith("_" + wanted):
                continue
            ideal = ctl.store.ideal_state(full)
            names = set(ideal.record.segments) if ideal else set()
            names.update(ctl.store.segment_names(full))
            out.append({full.rsplit("_", 1)[1]: sorted(names)})
        return out

    @api.get("/segments/{table}/metadata")
    def table_segments_metadata(table: str, type: str | None = None) -> dict[str, dict[str, Any]]:  # noqa: A002
        """Every segment record of the table (or of one half), by name: one call for a reader planning a scan."""
        wanted = type.upper() if type else None
        if wanted not in (None, "OFFLINE", "REALTIME"):
            raise BadRequest(f"type must be OFFLINE or REALTIME, got {type!r}")
        out: dict[str, dict[str, Any]] = {}
        for full in Catalog(ctl.store).resolve(table):
            if wanted and not full.endswith("_" + wanted):
                continue
            for name in ctl.store.segment_names(full):
                found = ctl.store.find_segment(full, name)
                if found is not None:  # deleted between the listing and the read
                    out[name] = {**found.record.to_json(), "table": full}
        return out

    @api.get("/segments/{table}/{segment}/story")
    def segment_story(table: str, segment: str) -> dict[str, Any]:
        """What every role did to the segment, oldest first (``cuvee.story``)."""
        names = Catalog(ctl.store).resolve(table)
        events = [e for name in names for e in read_story(ctl.store, name, segment)]
        return {"segmentName": segment, "events": sorted(events, key=lambda e: e.get("timeMs", 0))}

    @api.get("/segments/{table}/{segment}/metadata")
    def segment_metadata(table: str, segment: str) -> dict[str, Any]:
        try:
            check_name("segment", segment)
        except UserError as exc:
            raise BadRequest(str(exc)) from None
        for full in Catalog(ctl.store).resolve(table):
            found = ctl.store.find_segment(full, segment)
            if found is not None:
                return {**found.record.to_json(), "table": full}
        raise NotFound(f"segment {segment!r} of table {table!r} does not exist")

    @api.get("/instances")
    def instances() -> dict[str, list[str]]:
        return {"instances": ctl.store.children(ctl.store.paths.instances)}

    @api.get("/instances/{instance_id}")
    def instance(instance_id: str) -> dict[str, Any]:
        try:
            check_name("instance", instance_id)
        except UserError as exc:
            raise BadRequest(str(exc)) from None
        found = ctl.store.find(InstanceInfo, ctl.store.paths.instance(instance_id))
        if found is None:
            raise NotFound(f"instance {instance_id!r} does not exist")
        live = ctl.store.metastore.exists(ctl.store.paths.live(instance_id)) is not None
        return {**found.record.to_json(), "live": live}

    @api.put("/instances/{instance_id}/updateTags")
    def update_tags(instance_id: str, tags: str = "") -> dict[str, Any]:
        """Pinot's ``updateTags``: the instance's tags become ``tags`` (comma-separated) and stay so across its
        restarts. New consuming segments go to the servers tagged now at each commit and by repair; committed
        segments move with ``POST /tables/{t}/rebalance``."""
        try:
            check_name("instance", instance_id)
        except UserError as exc:
            raise BadRequest(str(exc)) from None
        wanted = tuple(dict.fromkeys(t.strip() for t in tags.split(",") if t.strip()))
        bad = [t for t in wanted if len(t) > MAX_TAG or not all(c.isalnum() or c in "_-." for c in t)]
        if bad or len(wanted) > MAX_TAGS:
            raise BadRequest(f"tags are up to {MAX_TAGS} names of letters, digits, '_', '-' and '.', at most "
                             f"{MAX_TAG} characters each; refused: {[t[:MAX_TAG] for t in bad][:5]}")
        path = ctl.store.paths.instance(instance_id)
        if ctl.store.find(InstanceInfo, path) is None:
            raise NotFound(f"instance {instance_id!r} does not exist")
        updated = ctl.store.update(InstanceInfo, path,
                                   lambda info: dataclasses.replace(info, tags=wanted, tags_managed=True))
        return {"status": f"tags of {instance_id} updated", **updated.record.to_json()}

    return api


MAX_TAGS = 32
MAX_TAG = 128
