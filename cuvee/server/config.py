"""The server role's configuration: a TOML file (``cuvee server --config F``) onto a frozen dataclass.

Every interval is seconds, so tests shrink them. Example::

    cluster = "cuvee"
    metadata = "sqlite:///var/cuvee/meta.db"
    deep_store = "file:///var/cuvee/deepstore"
    data_dir = "/var/cuvee/server-1"
    port = 8098

    [consumer]
    fetch_max_messages = 10000
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvee.auth.config import AuthConfig
from cuvee.deepstore.s3 import S3Settings
from cuvee.node.tls import TlsConfig
from cuvee.errors import UserError
from cuvee.node.config import load_config
from cuvee.query.limits import ServerQueryLimits
from cuvee.query.group_trim import DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE, DEFAULT_NUM_GROUPS_LIMIT, INT_MAX
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.query.execute import SMALL_INPUT_ROWS
from cuvee.server.native_copies import DEFAULT_NATIVE_COPY_BYTES
from cuvee.server.plain_copies import DEFAULT_PLAIN_COPY_BYTES, DEFAULT_PLAIN_COPY_MIN_IDLE_SECONDS

DEFAULT_TAGS = ("DefaultTenant_REALTIME", "DefaultTenant_OFFLINE")  # the default tenant's realtime and offline work


@dataclass(frozen=True)
class ServerConfig:
    """Where the server finds the cluster, where it keeps segments, and how fast it reacts."""

    cluster: str = "cuvee"
    metadata: str = ""
    deep_store: str = ""
    data_dir: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    instance_id: str = ""  # default Server_<host>_<port> (the port actually bound)
    tags: tuple[str, ...] = DEFAULT_TAGS
    ideal_state_poll_seconds: float = 5.0  # fallback when a watch event is missed
    transition_workers: int = 4
    # Segment builds running at once on this server (Pinot's realtime.max.parallel.segment.builds); 0: no cap.
    # Many partitions filling at once otherwise build together, each holding its columns twice in memory.
    max_parallel_segment_builds: int = 0
    download_retry_initial_seconds: float = 0.5
    download_retry_max_seconds: float = 30.0
    download_max_attempts: int = 8
    download_timeout_seconds: float = 60.0  # one HTTP request to a peer
    error_retry_initial_seconds: float = 5.0  # an ERROR replica is retried this long after its first failure ...
    error_retry_max_seconds: float = 300.0  # ... doubling per failure in a row, capped here
    follower_join_timeout_seconds: float = 10.0  # stop() waits this long for the follower's planning thread
    session_retry_initial_seconds: float = 0.5  # an expired metadata-store session is re-opened after this ...
    session_retry_max_seconds: float = 10.0  # ... doubling per failed attempt, capped here
    # Bytes of committed upsert segments' valid rows kept for queries (cuvee.upsert.reads); 0: none kept, every
    # query filters all stored versions in its scan.
    upsert_read_cache_bytes: int = 256 * 1024 * 1024
    # Bytes of plain (decoded) copies of committed segments' dictionary columns kept for queries (DuckDB scans
    # them faster: cuvee.server.queryable); the least recently read go first. 0: none kept, columns are scanned
    # encoded.
    plain_copy_bytes: int = DEFAULT_PLAIN_COPY_BYTES
    # Only copies nobody read for this long are dropped to make room for another; a column finding no room is
    # scanned encoded for this long, then tried again (cuvee.server.plain_copies: no thrashing when the columns
    # queries read outgrow plain_copy_bytes).
    plain_copy_min_idle_seconds: float = DEFAULT_PLAIN_COPY_MIN_IDLE_SECONDS
    # Committed segments copied into DuckDB database files (<data_dir>/.native-copies), which queries over at
    # least native_copy_min_rows rows scan instead of the Arrow views (cuvee.server.native_copies: filters, string
    # functions and wide scans run several times faster), bounded by the copied rows' decoded bytes (on disk they
    # are compressed); 0: none. A query over fewer rows asks for no copies (the Arrow views answer it as fast);
    # one over more asks for copies of every segment it reads, however small; copies idle for
    # native_copy_min_idle_seconds make room for others.
    native_copy_bytes: int = DEFAULT_NATIVE_COPY_BYTES
    native_copy_min_rows: int = SMALL_INPUT_ROWS
    native_copy_min_idle_seconds: float = DEFAULT_PLAIN_COPY_MIN_IDLE_SECONDS
    # DuckDB threads each query may use (its scan of the native copies and of the segments' Arrow views); 0: every
    # core (DuckDB's default). Servers sharing a machine share its cores: `cuvee cluster up` gives each of its N
    # servers cores // N (at least 1) unless set, as N servers each running every core on 2 cores spent ~1 ms more
    # CPU per query each in DuckDB's thread hand-offs, with no wall time gained.
    query_threads: int = 0
    # The bytes all consuming segments of this server may use together (their columns, dictionaries and indexes),
    # split evenly among them; a segment that reaches its share ends early (stop reason memoryLimit) instead of
    # growing the process until the OOM killer ends it. 0: no budget.
    consuming_memory_bytes: int = 0
    # Pinot's server query settings for GROUP BY (cuvee.query.group_trim), the defaults of the query options
    # numGroupsLimit (groups one server keeps; more are dropped and numGroupsLimitReached says so) and
    # minServerGroupTrimSize (a GROUP BY … ORDER BY keeps its top max(5 × (LIMIT + OFFSET), this) groups;
    # <= 0: no trim).
    num_groups_limit: int = DEFAULT_NUM_GROUPS_LIMIT
    min_server_group_trim_size: int = DEFAULT_MIN_SERVER_GROUP_TRIM_SIZE
    consumer: ConsumerConfig = field(default_factory=ConsumerConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)  # docs/security.md
    tls: TlsConfig = field(default_factory=TlsConfig)  # docs/security.md
    s3: S3Settings = field(default_factory=S3Settings)  # s3:// deep stores (docs/configuration.md)
    # the size and depth of the SQL a broker sends (``cuvee.query.limits``): docs/security.md
    query_limits: ServerQueryLimits = field(default_factory=ServerQueryLimits)

    def __post_init__(self) -> None:
        for name in ("ideal_state_poll_seconds", "download_retry_initial_seconds", "download_retry_max_seconds",
                     "download_timeout_seconds", "error_retry_initial_seconds", "error_retry_max_seconds",
                     "follower_join_timeout_seconds", "session_retry_initial_seconds", "session_retry_max_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.consuming_memory_bytes < 0:
            raise ValueError("consuming_memory_bytes must be 0 (no budget) or positive")
        if self.session_retry_max_seconds < self.session_retry_initial_seconds:
            raise ValueError("session_retry_max_seconds must be at least session_retry_initial_seconds")
        if self.transition_workers < 1 or self.download_max_attempts < 1:
            raise ValueError("transition_workers and download_max_attempts must be at least 1")
        if self.upsert_read_cache_bytes < 0:
            raise ValueError("upsert_read_cache_bytes must be 0 (no cache) or positive")
        if self.plain_copy_bytes < 0:
            raise ValueError("plain_copy_bytes must be 0 (no copies kept) or positive")
        if self.plain_copy_min_idle_seconds < 0:
            raise ValueError("plain_copy_min_idle_seconds must be 0 or positive")
        if self.native_copy_bytes < 0:
            raise ValueError("native_copy_bytes must be 0 (none kept) or positive")
        if self.native_copy_min_rows < 1:
            raise ValueError("native_copy_min_rows must be at least 1")
        if self.native_copy_min_idle_seconds < 0:
            raise ValueError("native_copy_min_idle_seconds must be 0 or positive")
        if not 0 <= self.query_threads <= 1024:
            raise ValueError("query_threads must be 0 (every core) or from 1 to 1024")
        if self.max_parallel_segment_builds < 0:
            raise ValueError("max_parallel_segment_builds must be 0 (no cap) or positive")
        if not 1 <= self.num_groups_limit <= INT_MAX:
            raise ValueError(f"num_groups_limit must be from 1 to {INT_MAX}")
        if not -INT_MAX - 1 <= self.min_server_group_trim_size <= INT_MAX:
            raise ValueError(f"min_server_group_trim_size must be from {-INT_MAX - 1} to {INT_MAX} (<= 0: no trim)")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in 0..65535, got {self.port}")

    def check_complete(self) -> None:
        """The keys a running server cannot do without (defaults exist only so tests can build configs piecewise)."""
        missing = [k for k in ("metadata", "deep_store", "data_dir") if not getattr(self, k)]
        if missing:
            raise UserError(f"server config: missing {', '.join(missing)}")

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


def load_server_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    return load_config(ServerConfig, path, overrides)
