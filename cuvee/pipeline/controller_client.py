"""The batch jobs' one way to talk to the controller (httpx): the table, its schema, where the deep store is, the
table's segments and lineage, and the push with its lineage replace. Every failure is a ``PipelineError`` that
names the URL and the controller's own message, never a traceback."""

from __future__ import annotations

from typing import Any

import httpx

from cuvee.cluster.records import InstanceInfo, SegmentRecord
from cuvee.config import Schema, TableConfig, TableType
from cuvee.errors import UserError
from cuvee.lineage.model import SegmentLineage
from cuvee.auth.client import user_headers
from cuvee.protocol.completion_http import HTTP_PORT_NAME


class PipelineError(UserError):
    """A batch job cannot go on: the message says why (printed as one line by the CLI)."""


class ControllerClient:
    def __init__(self, url: str, *, timeout_seconds: float = 600.0):
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_seconds, headers=user_headers())  # auth from the environment

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, *, missing_ok: bool = False, **kwargs: Any) -> Any:
        """The answer's JSON; with ``missing_ok``, None for a 404."""
        url = self.url + path
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise PipelineError(f"cannot reach the controller at {self.url}: {type(exc).__name__}: {exc}") from None
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise PipelineError(f"{method} {url} answered {response.status_code}: {message[:500]}")
        return response.json() if response.content else None

    # ---- reads ----

    def table(self, name: str, table_type: TableType = TableType.OFFLINE) -> TableConfig:
        parts = self.tables(name)
        if table_type not in parts:
            raise PipelineError(f"table {name!r} has no {table_type.value} part; create it first (POST /tables)")
        return parts[table_type]

    def table_names(self) -> list[str]:
        """Every table the caller may read (raw names)."""
        return [str(n) for n in self._call("GET", "/tables").get("tables") or []]

    def tables(self, name: str) -> dict[TableType, TableConfig]:
        """The halves the table has (one, or both for a hybrid table)."""
        doc = self._call("GET", f"/tables/{name}")
        return {t: TableConfig.from_json(doc[t.value]) for t in TableType if t.value in doc}

    def schema(self, name: str) -> Schema:
        return Schema.from_json(self._call("GET", f"/tables/{name}/schema"))

    def deep_store_uri(self) -> str:
        return str(self._call("GET", "/deepStore")["uri"])

    def segments(self, table: str, table_type: TableType = TableType.OFFLINE) -> list[str]:
        for part in self._call("GET", f"/segments/{table}", params={"type": table_type.value}):
            if table_type.value in part:
                return list(part[table_type.value])
        return []

    def segment_metadata(self, table: str, segment: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/segments/{table}/{segment}/metadata"))

    def segment_records(self, table: str, table_type: TableType) -> dict[str, SegmentRecord]:
        docs = self._call("GET", f"/segments/{table}/metadata", params={"type": table_type.value})
        return {name: SegmentRecord.from_json({k: v for k, v in doc.items() if k != "table"})
                for name, doc in docs.items()}

    def external_view(self, table: str, table_type: TableType) -> dict[str, dict[str, str]]:
        return dict(self._call("GET", f"/tables/{table}/externalview").get(table_type.value) or {})

    def instance_url(self, instance_id: str) -> str | None:
        """The HTTP base URL of a live instance (None: unknown, not live, or without an HTTP port)."""
        doc = self._call("GET", f"/instances/{instance_id}", missing_ok=True)
        if doc is None or not doc.get("live"):
            return None
        info = InstanceInfo.from_json({k: v for k, v in doc.items() if k != "live"})
        return info.url(HTTP_PORT_NAME) if HTTP_PORT_NAME in info.ports else None

    def time_boundary(self, table: str) -> tuple[str, int] | None:
        """A hybrid table's (time column, boundary); None while it has none (no served offline end time)."""
        doc = self._call("GET", f"/tables/{table}/timeBoundary", missing_ok=True)
        if doc is None:
            return None
        value = str(doc["timeValue"])
        try:  # an epoch column's (the reader refuses date-string columns from the schema first: check_splittable)
            return str(doc["timeColumn"]), int(value)
        except ValueError:
            raise PipelineError(f"table {table!r}: the time boundary {value[:64]!r} is not an integer") from None

    def lineage(self, table: str, table_type: TableType = TableType.OFFLINE) -> SegmentLineage:
        return SegmentLineage.from_json(self._call("GET", f"/segments/{table}/lineage",
                                                   params={"type": table_type.value}))

    def ideal_state(self, table: str, table_type: TableType = TableType.OFFLINE) -> dict[str, dict[str, str]]:
        return dict(self._call("GET", f"/tables/{table}/idealstate").get(table_type.value) or {})

    def latest_offsets(self, table: str) -> dict[int, int | None]:
        """The stream's latest offset of each partition the REALTIME half consumes (None: not known), from
        ``consumingSegmentsInfo``."""
        doc = self._call("GET", f"/tables/{table}/consumingSegmentsInfo")
        out: dict[int, int | None] = {}
        for replicas in (doc.get("_segmentToConsumingInfoMap") or {}).values():
            for row in replicas:
                partition, offset = row.get("partition"), row.get("latestUpstreamOffset")
                if isinstance(partition, int):
                    out[partition] = offset if isinstance(offset, int) else out.get(partition)
        return out

    # ---- maintenance tasks ----

    def tasks(self, table: str) -> dict[str, Any]:
        """``GET /tasks/{table}``: per configured task type, its watermarks, what is due, the running and last run."""
        return dict(self._call("GET", f"/tasks/{table}").get("tasks") or {})

    def task_started(self, table: str, task_type: str, run_id: str, by: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/tasks/{table}/{task_type}/start", json={"runId": run_id, "by": by}))

    def task_finished(self, table: str, task_type: str, report: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", f"/tasks/{table}/{task_type}/finish", json=report))

    # ---- the push ----

    def start_replace(self, table: str, segments_from: list[str], segments_to: list[str],
                      custom: dict[str, str], table_type: TableType = TableType.OFFLINE) -> str:
        doc = self._call("POST", f"/segments/{table}/startReplaceSegments", params={"type": table_type.value},
                         json={"segmentsFrom": segments_from, "segmentsTo": segments_to, "customMap": custom})
        return str(doc["segmentLineageEntryId"])

    def push(self, table: str, segments: list[dict[str, Any]], table_type: TableType = TableType.OFFLINE) -> None:
        for start in range(0, len(segments), 1000):
            self._call("POST", "/v2/segments", params={"tableName": table, "tableType": table_type.value},
                       json={"segments": segments[start:start + 1000]})

    def end_replace(self, table: str, entry_id: str, table_type: TableType = TableType.OFFLINE) -> None:
        self._call("POST", f"/segments/{table}/endReplaceSegments",
                   params={"type": table_type.value, "segmentLineageEntryId": entry_id})

    def revert_replace(self, table: str, entry_id: str, table_type: TableType = TableType.OFFLINE) -> None:
        self._call("POST", f"/segments/{table}/revertReplaceSegments",
                   params={"type": table_type.value, "segmentLineageEntryId": entry_id})

    # ---- upsert compaction (cuvee.controller.api_compaction) ----

    def swap_compacted(self, table: str, segment: str, expected_crc: int, built: dict[str, Any]) -> dict[str, Any]:
        """A compacted copy of a committed REALTIME segment replaces it under its name (if its CRC is still
        ``expected_crc``)."""
        return dict(self._call("POST", f"/segments/{table}/{segment}/compacted",
                               json={"expectedCrc": expected_crc, "segment": built}))
