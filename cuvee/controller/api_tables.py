"""``/tables``: table configs (Pinot's shapes), the table's schema, ideal state and external view."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body, Request

from cuvee.config import raw_table_name
from cuvee.config.pinot_keys import review_table
from cuvee.controller.api_common import readable, require_body
from cuvee.controller.catalog import Catalog
from cuvee.controller.table_ops import create_table, delete_table, update_table

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def _type_of(name_with_type: str) -> str:
    return name_with_type.rsplit("_", 1)[1]


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    def catalog() -> Catalog:
        return Catalog(ctl.store)

    @api.post("/tables")
    def post_table(body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        doc = require_body(body)
        table = create_table(ctl.store, doc, ctl.clock_ms())
        return {"status": f"Table {table.name_with_type} successfully added",
                "unrecognizedProperties": review_table(doc).unrecognized_properties()}

    @api.get("/tables")
    def list_tables(request: Request) -> dict[str, Any]:
        """The tables the caller may READ (every table when auth is off)."""
        names = sorted({raw_table_name(n) for n in catalog().table_names()})
        return {"tables": readable(request, names)}

    @api.get("/tables/{table}")
    def get_table(table: str) -> dict[str, Any]:
        cat = catalog()
        out: dict[str, Any] = {}
        for full in cat.resolve(table):
            config = cat.find_table(full)
            if config is not None:
                out[config.table_type.value] = config.to_json()
        return out

    @api.put("/tables/{table}")
    def put_table(table: str, body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        doc = require_body(body)
        updated = update_table(ctl.store, table, doc)
        return {"status": f"Table config updated for {updated.name_with_type}",
                "unrecognizedProperties": review_table(doc).unrecognized_properties()}

    @api.delete("/tables/{table}")
    def drop_table(table: str) -> dict[str, Any]:
        ctl.require_leader()
        deleted = delete_table(ctl.store, table, ctl.clock_ms(), round(ctl.config.deletion_grace_seconds * 1000))
        for name in deleted:  # its repair counters (and their metric series) would otherwise stay, frozen
            ctl.repair.stats.pop(name, None)
        return {"status": f"Tables: {deleted} deleted"}

    @api.get("/tables/{table}/schema")
    def table_schema(table: str) -> dict[str, Any]:
        cat = catalog()
        cat.resolve(table)
        return cat.schema(raw_table_name(table)).to_json()

    @api.get("/tables/{table}/idealstate")
    def ideal_state(table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for full in catalog().resolve(table):
            found = ctl.store.ideal_state(full)
            out[_type_of(full)] = found.record.to_json()["segments"] if found else None
        return out

    @api.get("/tables/{table}/externalview")
    def external_view(table: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for full in catalog().resolve(table):
            view = ctl.store.external_view(full)
            out[_type_of(full)] = view.to_json()["segments"] if view else {}
        return out

    return api
