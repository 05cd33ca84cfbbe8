"""Schemas and table configs in the metadata store (``ClusterPaths.schema`` / ``.table``), as Pinot's JSON.

Creates use create-if-absent (409 when present), updates compare-and-set against the version read, so two
controllers racing on one config cannot lose a write silently.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from cuvee.cluster.paths import check_name
from cuvee.cluster.schemas import SchemaVersions
from cuvee.cluster.store import ClusterStore
from cuvee.config.names import creation_issues
from cuvee.config.pinot_keys import review_schema, review_table
from cuvee.config import ConfigValidationError, Schema, TableConfig, TableType, raw_table_name, validate_table
from cuvee.controller.errors import BadRequest, Conflict, NotFound
from cuvee.errors import UserError
from cuvee.evolution.compatibility import SchemaDiff, diff_schemas
from cuvee.spi.metastore import NodeExistsError, NoNodeError, VersionConflictError

log = logging.getLogger(__name__)


def parse_schema(doc: Any) -> Schema:
    """A schema sent to be created or updated (its names bounded: ``cuvee.config.names``; a key Cuvee refuses is
    a 400 naming it: ``cuvee.config.pinot_keys``)."""
    try:
        schema = Schema.from_json(doc)
        issues = creation_issues(schema=schema) + review_schema(doc).issues
        if issues:
            raise ConfigValidationError(f"schema {schema.name[:128]!r}", issues)
        return schema
    except ConfigValidationError as exc:
        raise BadRequest.invalid(exc) from None


def parse_table(doc: Any) -> TableConfig:
    """A table config sent to be created or updated (its name bounded: ``cuvee.config.names``; a key Cuvee refuses
    is a 400 naming it: ``cuvee.config.pinot_keys``)."""
    try:
        table = TableConfig.from_json(doc)
        issues = creation_issues(table=table) + review_table(doc).issues
        if issues:
            raise ConfigValidationError("table config", issues)
        return table
    except ConfigValidationError as exc:
        raise BadRequest.invalid(exc) from None


def _encode(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _checked(kind: str, name: str) -> str:
    try:
        return check_name(kind, name)
    except UserError as exc:
        raise BadRequest(str(exc)) from None


class Catalog:
    """Typed access to schemas and table configs of one cluster."""

    def __init__(self, store: ClusterStore):
        self.store = store
        self.meta = store.metastore
        self.paths = store.paths

    # ---- schemas ----

    def schema_names(self) -> list[str]:
        return self.store.children(self.paths.schemas)

    def find_schema(self, name: str) -> Schema | None:
        node = self.meta.exists(self.paths.schema(_checked("schema", name)))
        return None if node is None else Schema.from_json(orjson.loads(node.data))

    def schema(self, name: str) -> Schema:
        schema = self.find_schema(name)
        if schema is None:
            raise NotFound(f"schema {name!r} does not exist")
        return schema

    def create_schema(self, schema: Schema) -> int:
        """Write a new schema and its first version (``cuvee.cluster.schemas``: after the last one of a schema
        deleted under the name); returns the version."""
        try:
            version, _ = SchemaVersions(self.store).write(_checked("schema", schema.name), _encode(schema.to_json()),
                                                          None)
        except NodeExistsError:
            raise Conflict(f"schema {schema.name!r} already exists; use PUT /schemas/{schema.name} to update it") from None
        return version

    def update_schema(self, name: str, schema: Schema, *, force: bool = False) -> SchemaDiff:
        """Replace schema ``name`` by ``schema`` when the tables using it still validate and old segments can
        follow the change (``cuvee.evolution.compatibility``; ``force``: write a backward-incompatible update
        anyway, as Pinot's ``force``, logged). Returns what changed; an unchanged schema is not written."""
        if schema.name != name:
            raise BadRequest(f"schemaName {schema.name!r} in the body does not match {name!r} in the path")
        path = self.paths.schema(_checked("schema", name))
        node = self.meta.exists(path)
        if node is None:
            raise NotFound(f"schema {name!r} does not exist")
        diff = diff_schemas(Schema.from_json(orjson.loads(node.data)), schema)
        issues = []
        for table in self.tables_of(name):
            try:
                validate_table(table, schema)
            except ConfigValidationError as exc:
                issues.extend(exc.issues)
        if not diff.compatible and not force:
            raise BadRequest.invalid(ConfigValidationError(
                f"update of schema {name!r}: it is backward incompatible (only adding columns is allowed; "
                "force=true writes it anyway)", [*diff.incompatible, *issues]))
        if issues:
            raise BadRequest.invalid(ConfigValidationError(f"schema {name!r}: tables using it would break", issues))
        if not diff.compatible:
            log.warning("schema %s: backward-incompatible update written because force=true: %s", name,
                        "; ".join(str(issue) for issue in diff.incompatible))
        if orjson.loads(node.data) != schema.to_json():  # the schema and its next version, in one transaction
            try:
                SchemaVersions(self.store).write(name, _encode(schema.to_json()), node.version)
            except (VersionConflictError, NoNodeError):
                raise Conflict(f"schema {name!r} was changed or deleted concurrently; re-read and retry") from None
        return diff

    def delete_schema(self, name: str) -> None:
        """Its versions stay (``cuvee.cluster.schemas``: a version number always means one schema)."""
        users = [t.name_with_type for t in self.tables_of(name)]
        if users:
            raise Conflict(f"schema {name!r} is used by table(s) {', '.join(users)}; delete them first")
        try:
            self.meta.delete(self.paths.schema(_checked("schema", name)))
        except NoNodeError:
            raise NotFound(f"schema {name!r} does not exist") from None

    # ---- table configs ----

    def table_names(self) -> list[str]:
        """Names with type (``events_REALTIME``), sorted."""
        return self.store.children(self.paths.tables)

    def find_table(self, name_with_type: str) -> TableConfig | None:
        node = self.meta.exists(self.paths.table(_checked("table", name_with_type)))
        return None if node is None else TableConfig.from_json(orjson.loads(node.data))

    def resolve(self, name: str) -> list[str]:
        """The stored names with type that ``name`` (raw or with _REALTIME/_OFFLINE) means; 404 if none."""
        _checked("table", name)
        raw = raw_table_name(name)
        candidates = [name] if raw != name else [raw + t.suffix for t in TableType]
        found = [n for n in candidates if self.meta.exists(self.paths.table(n)) is not None]
        if not found:
            raise NotFound(f"table {name!r} does not exist")
        return found

    def realtime(self, name: str) -> TableConfig:
        """The REALTIME table ``name`` means (404 if it has none)."""
        for full in self.resolve(name):
            table = self.find_table(full)
            if table is not None and table.is_realtime:
                return table
        raise NotFound(f"table {name!r} has no REALTIME part")

    def tables_of(self, schema_name: str) -> list[TableConfig]:
        """Tables whose schema is ``schema_name`` (Pinot's convention: schema name = raw table name)."""
        found = (self.find_table(n) for n in self.table_names() if raw_table_name(n) == schema_name)
        return [t for t in found if t is not None]

    def check_against_schema(self, table: TableConfig) -> Schema:
        schema = self.find_schema(table.table_name)
        if schema is None:
            raise BadRequest(
                f"table {table.name_with_type!r} needs schema {table.table_name!r}; create it first (POST /schemas)"
            )
        try:
            validate_table(table, schema)
        except ConfigValidationError as exc:
            raise BadRequest.invalid(exc) from None
        return schema

    def create_table_config(self, table: TableConfig) -> None:
        try:
            self.meta.create(self.paths.table(table.name_with_type), _encode(table.to_json()))
        except NodeExistsError:
            raise Conflict(f"table {table.name_with_type!r} already exists") from None

    def update_table_config(self, table: TableConfig) -> None:
        path = self.paths.table(table.name_with_type)
        node = self.meta.exists(path)
        if node is None:
            raise NotFound(f"table {table.name_with_type!r} does not exist")
        self._cas(path, _encode(table.to_json()), node.version, f"table {table.name_with_type!r}")

    def delete_table_config(self, name_with_type: str) -> bool:
        try:
            self.meta.delete(self.paths.table(name_with_type))
        except NoNodeError:
            return False
        return True

    def _cas(self, path: str, data: bytes, version: int, what: str) -> None:
        try:
            self.meta.set(path, data, version)
        except (VersionConflictError, NoNodeError):
            raise Conflict(f"{what} was changed or deleted concurrently; re-read and retry") from None
