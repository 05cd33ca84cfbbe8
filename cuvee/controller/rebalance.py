"""``POST /tables/{t}/rebalance`` (Pinot's; a dry run unless ``dryRun=false``) and ``GET /tables/{t}/rebalanceStatus``:
the leader moves a realtime table's committed segments onto the servers tagged now (``cuvee.cluster.rebalance``),
each move made before it is broken, in a thread of its own; one rebalance per table at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.rebalance import Move, add_targets, drop_sources, plan_rebalance
from cuvee.cluster.records import SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.catalog import Catalog
from cuvee.controller.commit import keeps_partitions_together
from cuvee.controller.errors import BadRequest, Conflict
from cuvee.errors import CuveeError

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, store: ClusterStore, may_act: Callable[[], bool], timeout_seconds: float,
                 pool: Callable[[TableConfig], list[str]], poll_seconds: float = 0.5, settle_seconds: float = 5.0):
        """``pool``: the servers a table's partitions are spread over now (``SegmentCommitter.placement_pool``),
        the same ones consuming segments are placed on at commits."""
        self.pool = pool
        self.settle_seconds = settle_seconds  # after the new replicas serve a segment, before the old ones go
        self.store = store
        self.may_act = may_act
        self.timeout_seconds = timeout_seconds
        self.poll_seconds = poll_seconds
        self.jobs: dict[str, dict[str, Any]] = {}  # table -> the last rebalance's status
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # set by stop(): running rebalances end (old and new replicas kept)

    def plan(self, config: TableConfig) -> list[Move]:
        ideal = self.store.ideal_state(config.name_with_type)
        if ideal is None:
            return []
        return plan_rebalance(ideal.record, config.replication, self.pool(config))

    def start(self, config: TableConfig, moves: list[Move]) -> dict[str, Any]:
        table = config.name_with_type
        with self._lock:
            if self.jobs.get(table, {}).get("status") == "IN_PROGRESS":
                raise Conflict(f"a rebalance of {table} is in progress (GET /tables/{{t}}/rebalanceStatus)")
            job = {"table": table, "status": "IN_PROGRESS", "moves": [m.to_json() for m in moves], "done": 0,
                   "left": [m.segment for m in moves], "error": ""}
            self.jobs[table] = job
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
                    self.store.update_ideal_state(table, drop_sources(ready, served))
                    left = [m for m in left if m not in ready]
                    job["done"] += len(ready)
                    job["left"] = [m.segment for m in left]
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
        except Exception as exc:  # noqa: BLE001 - the job must end, whatever happened: never IN_PROGRESS forever
            job["status"], job["error"] = "FAILED", f"{type(exc).__name__}: {str(exc)[:500]}"
            log.warning("rebalance of %s failed: %s", table, exc, exc_info=not isinstance(exc, (CuveeError, OSError)))

    def _served(self, table: str) -> dict[str, set[str]]:
        view = self.store.external_view(table)
        if view is None:
            return {}
        return {segment: {i for i, state in replicas.items() if state is SegmentState.ONLINE}
                for segment, replicas in view.segments.items()}


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.post("/tables/{table}/rebalance")
    def rebalance(table: str, dryRun: bool = True) -> dict[str, Any]:  # noqa: N803 - Pinot's name
        ctl.require_leader()
        config = Catalog(ctl.store).realtime(table)
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
    def rebalance_status(table: str) -> dict[str, Any]:
        config = Catalog(ctl.store).realtime(table)
        assert ctl.rebalancer is not None
        return dict(ctl.rebalancer.jobs.get(config.name_with_type) or {"table": config.name_with_type,
                                                                         "status": "NONE"})

    return api
