"""Create, update and delete tables: validation against the schema, then the metadata writes in a safe order."""

from __future__ import annotations

import logging
from typing import Any

from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig, raw_table_name
from cuvee.controller.catalog import Catalog, parse_table
from cuvee.controller.errors import BadRequest, Conflict
from cuvee.controller.pinned import check_config_fits_pinned
from cuvee.controller.segment_deletion import delete_segments
from cuvee.controller.table_setup import delete_table_state, plan_table, read_start_offsets, write_plan

log = logging.getLogger(__name__)


def create_table(store: ClusterStore, doc: Any, now_ms: int) -> TableConfig:
    """Validate, plan (stream offsets, placement: every user error before any write), then write the served
    schema version, the config, the segment records (each naming that schema version) and the ideal state, in that
    order."""
    catalog = Catalog(store)
    table = parse_table(doc)
    catalog.check_against_schema(table)
    name = table.name_with_type
    if catalog.find_table(name) is not None:
        raise Conflict(f"table {name!r} already exists")
    _check_not_hybrid_dim(catalog, table)
    versions = SchemaVersions(store)
    schema_name = schema_name_of(table)
    schema_version = versions.pin(schema_name)  # its consuming segments are built, and its queries served, under it
    plan = None
    if table.is_realtime:
        assert table.stream is not None
        plan = plan_table(store, table, read_start_offsets(table.stream), now_ms, schema_version)
    # the served version before the config: a table never exists without one (a creation cut short between the
    # two leaves a served version of no table, which the next creation's ``serve`` keeps or raises)
    versions.serve(name, schema_name, schema_version)
    catalog.create_table_config(table)
    if plan is not None:
        write_plan(store, name, plan)
        log.info("created %s: %d consuming segment(s)", name, len(plan.segments))
    else:
        store.update_ideal_state(name, lambda ideal: ideal)
    return table


def _check_not_hybrid_dim(catalog: Catalog, table: TableConfig) -> None:
    """A dimension table cannot be half of a hybrid table (Pinot's rule): LOOKUP reads its OFFLINE segments alone."""
    if table.is_realtime:
        twin = catalog.find_table(table.table_name + "_OFFLINE")
        if twin is not None and twin.is_dim_table:
            raise BadRequest(f"table {table.table_name!r} is a dimension table (isDimTable); it cannot have a "
                             "REALTIME part")
    elif table.is_dim_table and catalog.find_table(table.table_name + "_REALTIME") is not None:
        raise BadRequest(f"table {table.table_name!r} has a REALTIME part; a dimension table cannot be half of a "
                         "hybrid table")


def update_table(store: ClusterStore, name: str, doc: Any) -> TableConfig:
    """Replace a table's config (same name and type; checked against its schema). New thresholds apply to the
    segments created from now on."""
    catalog = Catalog(store)
    table = parse_table(doc)
    targets = catalog.resolve(name)
    if table.name_with_type not in targets:
        raise BadRequest(f"tableName {table.name_with_type!r} in the body does not match {name!r} in the path")
    old = catalog.find_table(table.name_with_type)
    if old is not None and old.stream is not None and table.stream is not None:
        if (old.stream.stream_type, old.stream.topic_name) != (table.stream.stream_type, table.stream.topic_name):
            raise BadRequest(f"table {table.name_with_type!r}: the stream type and topic cannot change")
    if old is not None and old.upsert_rules != table.upsert_rules:
        raise BadRequest(f"table {table.name_with_type!r}: upsertConfig's mode, comparison columns, delete "
                         "column, partial strategies, out-of-order handling, TTLs and hashFunction cannot change on "
                         "an existing table (every replica must decide its keys by the same rules); delete the table "
                         "and create it again")
    _check_not_hybrid_dim(catalog, table)
    catalog.check_against_schema(table)
    check_config_fits_pinned(store, table)  # and the schema its consuming segments are built under
    catalog.update_table_config(table)
    return table


def delete_table(store: ClusterStore, name: str, now_ms: int, grace_ms: int) -> list[str]:
    """Delete the table (both types if ``name`` is raw): config first, so commits and the external view writer
    stop touching it, then its segments (ideal state, metadata; deep-store objects after ``grace_ms``), lineage
    and external view."""
    catalog = Catalog(store)
    deleted = []
    for full in catalog.resolve(name):
        catalog.delete_table_config(full)
        delete_segments(store, full, store.segment_names(full), now_ms, grace_ms, "table deleted")
        delete_table_state(store, full)
        store.delete(store.paths.stories(full))
        deleted.append(full)
        log.info("deleted table %s", full)
    if deleted:  # an explicit time boundary belongs to the hybrid table that no longer is one
        store.delete(store.paths.time_boundary(raw_table_name(name)))
    return deleted
