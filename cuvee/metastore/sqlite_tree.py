"""The node tree, sessions and change log of the embedded store, as SQL over one connection.

Every function here runs inside a transaction its caller opened (``BEGIN IMMEDIATE`` for writes), so a caller
can compose several of them into one atomic unit (a multi-op transaction, a session sweep). Each write appends
the events it causes to the ``changes`` table, which the pollers of every client turn into watch callbacks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from cuvee.metastore.paths import ancestors, check_deletable, check_path, name_of, parent_of
from cuvee.spi.metastore import (
    ANY_VERSION,
    CheckVersion,
    Create,
    Delete,
    MetadataStoreError,
    Node,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SetData,
    VersionConflictError,
    WatchEventType,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path    TEXT PRIMARY KEY,
    parent  TEXT,
    data    BLOB NOT NULL,
    version INTEGER NOT NULL,
    owner   TEXT            -- session id of an ephemeral node, NULL for persistent ones
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(owner) WHERE owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS sessions (
    id        TEXT PRIMARY KEY,
    heartbeat REAL NOT NULL,  -- wall-clock seconds: shared by every process on the machine
    timeout   REAL NOT NULL,
    pid       INTEGER NOT NULL,
    host      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    seq  INTEGER PRIMARY KEY AUTOINCREMENT,  -- AUTOINCREMENT: never reused, so pollers can detect trimmed gaps
    path TEXT NOT NULL,
    type TEXT NOT NULL,
    at   REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_time ON changes(at);
INSERT OR IGNORE INTO nodes (path, parent, data, version, owner) VALUES ('/', NULL, x'', 0, NULL);
"""

_CREATED, _CHANGED, _DELETED, _CHILDREN = (t.value for t in WatchEventType)


def _node(row: tuple[str, bytes, int, str | None]) -> Node:
    path, data, version, owner = row
    return Node(path=path, data=bytes(data), version=version, ephemeral=owner is not None)


def _log(conn: sqlite3.Connection, path: str, event_type: str, now: float) -> None:
    conn.execute("INSERT INTO changes (path, type, at) VALUES (?, ?, ?)", (path, event_type, now))


def _conflict(path: str, expected: int, found: int) -> VersionConflictError:
    return VersionConflictError(
        f"version conflict on {path}: expected version {expected}, found {found} "
        "(someone else wrote first; re-read and retry)"
    )


# ---- nodes -----------------------------------------------------------------------------------------------


def read_node(conn: sqlite3.Connection, path: str) -> Node | None:
    row = conn.execute("SELECT path, data, version, owner FROM nodes WHERE path = ?", (path,)).fetchone()
    return None if row is None else _node(row)


def require_node(conn: sqlite3.Connection, path: str) -> Node:
    node = read_node(conn, path)
    if node is None:
        raise NoNodeError(f"no metadata node at {path}")
    return node


def list_children(conn: sqlite3.Connection, path: str) -> list[str]:
    require_node(conn, check_path(path))
    rows = conn.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
    return sorted(name_of(p) for (p,) in rows)


