"""The lead controller's maintenance-task scheduler: every ``tasks.interval_seconds`` it asks each table's task
planners what is due (the same answer as ``GET /tasks/{t}``) and, in ``local`` mode, launches ``cuvee pipeline
<job> --table T`` as a child process on the configured Spark master, at most ``max_concurrent_jobs`` at once
(``cuvee.maintenance.schedule.pick_launches``). ``POST /tasks/{t}/{type}/run`` launches one now in either mode.

A job reports its own start and end to the controller; a job that dies without reporting (killed, crashed, timed
out) is recorded here as FAILED with its exit status and the tail of its log. Jobs run in their own process
group, so a timeout or the controller's stop ends Spark's JVM with them; their lineage entries stay IN_PROGRESS
and the next run reverts them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuvee.cluster.records import TaskState
from cuvee.controller.catalog import Catalog
from cuvee.controller.periodic import PeriodicTask
from cuvee.maintenance.config import task_configs
from cuvee.maintenance.schedule import Candidate, pick_launches

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

log = logging.getLogger(__name__)
COMMANDS = {"MergeRollupTask": "merge-rollup", "RealtimeToOfflineSegmentsTask": "realtime-to-offline",
            "UpsertCompactionTask": "compact-upsert"}


class JobAlreadyRunning(Exception):
    """A launch refused: the same table and task type runs already, or ``max_concurrent_jobs`` jobs do (409)."""


@dataclass
class Launch:
    table: str  # raw name
    full: str  # the half the task runs on
    task_type: str
    process: subprocess.Popen[bytes]
    started_ms: int
    started: float  # monotonic
    log_path: Path
    reason: str  # "scheduled" or "requested"

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.process.pid, "startedMs": self.started_ms, "log": self.log_path.name,
                "reason": self.reason}


class TaskScheduler(PeriodicTask):
    def __init__(self, ctl: Controller, due: Callable[[str, str], list[dict[str, Any]]],
                 should_run: Callable[[], bool]):
        config = ctl.config.tasks
        super().__init__("task-scheduler", config.interval_seconds, should_run, ctl.config.repair_stop_seconds)
        self.ctl, self.config, self.due = ctl, config, due
        self.launches: dict[tuple[str, str], Launch] = {}
        self.launched = 0
        self.killed_for_timeout = 0
        self.failed_passes = 0
        self._lock = threading.Lock()

    # ---- the pass ----

    def run_pass(self) -> None:
        try:
            self.reap()
            candidates = self._due_candidates()  # also moves watermarks over windows needing no job, in any mode
            if self.config.mode != "local":
                return
            with self._lock:
                picked = pick_launches(candidates, set(self.launches), self.config.max_concurrent_jobs)
            for candidate in picked:
                try:
                    self.launch(candidate.table, candidate.full, candidate.task_type, "scheduled")
                except JobAlreadyRunning:
                    continue
        except Exception:
            self.failed_passes += 1
            log.exception("a task-scheduler pass failed; the next one retries")

    def _due_candidates(self) -> list[Candidate]:
        catalog = Catalog(self.ctl.store)
        out = []
        for full in catalog.table_names():
            config = catalog.find_table(full)
            if config is None or "task" not in config.extra:
                continue
            try:
                types = task_configs(config).types
            except Exception as exc:  # an invalid stored config: GET /tasks says so; nothing to launch
                log.warning("%s: its task configs are invalid, no maintenance task is launched for it: %s", full,
                            str(exc)[:500])
                continue
            for task_type in types:
                try:
                    if not self.due(full, task_type):
                        continue
                except Exception:
                    log.exception("planning %s of %s failed", task_type, full)
                    continue
                found = self.ctl.store.find(TaskState, self.ctl.store.paths.task(full, task_type))
                last = found.record.last_run if found is not None else None
                running = found.record.running if found is not None else None
                if running and self.ctl.clock_ms() - int(running.get("startedMs") or 0) < \
                        self.config.job_timeout_seconds * 1000:
                    continue  # a run started elsewhere (a user's command) is going on: not a second one
                if (last or {}).get("status") in ("FAILED", "NOTHING_TO_DO") and \
                        self.ctl.clock_ms() - int(last.get("endedMs") or 0) < 4 * self.config.interval_seconds * 1000:
                    # a failing task is retried every fourth pass, not every pass; so is one whose "due" was only a
                    # cheap guess its last run found nothing in (UpsertCompactionTask asks the replicas)
                    continue
                out.append(Candidate(config.table_name, task_type, (last or {}).get("endedMs"), full))
        return out

    # ---- processes ----

    def launch(self, table: str, full: str, task_type: str, reason: str) -> Launch:
        """Start ``cuvee pipeline <job> --table table`` now (JobAlreadyRunning if one is running)."""
        with self._lock:
            self._reap_locked()
            key = (table, task_type)
            if key in self.launches:
                raise JobAlreadyRunning(f"a {task_type} job for {table} is running (pid "
                                        f"{self.launches[key].process.pid})")
            if len(self.launches) >= self.config.max_concurrent_jobs:
                raise JobAlreadyRunning(f"{len(self.launches)} maintenance job(s) are running, the most "
                                        "[tasks] max_concurrent_jobs allows; try again when one ends")
            log_dir = Path(self.config.log_dir or Path(tempfile.gettempdir()) / "cuvee-task-logs")
            log_dir.mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
            log_path = log_dir / f"{table}.{COMMANDS[task_type]}.{stamp}.log"
            command = [sys.executable, "-m", "cuvee", "pipeline", COMMANDS[task_type], "--controller", self.ctl.url,
                       "--table", table, "--master", self.config.spark_master]
            with open(log_path, "ab") as out:
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=self._environment(), start_new_session=True)
            launch = Launch(table, full, task_type, process, self.ctl.clock_ms(), time.monotonic(), log_path, reason)
            self.launches[key] = launch
            self.launched += 1
        log.info("launched %s on %s (pid %d, log %s)", task_type, table, process.pid, log_path)
        return launch

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if self.config.token_file:
            env["CUVEE_TOKEN"] = Path(self.config.token_file).read_text().strip()
        tls = self.ctl.config.tls
        if tls.ca_file:
            env["SSL_CERT_FILE"] = tls.ca_file
        return env

    def reap(self) -> None:
        with self._lock:
            self._reap_locked()

    def _reap_locked(self) -> None:
        for key, launch in list(self.launches.items()):
            code = launch.process.poll()
            if code is None and time.monotonic() - launch.started > self.config.job_timeout_seconds:
                log.warning("%s on %s ran past %.0f s: killing it", launch.task_type, launch.table,
                            self.config.job_timeout_seconds)
                self._kill(launch)
                self.killed_for_timeout += 1
                code = launch.process.wait(10)
            if code is None:
                continue
            del self.launches[key]
            if code != 0:
                self._record_failure(launch, code)

    def _record_failure(self, launch: Launch, code: int) -> None:
        """The job ended badly: unless it reported its end itself (a FAILED run), record that it died."""
        full = launch.full
        now = self.ctl.clock_ms()
        # the log's text stays on the controller's disk (it may hold paths and internals): its name is enough
        message = f"the job exited with status {code}; see {launch.log_path.name} in the controller's task log dir"

        recorded = [False]

        def died(current: TaskState) -> TaskState:
            last = current.last_run or {}
            recorded[0] = int(last.get("endedMs") or 0) < launch.started_ms
            if not recorded[0]:
                return current  # it reported its own end
            run = {"runId": "", "status": "FAILED", "message": message[:2000], "startedMs": launch.started_ms,
                   "endedMs": now, "durationMs": now - launch.started_ms}
            return TaskState(full, launch.task_type, current.watermarks, None, run)

        try:
            self.ctl.store.update(TaskState, self.ctl.store.paths.task(full, launch.task_type), died,
                                  initial=TaskState(full, launch.task_type))
            if recorded[0]:
                self.ctl.metrics.task_runs.labels(full, launch.task_type, "FAILED").inc()
        except Exception:
            log.exception("could not record the failed %s run of %s", launch.task_type, full)

    @staticmethod
    def _kill(launch: Launch) -> None:
        try:
            os.killpg(launch.process.pid, signal.SIGKILL)  # the job and its Spark JVM
        except ProcessLookupError:
            return  # it ended on its own meanwhile

    def running(self, table: str, task_type: str) -> Launch | None:
        with self._lock:
            self._reap_locked()
            return self.launches.get((table, task_type))

    def idle(self) -> None:
        """Not leading: still reap (no zombies) and enforce the jobs' timeout."""
        try:
            self.reap()
        except Exception:
            log.exception("reaping maintenance jobs failed")

    def stop(self) -> None:
        super().stop()
        with self._lock:
            for launch in self.launches.values():
                self._kill(launch)
            for launch in self.launches.values():
                try:
                    launch.process.wait(5)
                except subprocess.TimeoutExpired:
                    log.warning("maintenance job pid %d did not end after SIGKILL", launch.process.pid)
            self.launches.clear()


