"""The table configs and schemas a server needs, read from the metadata store when a consumer starts.

A table's schema is the one named by ``segmentsConfig.schemaName`` if given, else the raw table name (Pinot's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig, raw_table_name
from cuvee.errors import CuveeError
from cuvee.spi.metastore import NoNodeError


class TableNotFoundError(CuveeError):
    """The table config or its schema is not in the metadata store."""


@dataclass(frozen=True)
class TableContext:
    config: TableConfig
    schema: Schema
    schema_version: int = -1  # the schema node's version in the metadata store


class TableCatalog:
    """Reads a table's ``TableContext`` fresh each time: it is needed only when a consumer starts, and a fresh read
    means a table config or schema update applies to the next consuming segment without a restart."""

    def __init__(self, store: ClusterStore):
        self._store = store

    def get(self, table_with_type: str) -> TableContext:
        return self._load(table_with_type)

    def _load(self, table_with_type: str) -> TableContext:
        paths = self._store.paths
        config = TableConfig.from_json(self._read(paths.table(table_with_type), f"table config {table_with_type}")[0])
        schema_name = config.segments.extra.get("schemaName") or raw_table_name(table_with_type)
        doc, version = self._read(paths.schema(str(schema_name)), f"schema {schema_name}")
        return TableContext(config, Schema.from_json(doc), version)

    def _read(self, path: str, what: str) -> tuple[object, int]:
        try:
            node = self._store.metastore.get(path)
        except NoNodeError:
            raise TableNotFoundError(f"{what} is not in the metadata store ({path})") from None
        try:
            return orjson.loads(node.data), node.version
        except orjson.JSONDecodeError as exc:
            raise TableNotFoundError(f"{what} at {path} is not JSON: {exc}") from None
