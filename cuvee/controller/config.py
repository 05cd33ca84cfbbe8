"""The controller's configuration: a frozen dataclass loaded from TOML with ``cuvee.node.config.load_config``.

Every interval and timeout is seconds, so tests can make failure cases fast. Example::

    cluster = "cuvee"
    metadata = "sqlite:///var/cuvee/meta.db"
    deep_store = "file:///var/cuvee/deepstore"
    port = 9000
    [completion]
    hold_seconds = 3.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvee.auth.config import AuthConfig
from cuvee.deepstore.s3 import S3Settings
from cuvee.node.tls import TlsConfig
from cuvee.controller.completion_types import CompletionConfig


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if value <= 0:
            raise ValueError(f"{owner}.{name} must be positive, got {value}")


@dataclass(frozen=True)
class CompletionTiming:
    """The segment completion protocol's timing (DESIGN.md section 4), in seconds.

    ``hold_seconds``: the FSM's waits for replicas to report and for a chosen committer to come back (servers
    re-send segmentConsumed while told HOLD at their own ``consumer.hold_retry_seconds``, which should be less).
    ``commit_lease_seconds``: the build lease a committer gets. ``max_commit_seconds``: no lease reaches past this.
    ``max_segment_completion_seconds``: a commit whose step 1 is older than this when step 3 is due is abandoned
    to the repair task (the seed's MAX_SEGMENT_COMPLETION_TIME), so a slow controller and the repair never both
    create a next segment."""

    hold_seconds: float = 3.0
    commit_lease_seconds: float = 120.0
    max_commit_seconds: float = 1800.0
    max_segment_completion_seconds: float = 120.0

    def __post_init__(self) -> None:
        _positive(
            "completion",
            hold_seconds=self.hold_seconds,
            commit_lease_seconds=self.commit_lease_seconds,
            max_commit_seconds=self.max_commit_seconds,
            max_segment_completion_seconds=self.max_segment_completion_seconds,
        )
        self.fsm_config()  # raises ValueError for inconsistent timings

    def fsm_config(self) -> CompletionConfig:
        return CompletionConfig(
            hold_ms=max(1, round(self.hold_seconds * 1000)),
            commit_timeout_ms=max(1, round(self.commit_lease_seconds * 1000)),
            max_commit_ms=max(1, round(self.max_commit_seconds * 1000)),
        )


@dataclass(frozen=True)
class TaskSchedulerConfig:
    """The lead controller's maintenance-task scheduler (docs/maintenance.md). ``mode``: ``local`` launches due
    jobs (``cuvee pipeline <job>``) as child processes on ``spark_master``; ``external`` only shows what is due
    (``GET /tasks/{t}``) and leaves running jobs to an outside scheduler (cron, Airflow). At most
    ``max_concurrent_jobs`` run at once; a job running past ``job_timeout_seconds`` is killed (its lineage entry
    is reverted by the next run). With auth on, jobs use the bearer token in ``token_file`` (a principal with
    UPDATE on the tables). Job output goes to ``log_dir`` (default: ``<temp dir>/cuvee-task-logs``)."""

    mode: str = "local"
    interval_seconds: float = 300.0
    spark_master: str = "local[*]"
    max_concurrent_jobs: int = 1
    job_timeout_seconds: float = 3600.0
    token_file: str = ""
    log_dir: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("local", "external"):
            raise ValueError(f"tasks.mode must be local or external, got {self.mode!r}")
        _positive("tasks", interval_seconds=self.interval_seconds, max_concurrent_jobs=self.max_concurrent_jobs,
                  job_timeout_seconds=self.job_timeout_seconds)
        if self.max_concurrent_jobs > 64:
            raise ValueError("tasks.max_concurrent_jobs must be at most 64")


@dataclass(frozen=True)
class ControllerConfig:
    """One controller process. ``metadata`` is the metadata store URI (``sqlite:///...`` or ``zk://...``);
    ``deep_store`` the deep store URI (empty: none configured). ``port`` 0 picks a free port. ``instance_id``
    defaults to ``Controller_<host>_<port>``. ``repair_interval_seconds``: how often the leader's repair task
    (``cuvee.controller.repair``) walks the realtime tables; ``repair_stop_seconds`` bounds waiting for a pass in
    progress at shutdown. ``retention_interval_seconds``: how often the leader deletes segments past their table's
    retention (and deep-store objects past their grace period). ``deletion_grace_seconds``: how long a deleted
    segment's deep-store object is kept; ``lineage_grace_seconds``: how long segments replaced by a lineage entry
    stay (not served) before they are deleted; ``lineage_end_timeout_seconds``: how long endReplaceSegments waits for
    the new segments to be ONLINE somewhere before flipping the entry (409 after);
    ``lineage_in_progress_timeout_seconds``: after how long the retention task reverts a replace nobody ended
    (the pusher died and no re-run cleaned up). ``new_segment_grace_seconds``: an offline segment pushed this
    recently and ONLINE nowhere yet does not count for the computed time boundary (the broker has the same key).
    ``max_upload_bytes``: the largest segment archive a tar push may
    send (metadata pushes send no bytes)."""

    metadata: str
    cluster: str = "cuvee"
    host: str = "127.0.0.1"
    port: int = 0
    deep_store: str = ""
    instance_id: str = ""
    completion: CompletionTiming = field(default_factory=CompletionTiming)
    external_view_interval_seconds: float = 1.0
    external_view_stop_seconds: float = 5.0
    repair_interval_seconds: float = 60.0
    repair_stop_seconds: float = 5.0
    retention_interval_seconds: float = 3600.0
    deletion_grace_seconds: float = 7 * 86400.0
    lineage_grace_seconds: float = 3600.0
    lineage_end_timeout_seconds: float = 300.0
    lineage_in_progress_timeout_seconds: float = 86400.0
    new_segment_grace_seconds: float = 300.0
    rebalance_timeout_seconds: float = 600.0  # a rebalance waits this long for new replicas to serve their segments
    # once new replicas serve a segment, the rebalance waits this long before dropping the old ones: brokers must
    # have read the external view that lists the new replicas (their routing_poll_seconds, or a watch, sooner)
    rebalance_settle_seconds: float = 5.0
    stale_upload_seconds: float = 3600.0  # a committer's upload no commit moved into place is deleted after this
    max_upload_bytes: int = 256 * 1024 * 1024
    server_timeout_seconds: float = 5.0
    console_query_timeout_seconds: float = 60.0  # POST /sql (the console's queries) waits this long for a broker
    session_retry_initial_seconds: float = 0.5
    session_retry_max_seconds: float = 10.0
    tasks: TaskSchedulerConfig = field(default_factory=TaskSchedulerConfig)  # docs/maintenance.md
    auth: AuthConfig = field(default_factory=AuthConfig)  # docs/security.md
    tls: TlsConfig = field(default_factory=TlsConfig)  # docs/security.md
    s3: S3Settings = field(default_factory=S3Settings)  # s3:// deep stores (docs/configuration.md)

    def __post_init__(self) -> None:
        if not self.metadata:
            raise ValueError("metadata (the metadata store URI) is required")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        _positive(
            "controller",
            external_view_interval_seconds=self.external_view_interval_seconds,
            external_view_stop_seconds=self.external_view_stop_seconds,
            repair_interval_seconds=self.repair_interval_seconds,
            repair_stop_seconds=self.repair_stop_seconds,
            retention_interval_seconds=self.retention_interval_seconds,
            lineage_end_timeout_seconds=self.lineage_end_timeout_seconds,
            lineage_in_progress_timeout_seconds=self.lineage_in_progress_timeout_seconds,
            max_upload_bytes=self.max_upload_bytes,
            server_timeout_seconds=self.server_timeout_seconds,
            console_query_timeout_seconds=self.console_query_timeout_seconds,
            stale_upload_seconds=self.stale_upload_seconds,
            rebalance_timeout_seconds=self.rebalance_timeout_seconds,
            rebalance_settle_seconds=self.rebalance_settle_seconds,
            session_retry_initial_seconds=self.session_retry_initial_seconds,
            session_retry_max_seconds=self.session_retry_max_seconds,
        )
        if min(self.deletion_grace_seconds, self.lineage_grace_seconds, self.new_segment_grace_seconds) < 0:
            raise ValueError("deletion_grace_seconds, lineage_grace_seconds and new_segment_grace_seconds must be 0 "
                             "or more")
        if self.stale_upload_seconds <= self.completion.max_segment_completion_seconds:
            raise ValueError("stale_upload_seconds must exceed completion.max_segment_completion_seconds: an upload "
                             "younger than a commit may take is never stale")
        if self.session_retry_max_seconds < self.session_retry_initial_seconds:
            raise ValueError("session_retry_max_seconds must be at least session_retry_initial_seconds")
