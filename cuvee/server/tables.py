"""The table configs and schemas a server needs, read from the metadata store.

A table's schema is the one named by ``segmentsConfig.schemaName`` if given, else the raw table name (Pinot's rule,
``cuvee.cluster.schemas.schema_name_of``). Three reads:

- ``get``: the table's config and its latest schema (upsert rules; a consuming segment whose record names no schema
  version, written before versions);
- ``schema_at``: one version of a schema (what a consuming segment's record names); versions never change, so
  they are cached;
- ``served``: the schema version the controller recorded for the table's queries (``servedschema/<table>``), None
  for a table created before versions and not reloaded since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from cuvee.cluster.errors import RecordNotFoundError
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.errors import CuveeError
from cuvee.spi.metastore import NoNodeError

_CACHED_VERSIONS = 256  # schema versions kept parsed (a few per table)


class TableNotFoundError(CuveeError):
    """The table config or its schema is not in the metadata store."""


@dataclass(frozen=True)
class TableContext:
    config: TableConfig
    schema: Schema
    schema_name: str = ""


@dataclass(frozen=True)
class ServedVersion:
    """A table's recorded served schema version, and that version's schema."""

    schema_name: str
    version: int
    schema: Schema


class TableCatalog:
    """Reads a table's ``TableContext`` fresh each time (a table config update applies to the next consuming
    segment without a restart), schema versions once."""

    def __init__(self, store: ClusterStore):
        self._store = store
        self._versions = SchemaVersions(store)
        self._lock = threading.Lock()
        self._parsed: OrderedDict[tuple[str, int], Schema] = OrderedDict()

    def get(self, table_with_type: str) -> TableContext:
        """The table's config and its latest schema."""
        config = self.config(table_with_type)
        name = schema_name_of(config)
        doc, _ = self._read(self._store.paths.schema(name), f"schema {name}")
        return TableContext(config, Schema.from_json(doc), name)

    def config(self, table_with_type: str) -> TableConfig:
        doc, _ = self._read(self._store.paths.table(table_with_type), f"table config {table_with_type}")
        return TableConfig.from_json(doc)

    def schema_at(self, name: str, version: int) -> Schema:
        """Version ``version`` of schema ``name`` (TableNotFoundError when no copy of it is stored)."""
        key = (name, version)
        with self._lock:
            if key in self._parsed:
                self._parsed.move_to_end(key)
                return self._parsed[key]
        try:
            schema = self._versions.schema_at(name, version)
        except RecordNotFoundError as exc:
            raise TableNotFoundError(str(exc)) from None
        with self._lock:
            self._parsed[key] = schema
            while len(self._parsed) > _CACHED_VERSIONS:
                self._parsed.popitem(last=False)
        return schema

    def served_version(self, table_with_type: str) -> tuple[str, int] | None:
        """(schema name, version) the controller recorded for the table's queries; None when it recorded none."""
        record = self._versions.served(table_with_type)
        return None if record is None else (record.schema_name, record.version)

    def served(self, table_with_type: str) -> ServedVersion | None:
        recorded = self.served_version(table_with_type)
        if recorded is None:
            return None
        name, version = recorded
        return ServedVersion(name, version, self.schema_at(name, version))

    def _read(self, path: str, what: str) -> tuple[object, int]:
        try:
            node = self._store.metastore.get(path)
        except NoNodeError:
            raise TableNotFoundError(f"{what} is not in the metadata store ({path})") from None
        try:
            return orjson.loads(node.data), node.version
        except orjson.JSONDecodeError as exc:
            raise TableNotFoundError(f"{what} at {path} is not JSON: {exc}") from None
