"""``POST /tables/{t}/rebalance`` (Pinot's; a dry run unless ``dryRun=false``; ``type=OFFLINE|REALTIME`` when the
name has both) and ``GET /tables/{t}/rebalanceStatus``: the leader moves a table's committed segments onto the
servers tagged now (``cuvee.cluster.rebalance``), each move made before it is broken, in a thread of its own; one
rebalance per table at a time. The job and its progress are kept in the store (``RebalanceJob``), so any
controller reports it, and one a former leader was running shows as STOPPED (its segments stay ONLINE on old and
new replicas, which is safe; running it again finishes it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from cuvee.cluster.assignment import eligible_instances
from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.offline_assignment import offline_server_tag, replicas
from cuvee.cluster.rebalance import Move, add_targets, drop_sources, plan_offline_rebalance, plan_rebalance
from cuvee.cluster.records import IdealState, RebalanceJob, SegmentState
from cuvee.cluster.errors import RecordNotFoundError
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.commit import keeps_partitions_together
from cuvee.controller.errors import BadRequest, Conflict, NotFound
from cuvee.errors import CuveeError
from cuvee.segment.partitioning import configured_partition

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, store: ClusterStore, may_act: Callable[[], bool], timeout_seconds: float,
                 pool: Callable[[TableConfig], list[str]], poll_seconds: float = 0.5, settle_seconds: float = 5.0,
                 me: Callable[[], str] = lambda: "", leader: Callable[[], str | None] = lambda: None,
                 clock_ms: Callable[[], int] = lambda: 0):
        """``pool``: the servers a realtime table's partitions are spread over now
        (``SegmentCommitter.placement_pool``), the same ones consuming segments are placed on at commits. ``me``
        and ``leader``: this controller's URL and the current leader's as the election knows it (None: unknown);
        a job records the URL of the controller that runs it."""
        self.pool = pool
        self.me = me
        self.leader = leader
        self.clock_ms = clock_ms
        self.settle_seconds = settle_seconds  # after the new replicas serve a segment, before the old ones go
        self.store = store
        self.may_act = may_act
        self.timeout_seconds = timeout_seconds
        self.poll_seconds = poll_seconds
        self.jobs: dict[str, dict[str, Any]] = {}  # table -> the rebalance this controller runs or ran last
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # set by stop(): running rebalances end (old and new replicas kept)

    def plan(self, config: TableConfig) -> list[Move]:
        ideal = self.store.ideal_state(config.name_with_type)
        if ideal is None:
            return []
        if config.is_realtime:
            return plan_rebalance(ideal.record, config.replication, self.pool(config))
        # Live tagged servers only: pushes place offline segments on live servers, and a segment moved to one that
        # is down would never be served (the move would wait out its timeout).
        eligible = eligible_instances(self.store.instances(), set(self.store.live_instance_ids()),
                                      offline_server_tag(config.tenants.server))
        # a dimension table: every eligible server, so servers added since its pushes get its segments
        return plan_offline_rebalance(ideal.record, replicas(config.replication, config.is_dim_table, eligible),
                                      eligible, self._partitions(config, ideal.record))

    def _partitions(self, config: TableConfig, ideal: IdealState) -> dict[str, int]:
        """Each segment of one partition of a partitioned offline table (``SegmentRecord.partitions``): the
        rebalance keeps it on its partition's servers, as the push placed it."""
        if config.is_dim_table or not config.indexing.extra.get("segmentPartitionConfig"):
            return {}
        found: dict[str, int] = {}
        for segment in ideal.segments:
            record = self.store.find_segment(config.name_with_type, segment)
            partition = configured_partition(config.indexing.extra,
                                             record.record.partitions if record is not None else None)
            if partition is not None:
                found[segment] = partition
        return found

    def status(self, table: str) -> dict[str, Any]:
        """The table's last rebalance as the store has it; IN_PROGRESS only while this leader runs it."""
        running = self.jobs.get(table)
        if running is not None and running["status"] == "IN_PROGRESS":
            return dict(running)
        found = self.store.find(RebalanceJob, self.store.paths.rebalance(table))
        if found is None:
            return {"table": table, "status": "NONE"}
        job = found.record.to_json()
        leader = self.leader()
        runner_gone = job["controller"] == self.me() or (leader is not None and leader != job["controller"])
        if job["status"] == "IN_PROGRESS" and runner_gone:  # its controller stopped leading (or died) before the end
            job["status"] = "STOPPED"
            job["error"] = (f"the controller running it ({job['controller'] or 'unknown'}) stopped before it ended; "
                            f"{len(job['left'])} segment(s) stay ONLINE on old and new replicas (safe); "
                            "run the rebalance again")
        return job

    def _record(self, job: dict[str, Any]) -> RebalanceJob:
        return RebalanceJob(table=job["table"], status=job["status"], moves=tuple(job["moves"]), done=job["done"],
                            left=tuple(job["left"]), error=job["error"], controller=job["controller"],
                            started_ms=job["startedMs"], updated_ms=self.clock_ms())

    def _save(self, job: dict[str, Any], *, first: bool = False) -> bool:
        """Write the job's progress to the store. The first write starts the record; later ones only update a
        record that is still this job's (same controller and start: a successor's job, or a deleted table, is
        never overwritten) — False when it is not. A failed write is logged and the move goes on: the status is
        for people, the ideal state is the truth."""
        path = self.store.paths.rebalance(job["table"])
        try:
            if first:
                self.store.put(path, self._record(job))
                return True

            def progress(stored: RebalanceJob) -> RebalanceJob:
                if (stored.controller, stored.started_ms) != (job["controller"], job["startedMs"]):
                    raise _Superseded(f"the rebalance record of {job['table']} belongs to another job now")
                return self._record(job)

            self.store.update(RebalanceJob, path, progress)
            return True
        except (_Superseded, RecordNotFoundError):
            return False
        except (CuveeError, OSError) as exc:
            log.warning("could not record the rebalance of %s: %s", job["table"], exc)
            return True

    def _table_exists(self, table: str) -> bool:
        return Catalog(self.store).find_table(table) is not None

    def start(self, config: TableConfig, moves: list[Move]) -> dict[str, Any]:
        table = config.name_with_type
        with self._lock:
            if self.jobs.get(table, {}).get("status") == "IN_PROGRESS":
                raise Conflict(f"a rebalance of {table} is in progress (GET /tables/{{t}}/rebalanceStatus)")
            job = {"table": table, "status": "IN_PROGRESS", "moves": [m.to_json() for m in moves], "done": 0,
                   "left": [m.segment for m in moves], "error": "", "controller": self.me(),
                   "startedMs": self.clock_ms()}
            self.jobs[table] = job
        self._save(job, first=True)
        threading.Thread(target=self._run, args=(table, moves, job), name=f"rebalance-{table}", daemon=True).start()
        return dict(job)

    def stop(self) -> None:
        self._stopping.set()

    def _acting(self) -> bool:
        return self.may_act() and not self._stopping.is_set()

    def _run(self, table: str, moves: list[Move], job: dict[str, Any]) -> None:
        try:
            if not self._acting():
                job["status"], job["error"] = "STOPPED", "this controller is no longer the leader, or stopping"
                return
            if not self._table_exists(table):
                raise _Superseded(f"table {table} was deleted")
            self.store.update_ideal_state(table, add_targets(moves))  # phase 1: old and new replicas together
            deadline = time.monotonic() + self.timeout_seconds
            left = list(moves)
            seen: dict[str, float] = {}  # segment -> when its new replicas were first seen serving it
            while left and self._acting():
                served = self._served(table)
                now = time.monotonic()
                for move in left:
                    if set(move.target) <= served.get(move.segment, set()):
                        seen.setdefault(move.segment, now)
                    else:
                        seen.pop(move.segment, None)
                # Phase 2 for those the new replicas have served for settle_seconds (brokers route by the external
                # view they last read: they must know the new replicas before the old ones go): the old replicas go
                ready = [m for m in left if m.segment in seen and now - seen[m.segment] >= self.settle_seconds]
                if ready:
                    if not self._table_exists(table):
                        raise _Superseded(f"table {table} was deleted")
                    self.store.update_ideal_state(table, drop_sources(ready, served))
                    left = [m for m in left if m not in ready]
                    job["done"] += len(ready)
                    job["left"] = [m.segment for m in left]
                    if not self._save(job):
                        raise _Superseded(f"the rebalance record of {table} was deleted or belongs to another job")
                if not left or time.monotonic() > deadline:
                    break
                # the external view moves on the controller's interval: look again then (or end at once on stop)
                self._stopping.wait(self.poll_seconds)
            if left:
                job["status"] = "TIMED_OUT" if self._acting() else "STOPPED"
                job["error"] = (f"{len(left)} segment(s) not yet served by their new replicas; they stay ONLINE on "
                                "old and new replicas (safe); run the rebalance again")
            else:
                job["status"] = "DONE"
            log.info("rebalance of %s: %s (%d of %d moved)", table, job["status"], job["done"], len(moves))
        except _Superseded as exc:  # its table went, or a newer job owns the record: end without writing
            job["status"], job["error"] = "STOPPED", str(exc)
            job["superseded"] = True
            log.info("rebalance of %s stopped: %s", table, exc)
        except Exception as exc:  # noqa: BLE001 - the job must end, whatever happened: never IN_PROGRESS forever
            job["status"], job["error"] = "FAILED", f"{type(exc).__name__}: {str(exc)[:500]}"
            log.warning("rebalance of %s failed: %s", table, exc, exc_info=not isinstance(exc, (CuveeError, OSError)))
        finally:
            if job["status"] != "IN_PROGRESS" and not job.pop("superseded", False):
                self._save(job)

    def _served(self, table: str) -> dict[str, set[str]]:
        view = self.store.external_view(table)
        if view is None:
            return {}
        return {segment: {i for i, state in replicas.items() if state is SegmentState.ONLINE}
                for segment, replicas in view.segments.items()}


