"""The server role: wires the metadata store, deep store, local disk, registry, follower and HTTP app together.

``start()``: open the metastore; bind the HTTP port (the instance id defaults to ``Server_<host>_<port>``);
register InstanceInfo with its tags and an ephemeral live node; clear old current states; serve the committed
segments found on local disk (DONE metadata, same CRC; the rest is deleted and downloaded again when the ideal
state asks); follow the ideal state; serve HTTP. ``stop()`` undoes it in reverse order.

The session is a ``SessionHolder``: when it expires (LOST) a new one is opened in the background, the server
registers again, re-creates its live node and rewrites its current states from what it holds; the follower's
watches move to the new session and fire, so it re-reads the ideal state. Served segments, consuming ones
included, and the HTTP service are untouched throughout.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fastapi import APIRouter

from cuvee.cluster.records import InstanceInfo, SegmentRecord
from cuvee.cluster.store import ClusterStore
from cuvee.config import Schema, TableConfig
from cuvee.deepstore import open_deepstore
from cuvee.auth.layer import internal_headers
from cuvee.auth.policy import Role
from cuvee.metrics.server import ServerMetrics
from cuvee.story import StoryWriter
from cuvee.node.http import HttpService
from cuvee.node.liveness import go_live, leave
from cuvee.node.session import SessionHolder
from cuvee.protocol.completion_http import HTTP_PORT_NAME
from cuvee.pruning.stream_partitions import MixedPartitions
from cuvee.server.app import build_server_app
from cuvee.server.config import ServerConfig
from cuvee.server.current_state import CurrentStates
from cuvee.server.memory import tune_allocators
from cuvee.server.download import Backoff, SegmentFetcher
from cuvee.server.follower import IdealStateFollower
from cuvee.server.handlers import Consuming, ConsumingFactory, SegmentTransitions
from cuvee.query.execute import set_query_threads
from cuvee.server.native_copies import NATIVE_COPIES_DIR, NativeCopies
from cuvee.server.plain_copies import PlainCopies
from cuvee.server.local import UPSERT_SNAPSHOTS, LocalSegments
from cuvee.server.registry import SegmentRegistry
from cuvee.server.served_schemas import ServedSchemas
from cuvee.server.tables import TableCatalog
from cuvee.server.transitions import ErrorBackoff
from cuvee.spi.deepstore import DeepStore
from cuvee.upsert.table import UpsertTables

log = logging.getLogger(__name__)


def _host_name(configured: str) -> str:
    """What ``$hostName`` answers: the host this server is configured to be reached at, or the machine's name when
    it listens on every interface (as Pinot answers)."""
    return configured if configured not in ("", "0.0.0.0", "::") else socket.gethostname()


def _default_routers(registry: SegmentRegistry, upserts: UpsertTables, config: ServerConfig,
                     natives: NativeCopies, schemas: ServedSchemas) -> list[APIRouter]:
    """The query routes (written by the broker side); absent modules simply mean no query endpoint yet."""
    try:
        from cuvee.server.query_routes import query_router
        from cuvee.server.query_executor import QueryExecutor
    except ImportError:
        log.warning("cuvee.server.query_routes is not available: this server answers no queries")
        return []
    executor = QueryExecutor(registry, upserts=upserts, num_groups_limit=config.num_groups_limit,
                             min_server_group_trim_size=config.min_server_group_trim_size, natives=natives,
                             schemas=schemas, host_name=_host_name(config.host), limits=config.query_limits)
    return [query_router(registry, executor=executor, upserts=upserts)]


class Server:
    def __init__(self, config: ServerConfig, *, extra_routers: Sequence[APIRouter] | None = None,
                 make_consuming: ConsumingFactory | None = None, clock: Callable[[], float] = time.monotonic):
        config.check_complete()
        self.config = config
        self.registry = SegmentRegistry()
        self.local = LocalSegments(Path(config.data_dir))
        self._extra_routers = extra_routers
        self.metrics = ServerMetrics()  # GET /metrics (cuvee.metrics.server)
        self.story = StoryWriter(lambda: getattr(self, "store", None), "server", lambda: self.instance_id)
        # reads the catalog only once a segment needs it; snapshots beside the table's segments
        self.upserts = UpsertTables(self._table_context, lambda table: self.local.table_dir(table) / UPSERT_SNAPSHOTS,
                                    read_cache_bytes=config.upsert_read_cache_bytes)
        # committed segments' DuckDB copies for large scans (cuvee.server.native_copies; off at 0 bytes)
        self.natives = NativeCopies(config.native_copy_bytes, config.native_copy_min_idle_seconds,
                                    config.native_copy_min_rows, directory=Path(config.data_dir) / NATIVE_COPIES_DIR,
                                    threads=config.query_threads)
        set_query_threads(config.query_threads)  # the Arrow views' scans (cuvee.query.execute)
        self._make_consuming_override = make_consuming
        self._clock = clock  # when ERROR replicas are retried (tests pass a fake clock)
        builds = config.max_parallel_segment_builds
        self._build_slots = threading.BoundedSemaphore(builds) if builds > 0 else None
        self._stopping = threading.Event()
        self._sessions: set[str] = set()  # metadata-store sessions this process opened (their live nodes are ours)
        self.is_serving = False
        self.instance_id = config.instance_id
        self.metastore: SessionHolder | None = None
        self.deep_store: DeepStore | None = None
        self._http: HttpService | None = None
        self._follower: IdealStateFollower | None = None
        self._completion: object | None = None
        self._completion_lock = threading.Lock()

    # ---- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> Server:
        cfg = self.config
        tune_allocators()
        self.local.data_dir.mkdir(parents=True, exist_ok=True)
        self.deep_store = open_deepstore(cfg.deep_store, cfg.s3)
        self.metastore = SessionHolder(cfg.metadata, retry_initial_seconds=cfg.session_retry_initial_seconds,
                                       retry_max_seconds=cfg.session_retry_max_seconds, name="server")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        cfg = self.config
        assert self.metastore is not None and self.deep_store is not None
        self.store = ClusterStore(self.metastore, cfg.cluster)
        self.catalog = TableCatalog(self.store)
        # the schema each table's segments are served under (cuvee.server.served_schemas)
        self.schemas = ServedSchemas(self.catalog)
        routers = (self._extra_routers if self._extra_routers is not None
                   else _default_routers(self.registry, self.upserts, cfg, self.natives, self.schemas))
        self._http = HttpService(build_server_app(self, routers), cfg.host, cfg.port, name="server", auth=cfg.auth,
                                 role=Role.SERVER, tls=cfg.tls, store=self.store)
        self.instance_id = cfg.instance_id or f"Server_{self._http.host}_{self._http.port}"
        self.states = CurrentStates(self.store, self.instance_id)
        backoff = Backoff(cfg.download_retry_initial_seconds, cfg.download_retry_max_seconds, cfg.download_max_attempts)
        self.fetcher = SegmentFetcher(store=self.store, deep_store=self.deep_store, local=self.local,
                                      instance_id=self.instance_id, backoff=backoff,
                                      http_timeout_seconds=cfg.download_timeout_seconds, stopping=self._stopping,
                                      headers=internal_headers(cfg.auth), metrics=self.metrics, story=self.story,
                                      verify=cfg.tls.client_verify())
        self.metrics.watch_consuming(lambda: [(t, c.info()) for t, c in self.transitions.all_consuming()])
        self.metrics.watch_native_copies(self.natives.summary)
        self.plain_copies = PlainCopies(cfg.plain_copy_bytes, cfg.plain_copy_min_idle_seconds)
        self.transitions = SegmentTransitions(store=self.store, registry=self.registry, local=self.local,
                                              plain_copies=self.plain_copies,
                                              fetcher=self.fetcher, states=self.states,
                                              make_consuming=self._make_consuming_override or self._make_consuming,
                                              upserts=self.upserts, story=self.story, schemas=self.schemas,
                                              natives=self.natives)
        go_live(self.metastore, self.store.paths.live(self.instance_id), self.instance_id,
                own_sessions=self._sessions, create=False)  # the id is free, before its record and states change
        self._register_instance()
        self.states.reset()
        loaded = self.transitions.load_local()
        if loaded:
            log.info("%s: serving %d committed segment(s) from %s", self.instance_id, len(loaded), cfg.data_dir)
        self._http.start()
        self.is_serving = True
        self._go_live()
        self.metastore.on_renewal(self._on_session_renewed)
        self._follower = IdealStateFollower(store=self.store, instance_id=self.instance_id, states=self.states,
                                            transitions=self.transitions,
                                            workers=cfg.transition_workers, poll_seconds=cfg.ideal_state_poll_seconds,
                                            error_backoff=ErrorBackoff(cfg.error_retry_initial_seconds,
                                                                       cfg.error_retry_max_seconds),
                                            join_timeout_seconds=cfg.follower_join_timeout_seconds,
                                            clock=self._clock)
        self._follower.start()
        log.info("%s serving at %s", self.instance_id, self.url)

    def _register_instance(self) -> None:
        assert self._http is not None
        self.store.register_instance(InstanceInfo(self.instance_id, self._http.host, {HTTP_PORT_NAME: self._http.port},
                                                  tuple(self.config.tags), tls=self._http.tls))

    def _go_live(self) -> None:
        assert self.metastore is not None
        self._sessions.add(go_live(self.metastore, self.store.paths.live(self.instance_id), self.instance_id,
                                   own_sessions=self._sessions))

    def _on_session_renewed(self) -> None:
        """A new metadata-store session (the last one expired): redo what ``start`` did with the store. Current
        states first, so the external view built once we are live again is what this server really holds."""
        if self._stopping.is_set():
            return
        self._register_instance()
        self.states.rewrite()
        self._go_live()
        log.info("%s: live again on a new metadata store session", self.instance_id)

    def stop(self) -> None:
        """Leave the cluster (live node first, so brokers stop routing here), stop consumers, stop serving."""
        self._stopping.set()
        self.is_serving = False
        if self.metastore is not None:
            try:
                leave(self.metastore, self.store.paths.live(self.instance_id), self._sessions)
            except Exception:  # noqa: BLE001 - the node goes with the session anyway
                pass
        transitions = getattr(self, "transitions", None)
        if self._follower is not None:
            self._follower.halt()  # no new transitions ...
        if transitions is not None:
            transitions.stop_all()  # ... consumers stop, which unblocks a running go_online ...
        if self._follower is not None:
            self._follower.join()  # ... running transitions end ...
            self._follower = None
            if transitions is not None:
                transitions.stop_all()  # ... and whatever they started is stopped too
        if self._http is not None:
            self._http.stop()
            self._http = None
        self.natives.close()
        close = getattr(self._completion, "close", None)
        if close is not None:
            close()
        if self.metastore is not None:
            self.metastore.close()
            self.metastore = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("the server is not started")
        return self._http.url

    def wake(self) -> None:
        """Re-read the ideal state now (tests, and operators after a manual change)."""
        if self._follower is not None:
            self._follower.wake()

    # ---- consuming segments ---------------------------------------------------------------------------------

    def _make_consuming(self, table: str, record: SegmentRecord) -> Consuming:
        from cuvee.server.consuming.client import SegmentCompletionClient
        from cuvee.server.consuming.segment import ConsumingSegment

        assert self.metastore is not None and self.deep_store is not None
        with self._completion_lock:
            if self._completion is None:
                self._completion = SegmentCompletionClient.for_cluster(self.config.consumer, self.metastore,
                                                                       self.config.cluster,
                                                                       internal_headers(self.config.auth),
                                                                       verify=self.config.tls.client_verify())
        context = self.catalog.get(table)
        schema = context.schema
        if record.schema_version is not None:  # every replica consumes and builds under the same schema
            schema = self.catalog.schema_at(context.schema_name, record.schema_version)
        else:
            log.info("%s/%s: its record names no schema version (written before schema versions): consumed under "
                     "the latest schema", table, record.segment_name)
        return ConsumingSegment(
            table=context.config,
            schema=schema,
            record=record,
            instance_id=self.instance_id,
            completion=self._completion,  # type: ignore[arg-type]
            deep_store=self.deep_store,
            segment_dir=self.local.table_dir(table),
            fetch_committed=lambda committed: self.fetcher.fetch(table, committed),
            config=self.config.consumer,
            build_slots=self._build_slots,
            upsert=self.upserts.get(table),
            metrics=self.metrics,
            story=self.story,
            memory_share=self._memory_share if self.config.consuming_memory_bytes else None,
            report_mixed=lambda segment, partition: self._report_mixed(table, segment, partition),
        )

    def _report_mixed(self, table: str, segment: str, partition: int) -> None:
        """Record in the table's ``MixedPartitions`` node that ``segment`` holds a row of ``partition``, another
        than its stream partition's (brokers stop pruning it by partition). Raises when it cannot: the consumer
        then stops rather than publish a row a broker would skip."""
        log.warning("%s/%s: a row of partition %d arrived in another stream partition: the segment is no longer "
                    "pruned by partition (is the stream keyed by the partition column?)", table, segment, partition)
        self.store.update(MixedPartitions, self.store.paths.mixed_partitions(table),
                          lambda held: held.with_segment(segment, partition), initial=MixedPartitions({}))

    def _memory_share(self) -> int:
        """Each consuming segment's share of ``consuming_memory_bytes``: the budget split evenly among the consuming
        segments held now (a segment that ends leaves its share to the others)."""
        held = max(1, len(self.transitions.all_consuming()))
        return self.config.consuming_memory_bytes // held

    def _table_context(self, table: str) -> tuple[TableConfig, Schema]:
        context = self.catalog.get(table)
        return context.config, context.schema
