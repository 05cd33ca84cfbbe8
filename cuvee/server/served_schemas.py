"""The schema a server serves each table's segments under (``cuvee.evolution.serving``), and when it changes.

The controller records each table's served schema version (``cuvee.cluster.schemas``: at the table's creation and
at each reload, before it calls the servers). A server reads that record when one of the table's segments is
loaded here (``ensure``: consuming or committed, at start too), at each pass of its ideal-state follower over a
table it holds segments of (``ensure`` again: a reload whose call failed here), and when a reload reaches it
(``refresh``), and serves that version, never simply the latest schema. So every server serves the same version: one that held none
of the table's segments during a reload, or was down, or restarted, takes the recorded version with its next
segment, and a schema update changes what is served only when the operator reloads. A column added to the schema
and not reloaded yet is not served: a query naming it is answered with an error that says to reload.

A table created before versions and not reloaded since has no record: it is served under the latest schema read
when its first segment arrived here, and again at each reload, as before versions (a restart reads it again).

Queries read the served schema without I/O (``get``); a read that fails keeps what was served before (logged).
Recorded versions only grow, so a read that raced a reload never moves a table back to an older version.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from cuvee.config import Schema
from cuvee.evolution.serving import ServedSchema
from cuvee.server.tables import TableContext, TableNotFoundError

log = logging.getLogger(__name__)

UNVERSIONED = -1  # the version shown for a table served under its latest schema (no recorded version)


class SchemaSource(Protocol):
    """What ``ServedSchemas`` reads (``cuvee.server.tables.TableCatalog``)."""

    def served_version(self, table_with_type: str) -> tuple[str, int] | None: ...
    def schema_at(self, name: str, version: int) -> Schema: ...
    def get(self, table_with_type: str) -> TableContext: ...


class ServedSchemas:
    """``{table with type: ServedSchema}`` of one server. Thread-safe."""

    def __init__(self, source: SchemaSource):
        self._source = source
        self._lock = threading.Lock()
        self._served: dict[str, ServedSchema] = {}
        self._recorded: set[str] = set()  # tables served under a version the controller recorded

    def get(self, table: str) -> ServedSchema | None:
        """What ``table`` is served under now, or None before any of its segments arrived (views as stored)."""
        with self._lock:
            return self._served.get(table)

    def ensure(self, table: str) -> None:
        """A segment of ``table`` arrives: serve the table's recorded version if this server serves another one
        (or, with none recorded, the latest schema if it serves nothing yet)."""
        try:
            recorded = self._source.served_version(table)
            with self._lock:
                current = self._served.get(table)
                if recorded is None and current is not None:
                    return
                if recorded is not None and table in self._recorded and current is not None \
                        and current.version >= recorded[1]:
                    return
            self._serve(table, recorded)
        except TableNotFoundError as exc:  # the table is being deleted: its segments go too
            log.warning("no schema to serve %s under: %s", table, exc)
        except Exception:  # noqa: BLE001 - the store is unreachable: the next segment, or a reload, reads it
            log.exception("reading the served schema of %s failed; it is served as before", table)

    def refresh(self, table: str) -> ServedSchema:
        """Serve ``table`` under its recorded version (with none, its latest schema) from now on (a reload);
        raises when it cannot be read."""
        return self._serve(table, self._source.served_version(table))

    def _serve(self, table: str, recorded: tuple[str, int] | None) -> ServedSchema:
        if recorded is None:
            context = self._source.get(table)
            served, name = ServedSchema(context.schema, UNVERSIONED), context.schema_name or context.schema.name
        else:
            name, version = recorded
            served = ServedSchema(self._source.schema_at(name, version), version)
        with self._lock:
            before = self._served.get(table)
            if recorded is None and table in self._recorded and before is not None:
                return before  # recorded since this read started
            if recorded is not None and table in self._recorded and before is not None \
                    and before.version > served.version:
                return before  # a newer version was recorded and read meanwhile
            self._served[table] = served
            if recorded is not None:
                self._recorded.add(table)
        if before is None or before.version != served.version:
            log.info("serving %s under schema %s version %s (was %s)", table, name,
                     served.version if recorded is not None else "latest (no version recorded)",
                     "none" if before is None else before.version)
        return served

    def forget(self, table: str) -> None:
        """The table is gone: a table created again under its name starts afresh."""
        with self._lock:
            self._served.pop(table, None)
            self._recorded.discard(table)