class _Superseded(Exception):
    """The job must end without writing: its table was deleted, or its record belongs to another job."""


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.post("/tables/{table}/rebalance")
    def rebalance(table: str, dryRun: bool = True, type: str | None = None) -> dict[str, Any]:  # noqa: A002,N803 - Pinot's names
        ctl.require_leader()
        config = _table(ctl, table, type)
        if keeps_partitions_together(config):
            raise Conflict("rebalancing an upsert or strictReplicaGroup table is not supported yet: a partition's "
                           "segments must move together with its consuming segment")
        assert ctl.rebalancer is not None  # routes are served once the services started
        try:
            moves = ctl.rebalancer.plan(config)
        except AssignmentError as exc:
            raise BadRequest(f"cannot rebalance {config.name_with_type}: {exc}") from None
        if not moves:
            return {"table": config.name_with_type, "status": "NO_OP", "moves": []}
        if dryRun:
            return {"table": config.name_with_type, "status": "DRY_RUN", "moves": [m.to_json() for m in moves]}
        return ctl.rebalancer.start(config, moves)

    @api.get("/tables/{table}/rebalanceStatus")
    def rebalance_status(table: str, type: str | None = None) -> dict[str, Any]:  # noqa: A002 - Pinot's name
        config = _table(ctl, table, type)
        assert ctl.rebalancer is not None
        return ctl.rebalancer.status(config.name_with_type)

    return api


def _table(ctl: Controller, table: str, table_type: str | None) -> TableConfig:
    """The table ``table`` names: its only part, the part its suffix or ``type`` names; 400 when both exist and
    neither says which."""
    catalog = Catalog(ctl.store)
    wanted = (table_type or "").strip().upper()
    if wanted not in ("", "OFFLINE", "REALTIME"):
        raise BadRequest(f"type must be OFFLINE or REALTIME, got {table_type!r}")
    found = [t for t in (catalog.find_table(n) for n in catalog.resolve(table)) if t is not None]
    if wanted:
        found = [t for t in found if t.table_type.value == wanted]
        if not found:
            raise NotFound(f"table {table!r} has no {wanted} part")
    if not found:  # deleted between the lookups
        raise NotFound(f"table {table!r} does not exist")
    if len(found) > 1:
        raise BadRequest(f"table {table!r} has an OFFLINE and a REALTIME part: say which with type=OFFLINE|REALTIME")
    return found[0]
