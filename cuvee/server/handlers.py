"""The I/O side of each state transition: start and stop consumers, swap in committed segments, download, drop.

``run_chain`` executes one segment's chain of transitions (from ``transitions.plan_transitions``) and writes the
current state after each step; a failing step leaves the replica in ERROR with the reason logged (the follower
retries it with backoff). Calls for one
segment never overlap (the executor guarantees it); calls for different segments run in parallel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa

from cuvee.cluster.records import SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.errors import CuveeError
from cuvee.evolution.compatibility import columns_differ
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.consuming.fsm_types import ConsumerState
from cuvee.server.current_state import CurrentStates
from cuvee.server.download import SegmentFetcher
from cuvee.server.local import LocalSegments
from cuvee.server.memory import RELEASER
from cuvee.server.native_copies import NativeCopies
from cuvee.server.plain_copies import PLAIN_COPIES, PlainCopies
from cuvee.server.queryable import CommittedSegment, ConsumingView
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableNotFoundError
from cuvee.server.transitions import Transition
from cuvee.story import StoryWriter
from cuvee.upsert.table import TableUpsert, UpsertTables

log = logging.getLogger(__name__)
S = SegmentState
Key = tuple[str, str]  # (table with type, segment)


class Consuming(Protocol):
    """What the shell needs of a ConsumingSegment (cuvee.server.consuming)."""

    name: str
    is_consuming: bool
    record: SegmentRecord

    @property
    def num_docs(self) -> int: ...
    @property
    def last_ingestion_ms(self) -> int | None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def halt(self) -> None: ...
    def force_commit(self) -> None: ...
    def set_paused(self, paused: bool) -> None: ...
    def cap(self, end_offset: int) -> None: ...
    def set_gate(self, gate: Callable[[threading.Event], bool]) -> None: ...
    def info(self) -> dict: ...
    def go_online(self, record: SegmentRecord) -> ImmutableSegment: ...
    def snapshot(self) -> pa.Table: ...


ConsumingFactory = Callable[[str, SegmentRecord], Consuming]
"""(table with type, segment record) → a consuming segment, not started yet."""


class TransitionError(CuveeError):
    """A transition cannot be made (metadata missing or in the wrong status)."""


def _stop_and_release_memory(consuming: Consuming) -> None:
    """Stop a consuming segment and have its freed rows given back to the operating system (see server.memory:
    in the releaser's thread, not this one, which may be a query's)."""
    consuming.stop()
    RELEASER.request()


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    lock = threading.Lock()
    done = False

    def run() -> None:
        nonlocal done
        with lock:
            if done:
                return
            done = True
        fn()

    return run


class SegmentTransitions:
    def __init__(
        self,
        *,
        store: ClusterStore,
        registry: SegmentRegistry,
        local: LocalSegments,
        fetcher: SegmentFetcher,
        states: CurrentStates,
        make_consuming: ConsumingFactory,
        upserts: UpsertTables | None = None,
        gate_poll_seconds: float = 0.25,
        story: StoryWriter | None = None,
        plain_copies: PlainCopies = PLAIN_COPIES,
        schemas: ServedSchemas | None = None,
        natives: NativeCopies | None = None,
    ):
        self._natives = natives  # committed segments of large tables are copied into DuckDB as they arrive
        self._schemas = schemas  # what each table is served under: read again whenever one of its segments arrives
        self._story = story  # transitions to CONSUMING and ONLINE, and failures, go into the segment's story
        self._plain_copies = plain_copies  # committed segments' plain copies, under the server's budget
        self._store = store
        self._registry = registry
        self._local = local
        self._fetcher = fetcher
        self._states = states
        self._make_consuming = make_consuming
        self._upserts = upserts  # upsert tables: committed copies and releases go through their key maps
        self._gate_poll_seconds = gate_poll_seconds  # how often an upsert consumer checks its predecessors
        self._lock = threading.Lock()
        self._consuming: dict[Key, Consuming] = {}
        self._stoppers: dict[Key, Callable[[], None]] = {}
        self._paused: dict[str, bool] = {}
        self._unreleased: dict[Key, int] = {}  # committed registry entries of a name not yet released
        self._drop_pending: set[Key] = set()

    # ---- queries from the HTTP app and the follower ----------------------------------------------------------

    def consuming(self, table: str) -> list[Consuming]:
        with self._lock:
            return [c for (t, _), c in sorted(self._consuming.items()) if t == table]

    def all_consuming(self) -> list[tuple[str, Consuming]]:
        """(table, consuming segment) of every consuming segment held, in name order."""
        with self._lock:
            return [(t, c) for (t, _), c in sorted(self._consuming.items())]

    def consuming_segment(self, table: str, segment: str) -> Consuming | None:
        with self._lock:
            return self._consuming.get((table, segment))

    def set_paused(self, table: str, paused: bool) -> None:
        with self._lock:
            changed = self._paused.get(table, False) != paused
            self._paused[table] = paused
            targets = [c for (t, _), c in self._consuming.items() if t == table] if changed else []
        for consuming in targets:
            consuming.set_paused(paused)

    # ---- startup and shutdown -------------------------------------------------------------------------------

    def load_local(self) -> list[Key]:
        """Serve the committed segments on disk whose metadata is DONE with the same CRC; delete the rest. Each
        table's served schema is read once, with its first segment."""
        loaded: list[Key] = []
        schemas_read: set[str] = set()
        for table, name in self._local.scan():
            found = self._store.find_segment(table, name)
            record = found.record if found else None
            segment = None
            if record is not None and record.status in (SegmentStatus.DONE, SegmentStatus.UPLOADED):
                segment = self._local.load_valid(table, name, record.crc)
            if segment is None:
                log.info("deleting local copy of %s/%s: not a committed segment with a matching CRC", table, name)
                self._local.delete(table, name)
                continue
            self._serve_committed(table, segment, read_schema=table not in schemas_read)
            schemas_read.add(table)
            self._states.set(table, name, S.ONLINE)
            loaded.append((table, name))
        return loaded

    def stop_all(self) -> None:
        """Stop every consumer and stop serving (the files stay for the next start)."""
        with self._lock:
            stoppers = list(self._stoppers.values())
            self._consuming.clear()
            self._stoppers.clear()
        for stop in stoppers:
            try:
                stop()
            except Exception:
                log.exception("stopping a consumer failed")
        self._registry.clear()

    # ---- transitions ----------------------------------------------------------------------------------------

    def run_chain(self, table: str, chain: list[Transition]) -> bool:
        """Run the steps in order; True if all were made, False if one failed (the replica is then in ERROR).
        Recording a state never raises for a store error (``CurrentStates`` writes it again later)."""
        for step in chain:
            started = time.monotonic()
            try:
                self._run(table, step)
            except Exception as exc:
                log.error("transition %s of %s failed: %s", step, table, exc, exc_info=not isinstance(exc, CuveeError))
                self._states.set(table, step.segment, S.ERROR, failed_target=chain[-1].to_state)
                self._tell(table, step, "transitionFailed", started,
                           error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                return False
            self._states.set(table, step.segment, step.to_state)
            self._tell(table, step, "transition", started)
        return True

    def _tell(self, table: str, step: Transition, kind: str, started: float, **details: Any) -> None:
        """A step into the segment's story; not steps to OFFLINE or DROPPED (the segment may be gone, and its
        story with it: writing would leave an orphan)."""
        if self._story is None or step.to_state in (S.OFFLINE, S.DROPPED):
            return
        self._story.record(table, step.segment, kind, fromState=step.from_state.value, toState=step.to_state.value,
                           seconds=round(time.monotonic() - started, 3), **details)

    def _run(self, table: str, step: Transition) -> None:
        edge = (step.from_state, step.to_state)
        if edge == (S.OFFLINE, S.CONSUMING):
            self._start_consuming(table, step.segment)
        elif edge == (S.CONSUMING, S.ONLINE):
            self._commit(table, step.segment)
        elif edge == (S.OFFLINE, S.ONLINE):
            self._download(table, step.segment)
        elif edge == (S.ONLINE, S.ONLINE):
            self._reload(table, step.segment)
        elif step.to_state is S.OFFLINE:  # from CONSUMING, ONLINE or ERROR
            self._release(table, step.segment)
        elif step.to_state is S.DROPPED:
            self._drop(table, step.segment)
        else:
            raise TransitionError(f"no handler for {step}")

    def _record(self, table: str, segment: str) -> SegmentRecord:
        found = self._store.find_segment(table, segment)
        if found is None:
            raise TransitionError(f"segment {table}/{segment} has no metadata")
        return found.record

    def _start_consuming(self, table: str, segment: str) -> None:
        record = self._record(table, segment)
        if not record.is_consuming:  # IN_PROGRESS, or COMMITTING (pauseless): consumed up to its fixed end offset
            raise TransitionError(f"cannot consume {table}/{segment}: its metadata is {record.status.value}")
        with self._lock:
            again = (table, segment) in self._consuming
        if again:  # started here before (a transition planned twice, or one that failed half way): start afresh,
            log.warning("%s/%s: started again while consuming here; the earlier consumer is released", table, segment)
            self._release(table, segment)  # its rows leave views and registry in one step; the stream has them
        self._cap_predecessor(table, record)
        upsert = self._upsert(table, refresh=True)  # before the factory: the consumer feeds this same state
        consuming = self._make_consuming(table, record)
        stop = _once(lambda: _stop_and_release_memory(consuming))
        with self._lock:
            paused = self._paused.get(table, False)
            self._consuming[(table, segment)] = consuming
            self._stoppers[(table, segment)] = stop
        if paused:
            consuming.set_paused(True)
        self._cap_from_successor(table, consuming)
        if self._schemas is not None:
            self._schemas.ensure(table)
            self._commit_if_behind(table, record, consuming)

        def publish() -> None:
            self._registry.put(table, ConsumingView(consuming), on_release=stop)  # queryable from the first row

        if upsert is None:
            publish()
        else:
            upsert.start(segment, consuming, publish)  # in the partition's views in the same step
            consuming.set_gate(lambda interrupted: self._upsert_gate(table, segment, upsert, interrupted))
        consuming.start()

    def _commit_if_behind(self, table: str, record: SegmentRecord, consuming: Consuming) -> None:
        """A consuming segment pinned to an older schema version than the table is served under, with other
        columns, is force-committed as it starts, as a reload does to the ones it finds consuming: a reload that
        landed after the controller pinned it and before it was placed missed it, and would leave its rows without
        the served columns until its own commit. Every replica decides it from the same two records."""
        served = self._schemas.get(table) if self._schemas is not None else None
        schema = getattr(consuming, "schema", None)
        if (served is None or schema is None or record.schema_version is None
                or record.status is not SegmentStatus.IN_PROGRESS or served.version <= record.schema_version
                or getattr(consuming, "state", ConsumerState.CONSUMING) is not ConsumerState.CONSUMING):
            return  # ... or its end is already reached or fixed (each follower pass asks again: no repeats)
        differ = columns_differ(schema, served.schema)
        if differ:
            log.warning("%s/%s: pinned to schema version %d, served under %d with other columns (%s): "
                        "force-committed so its successor ingests them", table, record.segment_name,
                        record.schema_version, served.version, ", ".join(differ[:10]))
            consuming.force_commit()

    def _upsert_gate(self, table: str, segment: str, upsert: TableUpsert, interrupted: threading.Event) -> bool:
        """An upsert consumer's first step: wait until every earlier segment of its partition that the ideal state
        places ONLINE here is served here committed (a commit in flight, a download after a restart), so each row
        is decided, merged or dropped against the same versions on every replica; then the table's TTLs and
        snapshot round run at this clean moment (no consuming rows yet). False if interrupted first."""
        waited, warned = 0.0, 0.0
        while True:
            try:
                missing = self._predecessors_missing(table, segment)
            except Exception:  # noqa: BLE001 - the store may be briefly unreachable: ask again
                log.warning("%s: cannot tell whether earlier segments are served yet", segment, exc_info=True)
                missing = ["(unknown)"]
            if not missing:
                break
            if waited - warned >= 30:  # a predecessor in ERROR, or placed elsewhere: say so, keep waiting
                warned = waited
                log.warning("%s: upsert consumption waits for %s to be served here (%.0f s so far): its keys must "
                            "be known before any row is decided", segment, ", ".join(missing[:5]), waited)
            if interrupted.wait(self._gate_poll_seconds):
                return False
            waited += self._gate_poll_seconds
        upsert.ready(segment)
        return True

    def _predecessors_missing(self, table: str, segment: str) -> list[str]:
        """Earlier committed segments of the partition (ONLINE anywhere in the ideal state) not served here
        committed: each must be, this server being a replica of the partition (one assigned elsewhere keeps the
        consumer waiting: its keys are not here)."""
        own = LLCSegmentName.parse(segment)
        found = self._store.ideal_state(table)
        if found is None:
            return []  # the table is gone: the segment is about to be dropped
        missing = []
        for name, replicas in found.record.segments.items():
            if S.ONLINE not in replicas.values():
                continue
            try:
                llc = LLCSegmentName.parse(name)
            except InvalidSegmentNameError:
                continue
            if llc.partition == own.partition and llc.sequence < own.sequence:
                held = self._registry.get(table, name)
                if held is None or held.is_consuming:
                    missing.append(name)
        return sorted(missing)

    def _cap_predecessor(self, table: str, record: SegmentRecord) -> None:
        """The partition's previous segment, still consuming here (a pauseless commit in flight), ends where this
        one starts: it must never serve a row this one holds too (the broker reads a consuming segment from a
        server that also holds its successor, for that reason)."""
        previous = self._consuming_neighbour(table, record.segment_name, -1)
        if previous is not None and record.start_offset is not None:
            previous.cap(record.start_offset)

    def _cap_from_successor(self, table: str, consuming: Consuming) -> None:
        """The other order (transitions run in parallel): the partition's next segment started here first."""
        following = self._consuming_neighbour(table, consuming.name, +1)
        if following is not None and following.record.start_offset is not None:
            consuming.cap(following.record.start_offset)

    def _consuming_neighbour(self, table: str, segment: str, step: int) -> Consuming | None:
        """The segment ``step`` sequence numbers from ``segment`` in its partition, if it is consuming here."""
        try:
            own = LLCSegmentName.parse(segment)
        except InvalidSegmentNameError:
            return None
        with self._lock:
            held = [(name, c) for (t, name), c in self._consuming.items() if t == table]
        for name, other in held:
            try:
                llc = LLCSegmentName.parse(name)
            except InvalidSegmentNameError:
                continue
            if (llc.table, llc.partition, llc.sequence) == (own.table, own.partition, own.sequence + step):
                return other
        return None

    def _commit(self, table: str, segment: str) -> None:
        record = self._record(table, segment)
        if record.is_consuming:  # COMMITTING too: no CRC or download URI until the commit ends
            raise TransitionError(f"{table}/{segment} is to go ONLINE but its metadata is still {record.status.value}")
        with self._lock:
            consuming = self._consuming.get((table, segment))
        if consuming is None:  # nothing consumed here (e.g. the consumer failed): fetch the committed copy
            self._download(table, segment)
            return
        committed = consuming.go_online(record)
        if record.crc is not None and committed.crc != record.crc:
            raise TransitionError(f"{table}/{segment}: go_online gave CRC {committed.crc}, committed CRC is {record.crc}")
        with self._lock:
            self._consuming.pop((table, segment), None)
            self._stoppers.pop((table, segment), None)
        self._serve_committed(table, committed)  # the swap; the consuming view's release stops its consumer

    def _download(self, table: str, segment: str) -> None:
        record = self._record(table, segment)
        if record.is_consuming:
            raise TransitionError(f"cannot download {table}/{segment}: it is not committed yet "
                                  f"({record.status.value})")
        self._cap_predecessor(table, record)  # the previous segment, if still consuming here, ends where this starts
        committed = self._local.load_valid(table, segment, record.crc) or self._fetcher.fetch(table, record)
        self._serve_committed(table, committed)

    def _reload(self, table: str, segment: str) -> None:
        """A pushed segment replaced under its name: fetch the new copy and swap it in (queries switch at once)."""
        record = self._record(table, segment)
        committed = self._local.load_valid(table, segment, record.crc) or self._fetcher.fetch(table, record)
        self._serve_committed(table, committed)

    def stale_copies(self, table: str, crcs: Mapping[str, int]) -> list[str]:
        """Segments served here whose CRC is not the one the ideal state now names (pushed again)."""
        stale = []
        for name, crc in crcs.items():
            held = self._registry.get(table, name)
            if held is not None and not held.is_consuming and getattr(held, "crc", crc) != crc:
                stale.append(name)
        return stale

    def table_gone(self, table: str) -> None:
        """The table's ideal state is gone (the table was deleted): its upsert state is forgotten, so a table
        created again under the name starts afresh while the old segments are dropped."""
        if self._upserts is not None:
            self._upserts.retire(table)
        if self._schemas is not None:
            self._schemas.forget(table)

    def follow_served_schema(self, table: str) -> None:
        """The follower's pass over a table with segments here: serve its recorded served schema version, and
        force-commit the table's consuming segments here that are pinned to an older one with other columns (a
        reload whose call to this server failed, or a served version the repair pass wrote: their rows would
        otherwise lack the served columns until their own commit; idempotent, every replica decides alike)."""
        if self._schemas is None:
            return
        self._schemas.ensure(table)
        with self._lock:
            running = [consuming for (held, _), consuming in self._consuming.items() if held == table]
        for consuming in running:
            record = getattr(consuming, "record", None)
            if record is not None:
                self._commit_if_behind(table, record, consuming)

    def segment_deleted(self, table: str, segment: str) -> None:
        """The segment left the ideal state (deleted, not moved): queries routed to it meanwhile skip it."""
        self._registry.mark_deleted(table, segment)

    def _release(self, table: str, segment: str) -> None:
        with self._lock:
            consuming = self._consuming.pop((table, segment), None)
            stop = self._stoppers.pop((table, segment), None)
        upsert = self._upsert(table)
        if upsert is None:
            self._registry.remove(table, segment)
        else:
            if consuming is not None:
                consuming.halt()  # no batch reaches the key map after this; its rows stay readable meanwhile
            # leaves the registry and the partition's views in one step; a consuming copy's keys fall back to
            # their versions in the other segments rather than vanish until the stream brings them again
            upsert.remove(segment, redecide=consuming is not None,
                          publish=lambda: self._registry.remove(table, segment))
        if stop is not None:
            stop()

    def _drop(self, table: str, segment: str) -> None:
        key = (table, segment)
        with self._lock:
            self._drop_pending.add(key)
        self._release(table, segment)
        with self._lock:
            delete_now = self._unreleased.get(key, 0) == 0 and key in self._drop_pending
            if delete_now:
                self._drop_pending.discard(key)
        if delete_now:
            self._local.delete(table, segment)
            self._local.delete_table_if_empty(table)

    def _serve_committed(self, table: str, segment: ImmutableSegment, *, read_schema: bool = True) -> None:
        key = (table, segment.name)
        with self._lock:
            self._unreleased[key] = self._unreleased.get(key, 0) + 1
            self._drop_pending.discard(key)
        if self._schemas is not None and read_schema:  # the table's served version, as the controller recorded it
            self._schemas.ensure(table)

        def publish() -> CommittedSegment:
            served = CommittedSegment(segment, self._plain_copies)
            self._registry.put(table, served, on_release=_once(lambda: self._committed_released(key)))
            return served

        upsert = self._upsert(table, refresh=True)
        if upsert is None:
            self._copy_when_large(table, publish())
            return
        # the key map re-decides the segment's keys from this copy, in one step with the registry swap
        upsert.serve(segment.name, segment, segment.to_arrow(upsert.columns), publish)

    def _copy_when_large(self, table: str, served: CommittedSegment) -> None:
        """Ask for the DuckDB copy of a segment as it arrives when this server's part of the table is large enough
        for its queries to read copies (``native_copy_min_rows``), rather than at the first query that scans it:
        the queries right after a commit (fresh rows are what realtime users ask for) then find it made, instead
        of scanning Arrow while their own reads build it. An upsert table's queries never read copies."""
        natives = self._natives
        if natives is None or not natives.enabled:
            return
        if sum(s.num_docs for s in self._registry.segments(table)) >= natives.min_rows:
            natives.want(natives.token(served), table, served.segment)

    def _upsert(self, table: str, *, refresh: bool = False) -> TableUpsert | None:
        """The table's upsert state (``refresh``: when a segment arrives, so a re-created table is seen afresh)."""
        if self._upserts is None or not table.endswith("_REALTIME"):
            return None
        try:
            return self._upserts.get(table, refresh=refresh)
        except TableNotFoundError as exc:  # the table's config is gone (deleted): nothing left to keep valid
            log.warning("upsert state of %s unavailable: %s", table, exc)
            return None

    def _committed_released(self, key: Key) -> None:
        """A committed entry no query holds any more: delete its files now if it was dropped meanwhile."""
        with self._lock:
            left = self._unreleased.get(key, 1) - 1
            if left > 0:
                self._unreleased[key] = left
                return
            self._unreleased.pop(key, None)
            delete_now = key in self._drop_pending
            self._drop_pending.discard(key)
        if delete_now:
            self._local.delete(*key)
            self._local.delete_table_if_empty(key[0])
