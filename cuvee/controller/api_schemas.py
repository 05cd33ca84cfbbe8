"""``/schemas``: Pinot schemas, validated with cuvee.config; writes are leader-only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Request

from cuvee.controller.api_common import readable, require_body
from cuvee.config.pinot_keys import review_schema
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
    def update_schema(name: str, body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        doc = require_body(body)
        catalog().update_schema(name, parse_schema(doc))
        return {"status": f"{name} successfully updated",
                "unrecognizedProperties": review_schema(doc).unrecognized_properties()}

    @api.delete("/schemas/{name}")
    def delete_schema(name: str) -> dict[str, Any]:
        ctl.require_leader()
        catalog().delete_schema(name)
        return {"status": f"Schema {name} deleted"}

    return api
