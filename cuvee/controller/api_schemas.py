"""``/schemas``: Pinot schemas, validated with cuvee.config; writes are leader-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Request

from cuvee.controller.api_common import readable, require_body
from cuvee.config.pinot_keys import review_schema
from cuvee.controller.api_reload import reload_tables
from cuvee.controller.catalog import Catalog, parse_schema

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    def catalog() -> Catalog:
        return Catalog(ctl.store)

    @api.post("/schemas")
    def create_schema(body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        doc = require_body(body)
        schema = parse_schema(doc)
        catalog().create_schema(schema)
        return {"status": f"{schema.name} successfully added",
                "unrecognizedProperties": review_schema(doc).unrecognized_properties()}

    @api.get("/schemas")
    def list_schemas(request: Request) -> list[str]:
        """The schemas the caller may READ (a schema is named as its table; all when auth is off)."""
        return readable(request, catalog().schema_names())

    @api.get("/schemas/{name}")
    def get_schema(name: str) -> dict[str, Any]:
        return catalog().schema(name).to_json()

    @api.put("/schemas/{name}")
    def update_schema(name: str, body: Any = Body(None), reload: bool = False,
                      force: bool = False) -> dict[str, Any]:
        """Pinot's update: only backward-compatible changes (``cuvee.evolution.compatibility``) unless ``force``;
        ``reload``: then reload the tables using it (``POST /segments/{t}/reload``), so existing segments serve
        the added columns."""
        ctl.require_leader()
        doc = require_body(body)
        diff = catalog().update_schema(name, parse_schema(doc), force=force)
        answer: dict[str, Any] = {"status": f"{name} successfully updated",
                                  "unrecognizedProperties": review_schema(doc).unrecognized_properties(),
                                  "addedColumns": list(diff.added)}
        if reload:
            answer["reloadJobs"] = {table: job for t in catalog().tables_of(name)
                                    for table, job in reload_tables(ctl, t.name_with_type, None).items()}
        return answer

    @api.delete("/schemas/{name}")
    def delete_schema(name: str) -> dict[str, Any]:
        ctl.require_leader()
        catalog().delete_schema(name)
        return {"status": f"Schema {name} deleted"}

    return api
