"""Metadata store SPI: versioned nodes, compare-and-set, ephemeral nodes, watches and leader election.

The cluster state of DESIGN.md §3 lives behind this interface. Two implementations exist: the embedded
single-file store (``sqlite:///PATH``) and ZooKeeper (``zk://host:port/chroot``). Both pass the conformance
suite in ``tests/metastore/``. Nothing outside ``cuvee.metastore`` may know which one runs.

Paths are absolute, ``/``-separated, without a trailing slash (``/cuvee/c1/tables/t_REALTIME``). Data is bytes.
Every node has a version that starts at 0 on create and grows by one on each ``set``.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cuvee.errors import CuveeError

ANY_VERSION = -1
"""Pass as ``expected_version`` to write whatever the current version is."""


class MetadataStoreError(CuveeError):
    """Base of every metadata store failure."""


class NoNodeError(MetadataStoreError):
    """The node does not exist."""


class NodeExistsError(MetadataStoreError):
    """A create found the node already there."""


class NotEmptyError(MetadataStoreError):
    """A non-recursive delete found children."""


class VersionConflictError(MetadataStoreError):
    """A compare-and-set saw a version other than the expected one: someone else wrote first. Re-read and retry."""


class TransactionFailedError(MetadataStoreError):
    """A multi-op transaction was rejected; nothing was applied. ``failed_op`` is the index of the op that failed
    and ``cause`` the error it alone would have raised."""

    def __init__(self, failed_op: int, cause: MetadataStoreError):
        self.failed_op = failed_op
        self.cause = cause
        super().__init__(f"transaction op #{failed_op} failed: {cause}")


class SessionExpiredError(MetadataStoreError):
    """The session is gone (its ephemeral nodes with it); the client must be closed and a new one opened."""


class StoreUnavailableError(MetadataStoreError):
    """The store cannot be reached right now (connection loss); the call may be retried."""


@dataclass(frozen=True)
class Node:
    path: str
    data: bytes
    version: int
    ephemeral: bool = False


# ---- multi-op transactions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    expected_version: int = ANY_VERSION


@dataclass(frozen=True)
class Delete:
    path: str
    expected_version: int = ANY_VERSION


@dataclass(frozen=True)
class CheckVersion:
    path: str
    version: int


Op = Create | SetData | Delete | CheckVersion


# ---- watches and sessions --------------------------------------------------------------------------------


class SessionState(str, enum.Enum):
    """Kazoo's connection states. A leader must stop acting as leader as soon as the state leaves CONNECTED."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost, session may still be alive: stop leading, keep local state
    LOST = "LOST"  # session expired: ephemeral nodes are gone


class WatchEventType(str, enum.Enum):
    CREATED = "CREATED"
    CHANGED = "CHANGED"
    DELETED = "DELETED"
    CHILDREN = "CHILDREN"


@dataclass(frozen=True)
class WatchEvent:
    type: WatchEventType
    path: str


class Subscription(abc.ABC):
    """A persistent watch; it keeps firing until cancelled. Events may be coalesced: after an event, re-read."""

    @abc.abstractmethod
    def cancel(self) -> None: ...


class LeaderElection(abc.ABC):
    """Campaign for leadership of one election path.

    ``on_change(is_leader)`` is called from a background thread whenever this candidate gains or loses leadership.
    Leadership is lost when the session is suspended or lost, when ``resign`` is called, or on close.
    """

    @abc.abstractmethod
    def start(self) -> None:
        """Begin campaigning (non-blocking)."""

    @property
    @abc.abstractmethod
    def is_leader(self) -> bool: ...

    @abc.abstractmethod
    def leader_id(self) -> str | None:
        """The identifier of the current leader (any candidate's view), or None if there is none."""

    @abc.abstractmethod
    def resign(self) -> None:
        """Stop campaigning and give up leadership if held."""


class MetadataStore(abc.ABC):
    """One client session on a metadata store. Thread-safe."""

    @property
    @abc.abstractmethod
    def session_id(self) -> str: ...

    @property
    @abc.abstractmethod
    def state(self) -> SessionState: ...

    @property
    def session_timeout_seconds(self) -> float:
        """How long after its last sign of life a session (and its ephemeral nodes) is gone."""
        return 10.0

    @abc.abstractmethod
    def add_state_listener(self, listener: Callable[[SessionState], None]) -> None: ...

    @abc.abstractmethod
    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, make_parents: bool = True) -> Node:
        """Create a node. Raises NodeExistsError; NoNodeError if a parent is missing and make_parents is False.
        Ephemeral nodes vanish when this session ends (close, expiry, or the process dying)."""

    @abc.abstractmethod
    def get(self, path: str) -> Node:
        """Raises NoNodeError."""

    @abc.abstractmethod
    def exists(self, path: str) -> Node | None: ...

    @abc.abstractmethod
    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Node:
        """Compare-and-set. Raises VersionConflictError on a stale version, NoNodeError if absent."""

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int = ANY_VERSION, *, recursive: bool = False) -> None:
        """Raises NoNodeError, VersionConflictError, NotEmptyError (children present and not recursive)."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names (not paths) of the direct children, sorted. Raises NoNodeError."""

    @abc.abstractmethod
    def transaction(self, ops: Sequence[Op]) -> list[Node | None]:
        """Apply all ops atomically or none. Returns one result per op (the node for Create/SetData, else None).
        Raises TransactionFailedError naming the first failing op."""

    @abc.abstractmethod
    def watch(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        """Persistent watch on a node's existence and data (CREATED, CHANGED, DELETED)."""

    @abc.abstractmethod
    def watch_children(self, path: str, callback: Callable[[WatchEvent], None]) -> Subscription:
        """Persistent watch on a node's set of children (CHILDREN events)."""

    @abc.abstractmethod
    def election(self, path: str, identifier: str, on_change: Callable[[bool], None] | None = None) -> LeaderElection:
        """A leader election at ``path`` for this session, identified to others as ``identifier``."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the session: its ephemeral nodes are deleted, its watches and elections stop."""

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
