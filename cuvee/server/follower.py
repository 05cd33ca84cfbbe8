"""Following the ideal state: watch it, plan this server's transitions, run them on a small worker pool.

Watches (children of the ideal-state folder, data of each table's node) wake the loop; a poll at
``ideal_state_poll_seconds`` covers a missed event. Each wake re-reads every table and re-plans from scratch (the
plan is a pure function of ideal and current state), so coalesced or duplicate events are harmless. One chain runs
per segment at a time; a segment whose chain is still running is skipped and re-planned when it finishes.

A chain that ends in ERROR is retried with exponential backoff (``ErrorBackoff``, on the injected clock): the
follower keeps each segment's failures in a row and next due time, hands them to the planner with ``now``, and
wakes when the earliest retry is due. Every pass also writes again the current states whose last write failed,
and reads the served schema version of each table this server holds segments of (``ServedSchemas.ensure``), so a
server a reload's call did not reach serves the recorded version within a poll.
An exception escaping a chain (a bug) is logged and counted (``run_errors``), never lost in a future.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.server.current_state import CurrentStates
from cuvee.server.handlers import SegmentTransitions
from cuvee.server.transitions import NO_FAILURES, ErrorBackoff, RetryState, Transition, plan_transitions
from cuvee.spi.metastore import NodeExistsError, Subscription, WatchEvent

log = logging.getLogger(__name__)


class IdealStateFollower:
    def __init__(
        self,
        *,
        store: ClusterStore,
        instance_id: str,
        states: CurrentStates,
        transitions: SegmentTransitions,
        workers: int,
        poll_seconds: float,
        error_backoff: ErrorBackoff = ErrorBackoff(5.0, 300.0),
        join_timeout_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._store = store
        self._instance_id = instance_id
        self._states = states
        self._transitions = transitions
        self._poll_seconds = poll_seconds
        self._error_backoff = error_backoff
        self._join_timeout = join_timeout_seconds
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{instance_id}-transition")
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._in_flight: set[tuple[str, str]] = set()
        self._retries: dict[tuple[str, str], RetryState] = {}  # segments whose last chain failed
        self._watches: dict[str, Subscription] = {}
        self._thread: threading.Thread | None = None
        self.reconciles = 0  # how many passes ran (inspectable, for tests and status)
        self.run_errors = 0  # chains that raised instead of ending in a state (a bug; logged)

    @property
    def _root(self) -> str:
        return self._store.paths.ideal_state("x").rsplit("/", 1)[0]

    def start(self) -> None:
        try:
            self._store.metastore.create(self._root)
        except NodeExistsError:
            pass
        self._watches[""] = self._store.metastore.watch_children(self._root, self._on_event)
        self._thread = threading.Thread(target=self._loop, name=f"{self._instance_id}-follower", daemon=True)
        self._thread.start()
        self.wake()

    def halt(self) -> None:
        """Stop planning and submitting; transitions already running go on (see ``join``)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._join_timeout)
        for sub in list(self._watches.values()):  # after the join: a pass in progress may still add watches
            sub.cancel()

    def join(self) -> None:
        """Wait for running transitions (stop consumers first, so a blocked go_online returns); drop queued ones."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def stop(self) -> None:
        self.halt()
        self.join()

    def wake(self) -> None:
        self._wake.set()

    def busy(self) -> bool:
        with self._lock:
            return bool(self._in_flight)

    def _on_event(self, event: WatchEvent) -> None:
        self._wake.set()

    def retry_state(self, table: str, segment: str) -> RetryState | None:
        """The segment's failures in a row and next retry time, if its last chain failed."""
        with self._lock:
            return self._retries.get((table, segment))

    def _next_wait(self) -> float:
        """Until the next poll, or the earliest retry that is not due yet, whichever comes first."""
        now = self._clock()
        with self._lock:
            waits = [r.due - now for r in self._retries.values() if r.due > now]
        return min([self._poll_seconds, *waits])

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._next_wait())
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self.reconcile()
            except Exception:  # the store may be briefly unreachable: try again at the next wake or poll
                log.exception("%s: following the ideal state failed; will retry", self._instance_id)

    def reconcile(self) -> None:
        """One pass: for every table in the ideal state or held here, plan and submit what is not running."""
        self._states.flush()  # current states whose last write failed
        tables = set(self._store.children(self._root)) | set(self._states.tables())
        for table in sorted(tables):
            self._reconcile_table(table)
        self.reconciles += 1

    def _reconcile_table(self, table: str) -> None:
        if table not in self._watches:
            self._watches[table] = self._store.metastore.watch(self._store.paths.ideal_state(table), self._on_event)
        found = self._store.ideal_state(table)
        wanted: dict[str, SegmentState] = {}
        if found is None:
            self._transitions.table_gone(table)
        else:
            ideal = found.record
            wanted = {seg: r[self._instance_id] for seg, r in ideal.segments.items() if self._instance_id in r}
            self._transitions.set_paused(table, ideal.paused)
            if wanted:  # a reload whose call missed this server (it failed, or came while it held nothing)
                self._transitions.follow_served_schema(table)
        with self._lock:
            due = {seg: r.due for (t, seg), r in self._retries.items() if t == table}
        plan = plan_transitions(wanted, self._states.of(table), self._states.failed(table), now=self._clock(),
                                retry_due=due)
        placed = set(found.record.segments) if found is not None else set()
        for chain in plan:
            if chain[-1].to_state is SegmentState.DROPPED and chain[0].segment not in placed:
                self._transitions.segment_deleted(table, chain[0].segment)
            self._submit(table, chain)
        if found is not None and found.record.crcs:
            held_online = {s for s, st in self._states.of(table).items() if st is SegmentState.ONLINE}
            crcs = {s: c for s, c in found.record.crcs.items() if wanted.get(s) is SegmentState.ONLINE and s in held_online}
            for segment in self._transitions.stale_copies(table, crcs):
                self._submit(table, [Transition(segment, SegmentState.ONLINE, SegmentState.ONLINE)])

    def _submit(self, table: str, chain: list[Transition]) -> None:
        key = (table, chain[0].segment)
        with self._lock:
            if key in self._in_flight or self._stopping.is_set():
                return
            # the plan was made from current states read earlier: a chain for this segment may have finished
            # since (and left in_flight), so a plan from before it would run its first step twice
            current = self._states.get(table, chain[0].segment) or SegmentState.OFFLINE
            start = chain[0].from_state
            if current is not start and not (current is SegmentState.ERROR and start is SegmentState.OFFLINE):
                return  # (an ERROR replica with a new target is planned from OFFLINE)
            self._in_flight.add(key)
        log.info("%s: %s %s", self._instance_id, table, ", ".join(str(t) for t in chain))
        try:
            self._pool.submit(self._run, table, chain)
        except RuntimeError:  # the pool shut down meanwhile (stopping)
            with self._lock:
                self._in_flight.discard(key)

    def _run(self, table: str, chain: list[Transition]) -> None:
        key = (table, chain[0].segment)
        completed = False
        try:
            completed = self._transitions.run_chain(table, chain)
        except Exception:
            with self._lock:
                self.run_errors += 1
            log.exception("%s: the transitions %s of %s raised", self._instance_id,
                          ", ".join(str(t) for t in chain), table)
        finally:
            with self._lock:
                if completed:
                    self._retries.pop(key, None)
                else:
                    retry = self._retries.get(key, NO_FAILURES).after_failure(self._clock(), self._error_backoff)
                    self._retries[key] = retry
                    log.info("%s: %s/%s failed %d time(s) in a row; retrying in %.1fs", self._instance_id, table,
                             key[1], retry.failures, self._error_backoff.delay(retry.failures))
                self._in_flight.discard(key)
            self._wake.set()  # re-plan: the ideal state may have moved on while this ran
