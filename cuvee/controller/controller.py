"""The controller process: metadata store session, registration, leader election, and the REST service.

Any number of controllers may run; the election (``metastore.election(paths.leader, identifier=<url>)``) picks
one leader. Only the leader runs the completion protocol, commits, table writes and the external view writer;
standbys serve reads and answer the protocol with NOT_LEADER and the leader's URL. Leadership changes reach the
CompletionManager as LeadershipGained / LeadershipLost; a session leaving CONNECTED (SUSPENDED) stops every
leader-only duty at once, before the election's own notification arrives.

The session is a ``SessionHolder``: when it expires (LOST) a new one is opened in the background and the
controller registers again (instance record, ephemeral live node) and campaigns again; the HTTP service stays up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cuvee.auth.layer import internal_headers
from cuvee.auth.policy import Role
from cuvee.cluster.records import InstanceInfo
from cuvee.config.table import TableType
from cuvee.cluster.store import ClusterStore
from cuvee.controller.commit import SegmentCommitter
from cuvee.controller.completion_service import CompletionService
from cuvee.controller.config import ControllerConfig
from cuvee.controller.errors import NotLeader
from cuvee.controller.external_view_task import ExternalViewTask
from cuvee.controller.rebalance import Rebalancer
from cuvee.controller.repair import RepairTask
from cuvee.controller.retention import RetentionTask
from cuvee.controller.task_scheduler import TaskScheduler
from cuvee.controller.server_client import ServerClient
from cuvee.errors import CuveeError
from cuvee.metrics.controller import ControllerMetrics
from cuvee.story import StoryWriter
from cuvee.node.http import DEFAULT_MAX_BODY_BYTES, HttpService
from cuvee.node.liveness import go_live
from cuvee.node.session import SessionHolder
from cuvee.protocol.completion_http import HTTP_PORT_NAME
from cuvee.protocol.segment_name import LLCSegmentName
from cuvee.segment.archive import deep_store_key, upload_of
from cuvee.spi.deepstore import DeepStore, DeepStoreError, ObjectNotFoundError
from cuvee.spi.metastore import LeaderElection, MetadataStoreError, SessionState

log = logging.getLogger(__name__)

CONTROLLER_TAG = "controller"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Controller:
    """``Controller(config).start()``; ``url``, ``is_leader``, ``leader_url()``; ``stop()``."""

    def __init__(self, config: ControllerConfig, *, clock_ms: Callable[[], int] = wall_clock_ms):
        self.config = config
        self.clock_ms = clock_ms
        self.metastore: SessionHolder | None = None
        self._store: ClusterStore | None = None
        self._http: HttpService | None = None
        self._election: LeaderElection | None = None
        self._completion: CompletionService | None = None
        self._external_view: ExternalViewTask | None = None
        self._repair: RepairTask | None = None
        self._retention: RetentionTask | None = None
        self._task_scheduler: TaskScheduler | None = None
        self.deep_store: DeepStore | None = None
        self.rebalancer: Rebalancer | None = None  # set when the services start
        self.servers = ServerClient(config.server_timeout_seconds, internal_headers(config.auth),
                                    verify=config.tls.client_verify())
        self.metrics = ControllerMetrics()  # GET /metrics (cuvee.metrics.controller)
        self.story = StoryWriter(lambda: self._store, "controller", lambda: self.instance_id, self.clock_ms)
        self.received_segment_bytes = 0  # segment archive bytes received over HTTP (tar pushes)
        self._started = False
        self._lock = threading.Lock()
        self._sessions: set[str] = set()  # metadata-store sessions this process opened (their live nodes are ours)

    # ---- lifecycle ----

    def start(self) -> Controller:
        from cuvee.controller.app import build_app

        with self._lock:
            if self._started:
                raise CuveeError("controller already started")
            self._started = True
        if self.config.deep_store:
            from cuvee.deepstore import open_deepstore

            self.deep_store = open_deepstore(self.config.deep_store, self.config.s3)
        self.metastore = SessionHolder(self.config.metadata, retry_initial_seconds=self.config.session_retry_initial_seconds,
                                       retry_max_seconds=self.config.session_retry_max_seconds, name="controller")
        try:
            app = build_app(self)
            self._start_services(app)
        except BaseException:
            self.stop()
            raise
        log.info("controller %s serving at %s", self.instance_id, self.url)
        return self

    def _archive_location_ok(self, segment: LLCSegmentName, location: str) -> bool:
        """A commitEnd's location is an upload of this segment's archive (or the archive's own place) in the deep
        store, and it is there."""
        assert self.deep_store is not None
        table = segment.table + TableType.REALTIME.suffix
        try:
            key = self.deep_store.key_of(location)
            ours = key == deep_store_key(table, segment.name) or upload_of(key, table, segment.name)
            return ours and self.deep_store.exists(key)
        except (DeepStoreError, OSError, ValueError):
            return False

    def _place_archive(self, table: str, segment: str, location: str) -> str:
        """Move a committer's upload to the segment's archive key (a server-side copy on S3: no bytes through the
        controller); the URI to record, or "" when that fails (peers serve it; repair uploads it later)."""
        if self.deep_store is None:
            return location
        final = deep_store_key(table, segment)
        try:
            key = self.deep_store.key_of(location)
            if key == final:
                return location
            return self.deep_store.move(key, final)
        except ObjectNotFoundError:  # an earlier try of this commit moved it already
            return self.deep_store.uri(final) if self._exists(final) else ""
        except (DeepStoreError, OSError) as exc:
            log.warning("commit of %s/%s: could not move the upload %s into place (%s); peers serve the segment "
                        "until repair uploads it", table, segment, location[:256], exc)
            return ""

    def _exists(self, key: str) -> bool:
        assert self.deep_store is not None
        try:
            return self.deep_store.exists(key)
        except DeepStoreError:
            return False

    def _start_services(self, app: object) -> None:
        assert self.metastore is not None
        self._store = ClusterStore(self.metastore, self.config.cluster)
        body_cap = max(DEFAULT_MAX_BODY_BYTES, self.config.max_upload_bytes + (1 << 20))  # + multipart framing
        self._http = HttpService(app, self.config.host, self.config.port, name="controller",  # type: ignore[arg-type]
                                 max_body_bytes=body_cap, auth=self.config.auth, role=Role.CONTROLLER,
                                 tls=self.config.tls, store=self._store)
        timing = self.config.completion
        committer = SegmentCommitter(
            self._store, self.clock_ms, round(timing.max_segment_completion_seconds * 1000), lambda: self.is_leader,
            metrics=self.metrics, story=self.story,
            place_archive=self._place_archive if self.deep_store is not None else None,
        )
        self._completion = CompletionService(self._store, committer, timing.fsm_config(), self.clock_ms,
                                             self._archive_location_ok if self.deep_store is not None else None,
                                             metrics=self.metrics, story=self.story)
        self._repair = RepairTask(
            self._store,
            committer,
            self.clock_ms,
            round(timing.max_segment_completion_seconds * 1000),
            self.config.repair_interval_seconds,
            lambda: self.is_leader and self._session_connected(),
            stop_timeout=self.config.repair_stop_seconds,
            deep_store=self.deep_store,
            download_timeout=self.config.server_timeout_seconds,
            peer_headers=internal_headers(self.config.auth),
            peer_verify=self.config.tls.client_verify(),
            story=self.story,
        )
        self.rebalancer = Rebalancer(self._store, lambda: self.is_leader, self.config.rebalance_timeout_seconds,
                                     committer.placement_pool, poll_seconds=self.config.external_view_interval_seconds,
                                     settle_seconds=self.config.rebalance_settle_seconds,
                                     me=lambda: self.url, leader=self.leader_url, clock_ms=self.clock_ms)
        self.metrics.watch_repair(lambda: dict(self._repair.stats) if self._repair is not None else {})
        self.metrics.watch_received(lambda: {"tar_push": self.received_segment_bytes, "repair_upload":
                                             self._repair.received_bytes if self._repair is not None else 0})
        self._retention = RetentionTask(
            self._store,
            self.deep_store,
            self.clock_ms,
            self.config.retention_interval_seconds,
            lambda: self.is_leader and self._session_connected(),
            deletion_grace_ms=round(self.config.deletion_grace_seconds * 1000),
            lineage_grace_ms=round(self.config.lineage_grace_seconds * 1000),
            in_progress_timeout_ms=round(self.config.lineage_in_progress_timeout_seconds * 1000),
            stale_upload_ms=round(self.config.stale_upload_seconds * 1000),
            stop_timeout=self.config.repair_stop_seconds,
        )
        from cuvee.controller.api_tasks import due_for  # the REST module owns the "what is due" answer

        self._task_scheduler = TaskScheduler(self, lambda full, task_type: due_for(self, full, task_type),
                                             lambda: self.is_leader and self._session_connected())
        self._external_view = ExternalViewTask(
            self._store,
            self.config.external_view_interval_seconds,
            lambda: self.is_leader,
            stop_timeout=self.config.external_view_stop_seconds,
        )
        self._register()
        self.metastore.on_renewal(lambda: self._register(renewal=True))
        self.metastore.add_state_listener(self._on_session_state)
        self._http.start()
        self._external_view.start()
        self._repair.start()
        self._retention.start()
        self._task_scheduler.start()
        self._election = self.metastore.election(self.store.paths.leader, self.url, self._on_leadership)
        self._election.start()

    def stop(self) -> None:
        """Resign (so a standby takes over at once), stop serving, end the session."""
        if self._election is not None:
            self._election.resign()
        if self._completion is not None:
            self._completion.leadership_lost(None)
        if self._external_view is not None:
            self._external_view.stop()
        if self._repair is not None:
            self._repair.stop()
        if self._retention is not None:
            self._retention.stop()
        if self._task_scheduler is not None:
            self._task_scheduler.stop()
        if self.rebalancer is not None:
            self.rebalancer.stop()
        if self._http is not None:
            self._http.stop()
        if self.metastore is not None:
            self.metastore.close()

    def __enter__(self) -> Controller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- identity and leadership ----

    @property
    def url(self) -> str:
        assert self._http is not None, "controller not started"
        return self._http.url

    @property
    def instance_id(self) -> str:
        if self.config.instance_id:
            return self.config.instance_id
        assert self._http is not None
        return f"Controller_{self._http.host}_{self._http.port}"

    @property
    def is_leader(self) -> bool:
        return self._election is not None and self._election.is_leader

    def leader_url(self) -> str | None:
        if self.is_leader:
            return self.url
        if self._election is None:
            return None
        try:
            return self._election.leader_id()
        except MetadataStoreError:
            return None

    def _session_connected(self) -> bool:
        return self.metastore is not None and self.metastore.state is SessionState.CONNECTED

    def refresh_principals(self) -> None:
        """Re-read the principals kept in the metadata store now (after ``/users`` changed them)."""
        if self._http is not None and self._http.principals is not None:
            self._http.principals.refresh()

    def require_leader(self) -> None:
        if not self.is_leader:
            raise NotLeader(self.leader_url())

    @property
    def store(self) -> ClusterStore:
        assert self._store is not None, "controller not started"
        return self._store

    @property
    def completion(self) -> CompletionService:
        assert self._completion is not None, "controller not started"
        return self._completion

    @property
    def external_view(self) -> ExternalViewTask:
        assert self._external_view is not None, "controller not started"
        return self._external_view

    @property
    def repair(self) -> RepairTask:
        assert self._repair is not None, "controller not started"
        return self._repair

    @property
    def task_scheduler(self) -> TaskScheduler:
        assert self._task_scheduler is not None, "controller not started"
        return self._task_scheduler

    @property
    def retention(self) -> RetentionTask:
        assert self._retention is not None, "controller not started"
        return self._retention

    def _register(self, *, renewal: bool = False) -> None:
        """At start, and again on each new session (``cuvee.node.liveness``: a live node left by one of our
        sessions is replaced; one of another session is waited for, bounded by the session timeout)."""
        assert self._http is not None
        live = self.store.paths.live(self.instance_id)
        go_live(self.store.metastore, live, self.instance_id, own_sessions=self._sessions, create=False)  # id free
        info = InstanceInfo(self.instance_id, self._http.host, {HTTP_PORT_NAME: self._http.port}, (CONTROLLER_TAG,),
                            tls=self._http.tls)
        self.store.register_instance(info)
        self._sessions.add(go_live(self.store.metastore, live, self.instance_id, own_sessions=self._sessions))

    def _on_leadership(self, leader: bool) -> None:
        if leader and self.is_leader:
            log.info("controller %s is now the leader", self.url)
            self.completion.committer.forget_learners()  # learn on from the newest recorded R, not our old one
            self.completion.leadership_gained()
            self.external_view.poke()
            self.repair.poke()
            self.retention.poke()
        elif not leader:
            log.info("controller %s is no longer the leader", self.url)
            self.completion.leadership_lost(self.leader_url())

    def _on_session_state(self, state: SessionState) -> None:
        if state is not SessionState.CONNECTED and self._completion is not None:
            self._completion.leadership_lost(None)  # SUSPENDED: stop at once, the election catches up
