"""The schema a server serves each table's segments under (``cuvee.evolution.serving``), and when it changes.

A table's served schema is read from the metadata store the first time a segment of the table arrives on this
server (at start: the first segment it loads from disk) and again only when the table is reloaded
(``POST /segments/{t}/reload``, which reaches ``refresh`` here). So a schema update changes what this server
serves when the operator says so, on every replica at the same reload, never bit by bit as segments come and go;
and a restarted server serves the current schema, as a restarted Pinot server loads its segments under it. A
column added to the schema and not reloaded yet is not served: a query naming it is answered with an error that
says to reload.

Queries read it without I/O (``get``); a read that fails keeps what was served before (logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from cuvee.evolution.serving import ServedSchema
from cuvee.server.tables import TableContext, TableNotFoundError

log = logging.getLogger(__name__)


class ServedSchemas:
    """``{table with type: ServedSchema}`` of one server. Thread-safe."""

    def __init__(self, read: Callable[[str], TableContext]):
        """``read``: the table's current config and schema from the metadata store (``TableCatalog.get``)."""
        self._read = read
        self._lock = threading.Lock()
        self._served: dict[str, ServedSchema] = {}

    def get(self, table: str) -> ServedSchema | None:
        """What ``table`` is served under now, or None before any of its segments arrived (views as stored)."""
        with self._lock:
            return self._served.get(table)

    def ensure(self, table: str) -> None:
        """A segment of ``table`` arrives: read its schema if this server serves none for it yet."""
        if self.get(table) is not None:
            return
        try:
            self.refresh(table)
        except TableNotFoundError as exc:  # the table is being deleted: its segments go too
            log.warning("no schema to serve %s under: %s", table, exc)
        except Exception:  # noqa: BLE001 - the store is unreachable: the next segment, or a reload, reads it
            log.exception("reading the schema of %s failed; its segments are served as stored", table)

    def refresh(self, table: str) -> ServedSchema:
        """Serve ``table`` under its current schema from now on (a reload); raises when it cannot be read."""
        context = self._read(table)
        served = ServedSchema(context.schema, context.schema_version)
        with self._lock:
            before = self._served.get(table)
            self._served[table] = served
        if before is None or before.version != served.version:
            log.info("serving %s under schema %s version %d (was %s)", table, context.schema.name, served.version,
                     "none" if before is None else before.version)
        return served

    def forget(self, table: str) -> None:
        """The table is gone: a table created again under its name starts afresh."""
        with self._lock:
            self._served.pop(table, None)
