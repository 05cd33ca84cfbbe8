"""Schema versions, and the schema version each table is served under (DESIGN.md section 3).

``schemas/<name>`` holds a schema's current JSON (what ``GET /schemas/{name}`` answers). Every write of it (create,
update, forced update) also creates an immutable copy ``schemaversions/<name>/<version>`` in the same metadata-store
transaction, the version being one more than the last one written (0 for the first). Two things name a version, so
that every server reads the same schema whenever it reads it:

- a consuming segment's record (``SegmentRecord.schema_version``): the version current when the controller created
  the record; every replica decodes and builds the segment under it, so replicas that started before and after an
  update (or after a restart) still produce byte-identical segments;
- a table's served version (``servedschema/<table>``, ``ServedSchemaVersion``): written by the controller when the
  table is created and at each reload; servers serve queries under it (not the latest schema), read when they load
  one of the table's segments and when a reload reaches them, so a restarted server, or one that held none of the
  table's segments during a reload, serves what its peers serve.

Versions are kept for ever, also when the schema is deleted (a schema created again under the name goes on
counting from the last version), so a version number always means one schema: servers may cache a version's schema
without ever checking it again, and no record or served version can name a copy that is gone. That costs one copy
per schema write; schema writes are operator actions (a few a month), a copy is a few KB. Bounding them would need a
proof that no segment record (consuming, or kept by a paused table), served-version node or server cache names an
old version, which the store cannot give cheaply.

``pin`` is what the controller calls before naming a version: the current schema's version, making its copy first
when the schema node was written without one (a cluster from before versions, or a write by an older controller
during an upgrade), in a transaction that checks the node did not change meanwhile.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import orjson

from cuvee.cluster.errors import CommitConflictError, RecordNotFoundError
from cuvee.cluster.records import ServedSchemaVersion
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig, raw_table_name
from cuvee.spi.metastore import CheckVersion, Create, Node, NodeExistsError, SetData, TransactionFailedError

log = logging.getLogger(__name__)

_ATTEMPTS = 20


class SchemaVersionNotFound(RecordNotFoundError):
    """No copy of that schema version is stored."""


def schema_name_of(config: TableConfig) -> str:
    """The schema a table uses: ``segmentsConfig.schemaName`` if given, else the raw table name (Pinot's rule)."""
    return str(config.segments.extra.get("schemaName") or raw_table_name(config.name_with_type))


class SchemaVersions:
    """Schema writes with their versions, version reads, and tables' served versions, over one cluster's store."""

    def __init__(self, store: ClusterStore):
        self.store = store
        self.meta = store.metastore
        self.paths = store.paths

    # ---- versions -----------------------------------------------------------------------------------------

    def versions(self, name: str) -> list[int]:
        """The versions of schema ``name`` stored, ascending (empty: none written since versions exist)."""
        names = self.store.children(self.paths.schema_versions(name))
        return sorted(int(n) for n in names if n.isascii() and n.isdigit())

    def data_at(self, name: str, version: int) -> bytes:
        node = self.meta.exists(self.paths.schema_version(name, version))
        if node is None:
            raise SchemaVersionNotFound(f"schema {name!r} has no version {version}")
        return node.data

    def schema_at(self, name: str, version: int) -> Schema:
        return Schema.from_json(orjson.loads(self.data_at(name, version)))

    def write(self, name: str, data: bytes, expected_version: int | None) -> tuple[int, Node]:
        """Create the schema node (``expected_version`` None) or compare-and-set it (at ``expected_version``),
        and its copy as the next version, in one transaction. Returns the version and the schema node. Raises what
        the schema node's write alone raises (NodeExistsError; VersionConflictError, NoNodeError)."""
        path = self.paths.schema(name)
        self._make_parent(name)
        for _ in range(_ATTEMPTS):
            version = max(self.versions(name), default=-1) + 1
            first = Create(path, data) if expected_version is None else SetData(path, data, expected_version)
            try:
                written = self.meta.transaction([first, Create(self.paths.schema_version(name, version), data)])
            except TransactionFailedError as exc:
                if exc.failed_op == 1 and isinstance(exc.cause, NodeExistsError):
                    continue  # a pin made that version's copy meanwhile: the next number
                raise exc.cause from None
            node = written[0]
            assert node is not None
            log.info("schema %s: version %d written", name, version)
            return version, node
        raise CommitConflictError(f"schema {name!r}: no free version number in {_ATTEMPTS} attempts")

    def pin(self, name: str) -> int:
        """The version of schema ``name`` as it is now, its copy made first when missing (see the module)."""
        path = self.paths.schema(name)
        for _ in range(_ATTEMPTS):
            node = self.meta.exists(path)
            if node is None:
                raise RecordNotFoundError(f"schema {name!r} does not exist")
            versions = self.versions(name)
            if versions and self._data_or_none(name, versions[-1]) == node.data:
                return versions[-1]
            version = (versions[-1] + 1) if versions else 0
            self._make_parent(name)
            try:
                self.meta.transaction([CheckVersion(path, node.version),
                                       Create(self.paths.schema_version(name, version), node.data)])
            except TransactionFailedError:
                continue  # the schema changed, or another pin made that copy: look again
            log.info("schema %s: its current content had no version (written before schema versions, or by an "
                     "older controller); stored as version %d", name, version)
            return version
        raise CommitConflictError(f"schema {name!r}: changed on each of {_ATTEMPTS} attempts to pin its version")

    def _data_or_none(self, name: str, version: int) -> bytes | None:
        node = self.meta.exists(self.paths.schema_version(name, version))
        return None if node is None else node.data

    def _make_parent(self, name: str) -> None:
        """The parents of the schema node and of its copies (a transaction's creates make no parents)."""
        for path in (self.paths.schemas, self.paths.schema_versions(name)):
            if self.meta.exists(path) is None:
                try:
                    self.meta.create(path)
                except NodeExistsError:
                    pass

    # ---- served versions ----------------------------------------------------------------------------------

    def served(self, table: str) -> ServedSchemaVersion | None:
        """The version ``table`` is served under; None for a table created before versions and not reloaded
        since (servers then serve the latest schema, as they did)."""
        found = self.store.find(ServedSchemaVersion, self.paths.served_schema(table))
        return None if found is None else found.record

    def serve(self, table: str, name: str, version: int) -> ServedSchemaVersion:
        """Record that ``table`` is served under version ``version`` of schema ``name``. Versions only grow, so a
        slower of two racing reloads never moves it back."""

        def update(current: ServedSchemaVersion) -> ServedSchemaVersion:
            if current.schema_name == name and current.version >= version:
                return current
            return replace(current, schema_name=name, version=version)

        initial = ServedSchemaVersion(table, name, version)
        return self.store.update(ServedSchemaVersion, self.paths.served_schema(table), update, initial=initial).record

    def serve_current(self, config: TableConfig) -> ServedSchemaVersion:
        """Serve ``config``'s table under its schema's version now (table creation, reload)."""
        name = schema_name_of(config)
        return self.serve(config.name_with_type, name, self.pin(name))

    def serve_if_missing(self, config: TableConfig) -> ServedSchemaVersion | None:
        """Serve ``config``'s table under its schema's version now if it has no served version (a table created
        before versions, or by a controller that died between the table's config and its served version); the
        leader's repair pass calls it for every table. Returns the version written, None when one was there."""
        if self.served(config.name_with_type) is not None:
            return None
        served = self.serve_current(config)
        log.warning("table %s had no served schema version (created before schema versions, or its creation was "
                    "cut short): now served under %s version %d on every server", config.name_with_type,
                    served.schema_name, served.version)
        return served
