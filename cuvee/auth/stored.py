"""Principals kept in the metadata store (managed with ``/users`` on the controller, ``cuvee.auth.users_api``).

One node per principal under ``ClusterPaths.principals``, holding what a config file's ``[[auth.principals]]``
holds: hashes of the password and token, never the secrets. Every role's auth layer reads them through
``StoredPrincipals``, which re-reads the store every ``principals_refresh_seconds`` in a thread of its own (the
event loop never waits on the store) and moves ``generation`` when anything changed, so the layer's cache of
checked credentials forgets a deleted principal or an old password at once.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from cuvee.auth.config import PrincipalConfig
from cuvee.cluster._json import Fields, RecordFormatError
from cuvee.cluster.records import Record
from cuvee.cluster.store import ClusterStore
from cuvee.errors import CuveeError

log = logging.getLogger(__name__)

MAX_STORED_PRINCIPALS = 1000  # the controller refuses more (each role reads them all on every refresh)


@dataclass(frozen=True)
class PrincipalRecord(Record):
    KIND = "principal"

    config: PrincipalConfig

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {"name": c.name, "password": c.password, "token": c.token, "admin": c.admin,
                "tables": list(c.tables), "permissions": list(c.permissions)}

    @classmethod
    def from_json(cls, doc: Any) -> PrincipalRecord:
        f = Fields(cls.KIND, doc)
        try:
            tables, permissions = f.strings("tables"), f.strings("permissions")
            if not tables or not permissions:  # fail closed: never read a missing list as "everything"
                raise ValueError("tables and permissions must be listed")
            return cls(PrincipalConfig(name=f.string("name"), password=f.string("password", ""),
                                       token=f.string("token", ""), admin=f.boolean("admin", False),
                                       tables=tables, permissions=permissions))
        except ValueError as exc:
            raise RecordFormatError(f"{cls.KIND}: {exc}") from None


class StoredPrincipals:
    """The store's principals as of the last refresh. ``start()`` / ``stop()``; ``refresh()`` reads now."""

    def __init__(self, store: ClusterStore, refresh_seconds: float):
        self.store = store
        self.refresh_seconds = refresh_seconds
        self.generation = 0
        self._by_name: dict[str, PrincipalConfig] = {}
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one read-and-swap at a time: an older read never lands after a newer
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self, name: str) -> PrincipalConfig | None:
        return self._by_name.get(name)

    def all(self) -> tuple[PrincipalConfig, ...]:
        return tuple(self._by_name.values())

    def refresh(self) -> bool:
        """Read every stored principal; True when they changed. A node that does not decode is skipped (logged):
        one bad node never locks everyone out. Reads run one at a time, so a slow periodic read that began before
        a change cannot install what it read after the change was installed."""
        with self._reading:
            found: dict[str, PrincipalConfig] = {}
            for name in self.store.children(self.store.paths.principals)[:MAX_STORED_PRINCIPALS]:
                try:
                    record = self.store.find(PrincipalRecord, self.store.paths.principal(name))
                except RecordFormatError as exc:
                    log.warning("stored principal %r is skipped: %s", name[:128], exc)
                    continue
                if record is not None:
                    found[name] = record.record.config
            with self._lock:
                if found == self._by_name:
                    return False
                self._by_name = found
                self.generation += 1
                return True

    def start(self) -> StoredPrincipals:
        self._refresh_logged()
        self._thread = threading.Thread(target=self._run, name="stored-principals", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stopping.wait(self.refresh_seconds):
            self._refresh_logged()

    def _refresh_logged(self) -> None:
        try:
            self.refresh()
        except (CuveeError, OSError) as exc:  # keep the last known principals; the next round retries
            log.warning("could not read the stored principals (the last ones read stay in force): %s", exc)


__all__ = ["MAX_STORED_PRINCIPALS", "PrincipalRecord", "StoredPrincipals"]