def session_alive(conn: sqlite3.Connection, session_id: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is not None


def create_node(
    conn: sqlite3.Connection,
    session_id: str,
    path: str,
    data: bytes,
    *,
    ephemeral: bool,
    make_parents: bool,
    now: float,
) -> Node:
    check_path(path)
    if read_node(conn, path) is not None:
        raise NodeExistsError(f"metadata node {path} already exists")
    parent = parent_of(path)
    if read_node(conn, parent) is None:
        if not make_parents:
            raise NoNodeError(f"cannot create {path}: parent {parent} does not exist")
        for ancestor in ancestors(path):
            if read_node(conn, ancestor) is None:
                _insert(conn, ancestor, b"", None, now)
    if conn.execute("SELECT owner FROM nodes WHERE path = ?", (parent,)).fetchone()[0] is not None:
        raise MetadataStoreError(f"cannot create {path}: its parent {parent} is ephemeral and cannot have children")
    if ephemeral and not session_alive(conn, session_id):
        raise SessionExpiredError(f"session {session_id} has expired; cannot create ephemeral node {path}")
    _insert(conn, path, bytes(data), session_id if ephemeral else None, now)
    return Node(path=path, data=bytes(data), version=0, ephemeral=ephemeral)


def _insert(conn: sqlite3.Connection, path: str, data: bytes, owner: str | None, now: float) -> None:
    parent = parent_of(path)
    conn.execute(
        "INSERT INTO nodes (path, parent, data, version, owner) VALUES (?, ?, ?, 0, ?)", (path, parent, data, owner)
    )
    _log(conn, path, _CREATED, now)
    _log(conn, parent, _CHILDREN, now)


def set_node(conn: sqlite3.Connection, path: str, data: bytes, expected_version: int, now: float) -> Node:
    node = require_node(conn, check_path(path))
    if expected_version != ANY_VERSION and node.version != expected_version:
        raise _conflict(path, expected_version, node.version)
    conn.execute("UPDATE nodes SET data = ?, version = version + 1 WHERE path = ?", (bytes(data), path))
    _log(conn, path, _CHANGED, now)
    return Node(path=path, data=bytes(data), version=node.version + 1, ephemeral=node.ephemeral)


def check_version(conn: sqlite3.Connection, path: str, version: int) -> None:
    node = require_node(conn, check_path(path))
    if version != ANY_VERSION and node.version != version:
        raise _conflict(path, version, node.version)


def delete_node(conn: sqlite3.Connection, path: str, expected_version: int, *, recursive: bool, now: float) -> None:
    node = require_node(conn, check_deletable(path))
    if expected_version != ANY_VERSION and node.version != expected_version:
        raise _conflict(path, expected_version, node.version)
    # '/' sorts just before '0', so this range is exactly the subtree below `path`, and uses the primary key.
    descendants = [
        p for (p,) in conn.execute("SELECT path FROM nodes WHERE path > ? AND path < ?", (path + "/", path + "0"))
    ]
    if descendants and not recursive:
        raise NotEmptyError(f"cannot delete {path}: it has children (use recursive delete)")
    for victim in sorted(descendants, key=lambda p: p.count("/"), reverse=True) + [path]:
        _remove(conn, victim, now)


def _remove(conn: sqlite3.Connection, path: str, now: float) -> None:
    conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
    _log(conn, path, _DELETED, now)
    _log(conn, parent_of(path), _CHILDREN, now)


def apply_ops(conn: sqlite3.Connection, session_id: str, ops: Sequence[Op], now: float) -> list[Node | None]:
    """Apply ops in order; the first failure raises OpFailed (the caller rolls the transaction back)."""
    results: list[Node | None] = []
    for index, op in enumerate(ops):
        try:
            results.append(_apply(conn, session_id, op, now))
        except MetadataStoreError as exc:
            raise OpFailed(index, exc) from exc
    return results


class OpFailed(Exception):
    """Op ``index`` of a transaction failed with ``cause``; the caller rolls back and reports it."""

    def __init__(self, index: int, cause: MetadataStoreError):
        super().__init__(index, cause)
        self.index = index
        self.cause = cause


def _apply(conn: sqlite3.Connection, session_id: str, op: Op, now: float) -> Node | None:
    if isinstance(op, Create):
        return create_node(conn, session_id, op.path, op.data, ephemeral=op.ephemeral, make_parents=False, now=now)
    if isinstance(op, SetData):
        return set_node(conn, op.path, op.data, op.expected_version, now)
    if isinstance(op, Delete):
        delete_node(conn, op.path, op.expected_version, recursive=False, now=now)
        return None
    if isinstance(op, CheckVersion):
        check_version(conn, op.path, op.version)
        return None
    raise MetadataStoreError(f"unknown transaction op {op!r}")


# ---- sessions --------------------------------------------------------------------------------------------


def register_session(
    conn: sqlite3.Connection, session_id: str, timeout: float, pid: int, host: str, now: float
) -> None:
    conn.execute(
        "INSERT INTO sessions (id, heartbeat, timeout, pid, host) VALUES (?, ?, ?, ?, ?)",
        (session_id, now, timeout, pid, host),
    )


def heartbeat(conn: sqlite3.Connection, session_id: str, now: float) -> bool:
    """Refresh our session; False if it no longer exists (another client expired it)."""
    return conn.execute("UPDATE sessions SET heartbeat = ? WHERE id = ?", (now, session_id)).rowcount == 1


def end_session(conn: sqlite3.Connection, session_id: str, now: float) -> None:
    """Delete a session and its ephemeral nodes (close, or expiry found by any client)."""
    for (path,) in conn.execute("SELECT path FROM nodes WHERE owner = ?", (session_id,)).fetchall():
        _remove(conn, path, now)
    conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))


def sweep_expired_sessions(conn: sqlite3.Connection, now: float) -> list[str]:
    expired = [sid for (sid,) in conn.execute("SELECT id FROM sessions WHERE heartbeat + timeout < ?", (now,))]
    for session_id in expired:
        end_session(conn, session_id, now)
    return expired


# ---- change log ------------------------------------------------------------------------------------------


def last_change_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    return 0 if row is None else int(row[0])


def changes_since(conn: sqlite3.Connection, seq: int, limit: int) -> list[tuple[int, str, str]]:
    return conn.execute(
        "SELECT seq, path, type FROM changes WHERE seq > ? ORDER BY seq LIMIT ?", (seq, limit)
    ).fetchall()


def trim_changes(conn: sqlite3.Connection, older_than: float) -> int:
    return conn.execute("DELETE FROM changes WHERE at < ?", (older_than,)).rowcount
