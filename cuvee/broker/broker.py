"""The broker role: wires the metadata store, the cluster view, the query handler and the HTTP app together.

``start()``: open the metastore, load the cluster view (tables, schemas, external views, servers) and start
following it, bind the HTTP port (the instance id defaults to ``Broker_<host>_<port>``), register the broker as an
instance (tagged ``DefaultTenant_BROKER``, so no table assignment ever picks it) with an ephemeral live node, and
serve. ``stop()`` undoes it in reverse order: the query handler stops opening connection pools (its pool closes on
the HTTP loop once the queries using it finish), HTTP stops (in-flight queries drain), then the cluster is let go.

The session is a ``SessionHolder``: when it expires (LOST) a new one is opened in the background and the broker
registers again with a new live node; the cluster view's watches move to the new session and fire, so routing is
re-read from it. Queries keep being answered from the last snapshot meanwhile.
"""

from __future__ import annotations

import logging
from typing import Any

from cuvee.broker.app import build_broker_app
from cuvee.broker.cluster_view import ClusterView
from cuvee.broker.config import BrokerConfig
from cuvee.broker.handler import QueryHandler
from cuvee.broker.hybrid import QueryTarget
from cuvee.config.string_times import clamp_millis, render
from cuvee.cluster.records import InstanceInfo
from cuvee.cluster.store import ClusterStore
from cuvee.auth.policy import Role
from cuvee.metrics.broker import BrokerMetrics
from cuvee.node.http import HttpService
from cuvee.node.liveness import go_live
from cuvee.node.session import SessionHolder
from cuvee.protocol.completion_http import HTTP_PORT_NAME
from cuvee.spi.metastore import MetadataStoreError

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig):
        config.check_complete()
        self.config = config
        self.instance_id = config.instance_id
        self.is_serving = False
        self._sessions: set[str] = set()  # metadata-store sessions this process opened (their live nodes are ours)
        self.metrics = BrokerMetrics()  # GET /metrics (cuvee.metrics.broker)
        self.metastore: SessionHolder | None = None
        self.store: ClusterStore | None = None
        self.view: ClusterView | None = None
        self._handler: QueryHandler | None = None
        self._http: HttpService | None = None

    @property
    def url(self) -> str:
        if self._http is None:
            raise RuntimeError("the broker is not started")
        return self._http.url

    @property
    def handler(self) -> QueryHandler:
        if self._handler is None:
            raise RuntimeError("the broker is not started")
        return self._handler

    def start(self) -> Broker:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        cfg = self.config
        self.metastore = SessionHolder(cfg.metadata, retry_initial_seconds=cfg.session_retry_initial_seconds,
                                       retry_max_seconds=cfg.session_retry_max_seconds, name="broker")
        self.store = ClusterStore(self.metastore, cfg.cluster)
        self.view = ClusterView(self.store, poll_seconds=cfg.routing_poll_seconds,
                                stop_timeout_seconds=cfg.stop_timeout_seconds,
                                new_segment_grace_seconds=cfg.new_segment_grace_seconds).start()
        self._handler = QueryHandler(cfg, self.view, metrics=self.metrics)
        self._http = HttpService(build_broker_app(self), cfg.host, cfg.port, name="broker", auth=cfg.auth,
                                 role=Role.BROKER, tls=cfg.tls, store=self.store)
        if not self.instance_id:
            self.instance_id = f"Broker_{self._http.host}_{self._http.port}"
        self._register()
        self.metastore.on_renewal(self._register)
        self._http.start()
        self.is_serving = True
        log.info("broker %s serving on %s", self.instance_id, self._http.url)

    def _register(self) -> None:
        """At start and again on each new metadata-store session: the instance record and the live node."""
        assert self.store is not None and self.metastore is not None and self._http is not None
        live = self.store.paths.live(self.instance_id)
        go_live(self.metastore, live, self.instance_id, own_sessions=self._sessions, create=False)  # id free first
        self.store.register_instance(InstanceInfo(self.instance_id, self._http.host,
                                                  {HTTP_PORT_NAME: self._http.port}, tuple(self.config.tags),
                                                  tls=self._http.tls))
        self._sessions.add(go_live(self.metastore, live, self.instance_id, own_sessions=self._sessions))

    def stop(self) -> None:
        """Stop serving, then let go of the cluster (idempotent; the live node vanishes with the session)."""
        self.is_serving = False
        if self._handler is not None:  # before HTTP stops: the pool must close on the loop HTTP runs
            self._handler.close()
        if self._http is not None:
            self._http.stop(self.config.stop_timeout_seconds)
            self._http = None
        if self._handler is not None and self._handler.pool_open:
            log.warning("the server connection pool was still open when HTTP stopped")
        if self.view is not None:
            self.view.stop()
        if self.metastore is not None:
            try:
                self.metastore.close()
            except MetadataStoreError:
                log.debug("closing the metadata store failed", exc_info=True)
            self.metastore = None

    def routing_table(self, table: str) -> dict[str, Any]:
        """Where a query on ``table`` (raw or with type) would go now; 404-style dict if unknown. A hybrid table's
        raw name shows each half the query reads, with its side of the time boundary."""
        if self.view is None:
            return {"error": "broker not started"}
        info = self.view.resolve(table)
        if info is None:
            return {"error": f"table {table!r} does not exist"}
        available = self.view.snapshot.available
        halves = [_routing_doc(t, available) for t in self.view.targets(info.name)]
        realtime, offline = self.view.halves(info.name)
        if realtime is None or offline is None:
            return halves[0]
        return {"table": info.name, "timeBoundary": self.time_boundary(info.name), "halves": halves}

    def time_boundary(self, table: str) -> dict[str, Any] | None:
        """A hybrid table's time boundary as this broker applies it now, in Pinot's shape (None: not a hybrid
        table, or no offline segment with an end time is served yet and no explicit boundary is set)."""
        if self.view is None:
            return None
        info = self.view.resolve(table)
        realtime, offline = self.view.halves(info.name) if info is not None else (None, None)
        if realtime is None or offline is None or offline.time_column is None or offline.time_boundary is None:
            return None
        value = offline.time_boundary
        shown = render(clamp_millis(value), offline.date_pattern) if offline.date_pattern is not None else str(value)
        return {"timeColumn": offline.time_column, "timeValue": shown}


def _routing_doc(target: QueryTarget, available: frozenset[str]) -> dict[str, Any]:
    entry = target.entry
    routing = entry.route(available)
    return {"table": entry.name, "servers": {k: list(v) for k, v in routing.servers.items()},
            "consuming": sorted(routing.consuming), "unavailable": list(routing.unavailable),
            "heldBack": list(routing.held_back), "hidden": sorted(entry.hidden),
            "timeFilter": target.time_filter.to_dict() if target.time_filter is not None else None}
