"""Schema versions (``cuvee.cluster.schemas``): every schema write through the controller's catalog stores an
immutable copy under the next version in the same transaction; versions survive the schema's deletion (a schema
created again goes on counting, so a number always means one schema); ``pin`` makes the missing copy of a schema
written without one (a cluster from before versions); a table's served version only grows."""

from __future__ import annotations

import copy

import orjson
import pytest

from cuvee.cluster.errors import RecordNotFoundError
from cuvee.cluster.schemas import SchemaVersionNotFound, SchemaVersions
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema
from cuvee.controller.catalog import Catalog

DOC = {"schemaName": "events", "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}],
       "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}


def _with_column(doc: dict, name: str, default: str = "none") -> dict:
    changed = copy.deepcopy(doc)
    changed["dimensionFieldSpecs"].append({"name": name, "dataType": "STRING", "defaultNullValue": default})
    return changed


def test_each_write_stores_its_version_and_a_deleted_schema_keeps_counting(cluster: ClusterStore) -> None:
    catalog, versions = Catalog(cluster), SchemaVersions(cluster)
    assert catalog.create_schema(Schema.from_json(DOC)) == 0
    added = _with_column(DOC, "color")
    catalog.update_schema("events", Schema.from_json(added))
    catalog.update_schema("events", Schema.from_json(added))  # unchanged: nothing written
    retyped = copy.deepcopy(added)
    retyped["metricFieldSpecs"][0]["dataType"] = "DOUBLE"
    catalog.update_schema("events", Schema.from_json(retyped), force=True)
    assert versions.versions("events") == [0, 1, 2]
    assert [versions.schema_at("events", v).to_json() for v in (0, 1, 2)] == [
        Schema.from_json(d).to_json() for d in (DOC, added, retyped)]
    assert versions.pin("events") == 2  # the current schema is the last version: nothing new

    catalog.delete_schema("events")
    assert versions.versions("events") == [0, 1, 2]  # kept: a record or a cache may name them
    assert catalog.create_schema(Schema.from_json(DOC)) == 3
    assert versions.schema_at("events", 1).to_json() == Schema.from_json(added).to_json()
    with pytest.raises(SchemaVersionNotFound):
        versions.schema_at("events", 4)


def test_pin_stores_the_version_of_a_schema_written_without_one(cluster: ClusterStore) -> None:
    """A schema from before versions (or written by an older controller): its content becomes the next version
    when something first names it, and a write after that goes on from there."""
    versions = SchemaVersions(cluster)
    with pytest.raises(RecordNotFoundError):
        versions.pin("events")
    cluster.metastore.create(cluster.paths.schema("events"), orjson.dumps(DOC))
    assert versions.versions("events") == []
    assert versions.pin("events") == 0 and versions.pin("events") == 0
    assert orjson.loads(versions.data_at("events", 0)) == DOC
    cluster.metastore.set(cluster.paths.schema("events"), orjson.dumps(_with_column(DOC, "c")))  # no copy
    assert versions.pin("events") == 1 and versions.schema_at("events", 1).has_column("c")
    Catalog(cluster).update_schema("events", Schema.from_json(_with_column(_with_column(DOC, "c"), "d")))
    assert versions.versions("events") == [0, 1, 2] and versions.pin("events") == 2


def test_a_write_takes_the_next_free_number(cluster: ClusterStore) -> None:
    """A pin that made a copy between a write's read of the numbers and its transaction: the write takes the next
    number, in a new transaction (nothing half written)."""
    catalog, versions = Catalog(cluster), SchemaVersions(cluster)
    catalog.create_schema(Schema.from_json(DOC))
    cluster.metastore.create(cluster.paths.schema_version("events", 1), orjson.dumps(DOC))  # taken meanwhile
    real = versions.versions
    calls = iter([[0], None])  # the first look misses version 1, as a write racing the pin would

    def racing(name: str) -> list[int]:
        seen = next(calls, None)
        return seen if seen is not None else real(name)

    versions.versions = racing  # type: ignore[method-assign]
    version, _ = versions.write("events", orjson.dumps(_with_column(DOC, "c")),
                                cluster.metastore.get(cluster.paths.schema("events")).version)
    assert version == 2 and real("events") == [0, 1, 2]


def test_a_tables_served_version_only_grows(cluster: ClusterStore) -> None:
    versions = SchemaVersions(cluster)
    assert versions.served("events_REALTIME") is None
    assert versions.serve("events_REALTIME", "events", 3).version == 3
    assert versions.serve("events_REALTIME", "events", 2).version == 3  # a slower reload of an older version
    assert versions.serve("events_REALTIME", "events", 5).version == 5
    assert versions.served("events_REALTIME").to_json() == {"table": "events_REALTIME", "schemaName": "events",
                                                            "version": 5}
