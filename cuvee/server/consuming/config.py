"""Settings of a server's partition consumers and of their side of the segment completion protocol.

Every wait, timeout and interval is here, in seconds, so tests can shrink them; the server shell embeds this
dataclass in its ServerConfig (a ``[consumer]`` TOML table).
"""

from __future__ import annotations

from dataclasses import dataclass

# ConsumerConfig.scan_block_rows (cuvee.server.consuming.blocks): one DuckDB row group. A copy of a whole row
# group is written compressed straight to the file; a smaller one goes through the write-ahead log and is
# compressed again at each checkpoint (the CPU to copy 500k of the bench's 10-column rows, measured: ~1 s in
# blocks of 122,880, ~1.9 s in blocks of 50,000, ~4.6 s in blocks of 16,384; a committed segment's copy costs
# about the first).
DEFAULT_BLOCK_ROWS = 122_880
# Its floor: DuckDB's vector size. Each block is a copy of its own (a write, a checkpoint, a token held per query)
# and a run of Arrow slices per query; blocks of a few rows made a query over 5,000 rows take seconds.
MIN_BLOCK_ROWS = 2_048


MAX_STRAY_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class ConsumerConfig:
    """How consuming segments fetch, talk to the lead controller, build and download."""

    # ---- fetching from the stream ----
    fetch_max_messages: int = 10_000
    fetch_max_wait_seconds: float = 0.1
    # Rows a consuming segment can hold beyond its row threshold, to CATCH_UP to a committer that is ahead
    # (time-limited or force-committed segments); None means one fetch batch.
    catch_up_headroom_rows: int | None = None
    # Giving up on reaching a CATCH_UP offset (the stream may not have it): report where we are instead.
    catch_up_timeout_seconds: float = 30.0
    # Transient stream errors are retried this many times in a row (backoff doubling from the initial value)
    # before the replica gives up and sends segmentStoppedConsuming.
    stream_error_retries: int = 5
    stream_error_backoff_seconds: float = 0.2
    # While behind, a consuming replica reads the stream's latest offset this often (its reported offset lag).
    lag_check_seconds: float = 10.0
    # Most recent bad records kept per segment for inspection (the count is always exact).
    bad_records_kept: int = 100
    # A decoder that cannot decode now (its schema registry is down) is retried with a backoff doubling from
    # stream_error_backoff_seconds up to this, for as long as it takes: rows wait, they are never dropped.
    decoder_retry_max_seconds: float = 30.0
    # One request to a schema registry (Avro through Confluent's registry) waits at most this long.
    schema_registry_timeout_seconds: float = 10.0

    # ---- queries over a consuming segment ----
    # Its published rows are cut into blocks of this many rows; a full block is sealed (immutable): copied into
    # DuckDB like a committed segment, its multi-value columns decoded once. Queries convert only the rows since
    # the last seal (cuvee.server.consuming.blocks; the default, one DuckDB row group, is the cheapest to copy).
    scan_block_rows: int = DEFAULT_BLOCK_ROWS
    # A partitioned table's consuming segment that meets its first row of another partition records it in the
    # table's mixedpartitions node, then holds that batch back this long before publishing it: the time brokers
    # take to see the node (its watch, then a refresh of their view) and stop pruning the segment
    # (cuvee.pruning.stream_partitions). Paid once per such segment; 0: publish at once.
    stray_publish_grace_seconds: float = 1.0

    # ---- completion protocol ----
    hold_retry_seconds: float = 1.0  # re-send segmentConsumed this long after HOLD / FAILED
    not_leader_retry_seconds: float = 0.2  # re-send after NOT_LEADER (leader re-resolved first)
    controller_timeout_seconds: float = 10.0  # per HTTP request, and the total of its connection retries
    request_retry_initial_seconds: float = 0.05  # first backoff after a connection error (doubles) ...
    request_retry_max_seconds: float = 1.0  # ... up to this cap
    # The committer asks for this much more build time (extendBuildTime) when less than
    # ``lease_margin_seconds`` of its lease is left; it checks every ``lease_check_seconds`` while building.
    extend_build_seconds: int = 60
    lease_margin_seconds: float = 5.0
    lease_check_seconds: float = 1.0
    default_lease_seconds: float = 60.0  # if a COMMIT answer carries no build time

    # ---- downloads (go_online when this replica cannot use its own copy) ----
    download_retry_initial_seconds: float = 0.2
    download_retry_max_seconds: float = 30.0  # exponential backoff cap for deep-store/peer downloads
    # go_online gives up after this many download attempts (each one is the server's own retrying fetch): the
    # transition fails into ERROR and the server retries it later, instead of holding a transition worker.
    download_max_attempts: int = 3

    def __post_init__(self) -> None:
        positive = ("fetch_max_messages", "fetch_max_wait_seconds", "hold_retry_seconds", "not_leader_retry_seconds",
                    "controller_timeout_seconds", "request_retry_initial_seconds", "request_retry_max_seconds",
                    "extend_build_seconds",
                    "lease_check_seconds", "default_lease_seconds", "download_retry_initial_seconds",
                    "download_retry_max_seconds", "catch_up_timeout_seconds", "stream_error_backoff_seconds",
                    "lag_check_seconds", "decoder_retry_max_seconds", "schema_registry_timeout_seconds")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"consumer.{name} must be a positive number, got {value!r}")
        blocks = self.scan_block_rows
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < MIN_BLOCK_ROWS:
            raise ValueError(f"consumer.scan_block_rows must be an integer >= {MIN_BLOCK_ROWS} (DuckDB's vector "
                             f"size; smaller blocks make queries slower), got {blocks!r}")
        for name in ("stream_error_retries", "bad_records_kept", "lease_margin_seconds",
                     "stray_publish_grace_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"consumer.{name} must be >= 0, got {value!r}")
        if self.stray_publish_grace_seconds > MAX_STRAY_GRACE_SECONDS:
            raise ValueError(f"consumer.stray_publish_grace_seconds must be at most {MAX_STRAY_GRACE_SECONDS} "
                             f"(consumption of the segment waits that long), got {self.stray_publish_grace_seconds!r}")
        attempts = self.download_max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ValueError(f"consumer.download_max_attempts must be an integer >= 1, got {attempts!r}")
        if self.catch_up_headroom_rows is not None and self.catch_up_headroom_rows < 0:
            raise ValueError(f"consumer.catch_up_headroom_rows must be >= 0, got {self.catch_up_headroom_rows}")

    @property
    def headroom_rows(self) -> int:
        return self.fetch_max_messages if self.catch_up_headroom_rows is None else self.catch_up_headroom_rows
