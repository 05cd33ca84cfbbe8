"""A role's ephemeral live node: how a role says "I am up" under its instance id, and who may take the id.

The node holds the session id that created it. At start (and on each new session) a role creates it; if a node
is already there:

- made by one of this process's own sessions (an expired session's node not yet swept): replaced at once;
- made by another session: that is either a process with this id that was killed a moment ago (a supervisor
  restarting it at once: its session expires within the store's session timeout and the node goes with it), or a
  second *live* process with this id. The role waits, logging that it does, up to about the session timeout; if
  the node goes, the role takes its place; if it stays, another live process holds the id and the role refuses
  to start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from cuvee.errors import CuveeError
from cuvee.spi.metastore import MetadataStore, NodeExistsError, NoNodeError, VersionConflictError

log = logging.getLogger(__name__)


class InstanceIdTaken(CuveeError):
    """Another live process holds this instance id."""


def go_live(store: MetadataStore, path: str, instance_id: str, *, own_sessions: Collection[str] = (),
            wait_seconds: float | None = None, poll_seconds: float = 0.1, create: bool = True,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Create the ephemeral live node at ``path`` (see the module docstring); returns the session id it holds.
    ``wait_seconds``: how long a node of another session is waited for (default 1.5 × the store's session timeout
    + 1 s). ``create=False``: only make sure the id is free (call it before touching anything of the instance:
    its record, its current states), without going live yet."""
    mine = store.session_id
    patience = 1.5 * store.session_timeout_seconds + 1.0 if wait_seconds is None else wait_seconds
    deadline = clock() + patience
    waited = False
    while True:
        if create:
            try:
                store.create(path, mine.encode(), ephemeral=True)
                if waited:
                    log.info("%s: the previous session's live node expired; taking its place", instance_id)
                return mine
            except NodeExistsError:
                pass  # someone's node is there: whose, below
        node = store.exists(path)
        if node is None:
            if not create:
                return mine
            continue  # it expired between the two calls
        owner = node.data.decode("utf-8", errors="replace")
        if owner == mine or owner in own_sessions:
            try:
                store.delete(path, expected_version=node.version)
            except (NoNodeError, VersionConflictError):
                pass  # gone or replaced meanwhile: look again
            continue
        if clock() >= deadline:
            raise InstanceIdTaken(f"instance {instance_id} is live in another process (its metadata-store session "
                                  f"stayed alive for {patience:.0f} s); start this one with another instance id")
        if not waited:
            log.warning("%s: a live node of another session exists (a process with this id killed a moment ago, "
                        "or one still running); waiting up to %.0f s for its session to expire", instance_id,
                        patience)
            waited = True
        sleep(poll_seconds)


def leave(store: MetadataStore, path: str, own_sessions: Collection[str]) -> None:
    """Delete the live node at ``path`` if one of ``own_sessions`` (or the current one) made it: a process refused
    its id, or stopping, never removes the node of another live process with that id."""
    node = store.exists(path)
    if node is None:
        return
    owner = node.data.decode("utf-8", errors="replace")
    if owner == store.session_id or owner in own_sessions:
        try:
            store.delete(path, expected_version=node.version)
        except (NoNodeError, VersionConflictError):
            pass  # gone already, or replaced by another session's node: that one is not ours to remove
