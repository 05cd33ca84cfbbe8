"""The broker role's configuration: a TOML file (``cuvee broker --config F``) onto a frozen dataclass.

Every interval is seconds (timeouts of queries are Pinot's ``timeoutMs``). Example::

    cluster = "cuvee"
    metadata = "sqlite:///var/cuvee/meta.db"
    port = 8099
    timeout_ms = 10000
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuvee.auth.config import AuthConfig
from cuvee.node.tls import TlsConfig
from cuvee.errors import UserError
from cuvee.node.config import load_config
from cuvee.query.limits import PARSER_MAX_NESTING, QueryLimits

BROKER_TAG = "DefaultTenant_BROKER"


@dataclass(frozen=True)
class BrokerConfig:
    """Where the broker finds the cluster, how long queries may take, and how big they may be."""

    cluster: str = "cuvee"
    metadata: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    instance_id: str = ""  # default Broker_<host>_<port> (the port actually bound)
    tags: tuple[str, ...] = (BROKER_TAG,)
    timeout_ms: int = 10_000  # a query's default timeoutMs
    max_timeout_ms: int = 0  # a larger timeoutMs query option is refused (150); 0: an hour, or timeout_ms if more
    routing_poll_seconds: float = 5.0  # full re-read of tables and external views when a watch event is missed
    # an offline segment pushed this recently and ONLINE nowhere yet is being loaded: neither counted for the
    # hybrid time boundary nor reported unavailable (Pinot's new-segment expiration); afterwards it is both
    new_segment_grace_seconds: float = 300.0
    server_grace_seconds: float = 0.5  # wait this much past timeoutMs for a server's own timeout answer (250)
    connect_timeout_seconds: float = 2.0  # opening a connection to a server
    max_response_rows: int = 1_000_000  # LIMIT + OFFSET above this is refused (700)
    max_sql_bytes: int = 1_000_000  # longer SQL is refused (700); request bodies are capped a little above it
    max_server_connections: int = 256
    max_server_response_bytes: int = 512 * 1024 * 1024  # a server's answer larger than this fails the query (200)
    max_overrun_plans: int = 4  # queries are refused (400) while this many plans run on past their query's timeout
    # the multi-stage engine (docs/query.md#multi-stage-queries): rows one leaf may bring to the broker, and the
    # memory the broker's stage may use (the relations it reads count against it)
    multistage_leaf_rows: int = 1_000_000
    multistage_max_leaves: int = 64  # single-stage queries one multi-stage query may ask
    multistage_memory_mb: int = 1024
    plan_cache_entries: int = 2048  # plans of repeated query texts kept (0: none); see cuvee/query/plan_cache.py
    stop_timeout_seconds: float = 5.0  # stop() waits this long for the routing thread and for the pool to close
    session_retry_initial_seconds: float = 0.5  # an expired metadata-store session is re-opened after this ...
    session_retry_max_seconds: float = 10.0  # ... doubling per failed attempt, capped here
    auth: AuthConfig = field(default_factory=AuthConfig)  # docs/security.md
    tls: TlsConfig = field(default_factory=TlsConfig)  # docs/security.md
    query_limits: QueryLimits = field(default_factory=QueryLimits)  # the SQL text's size and depth: docs/security.md

    @property
    def timeout_limit_ms(self) -> int:
        """The largest timeoutMs a query may ask for."""
        return self.max_timeout_ms or max(3_600_000, self.timeout_ms)

    def __post_init__(self) -> None:
        for name in ("routing_poll_seconds", "connect_timeout_seconds", "stop_timeout_seconds",
                     "session_retry_initial_seconds", "session_retry_max_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.session_retry_max_seconds < self.session_retry_initial_seconds:
            raise ValueError("session_retry_max_seconds must be at least session_retry_initial_seconds")
        if self.server_grace_seconds < 0 or self.new_segment_grace_seconds < 0:
            raise ValueError("server_grace_seconds and new_segment_grace_seconds must not be negative")
        if self.query_limits.max_nesting > PARSER_MAX_NESTING:
            raise ValueError(f"query_limits.max_nesting must be at most {PARSER_MAX_NESTING} on a broker (its SQL "
                             "parser recurses per level)")
        if self.max_timeout_ms and self.max_timeout_ms < self.timeout_ms:
            raise ValueError("max_timeout_ms must be at least timeout_ms")
        for name in ("timeout_ms", "max_response_rows", "max_sql_bytes", "max_server_connections", "max_overrun_plans",
                     "max_server_response_bytes",
                     "multistage_leaf_rows", "multistage_memory_mb", "multistage_max_leaves"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in 0..65535, got {self.port}")

    def check_complete(self) -> None:
        if not self.metadata:
            raise UserError("broker config: missing metadata (the metadata store URI)")

    @property
    def max_body_bytes(self) -> int:
        """A request body may carry the SQL plus JSON quoting and options."""
        return 2 * self.max_sql_bytes + 64 * 1024


def load_broker_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> BrokerConfig:
    return load_config(BrokerConfig, path, overrides)
