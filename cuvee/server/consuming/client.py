"""HTTP client of the lead controller's segment completion endpoints.

The leader is found the way every role finds it: the metadata store's election node (``ClusterPaths.leader``),
whose identifier is either the controller's URL or its instance id (then its InstanceInfo gives host and port).
A NOT_LEADER answer may name the leader (``leader_url``); ``invalidate_leader`` makes the next call use that hint
or re-read the election. Connection errors are retried with doubling backoff (capped at
``request_retry_max_seconds``) within ``controller_timeout_seconds``, re-resolving the leader each time (it may
have just changed); after that ``CompletionUnavailable`` is raised and the consumer FSM treats it like FAILED
(wait, ask again).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping

import httpx

from cuvee.cluster.paths import ClusterPaths
from cuvee.cluster.records import InstanceInfo, RecordFormatError
from cuvee.errors import CuveeError
from cuvee.metastore.election import LEADER_NODE, leader_identifier
from cuvee.metastore.paths import join
from cuvee.protocol.completion import ProtocolError, Request, RequestKind, Response
from cuvee.protocol.completion_http import COMPLETION_PATHS, HTTP_PORT_NAME
from cuvee.server.consuming.config import ConsumerConfig
from cuvee.spi.metastore import MetadataStore, MetadataStoreError

log = logging.getLogger(__name__)

# Ports an InstanceInfo may list the controller's HTTP port under, in order of preference.
_HTTP_PORT_NAMES = (HTTP_PORT_NAME, "controller", "admin")


class CompletionUnavailable(CuveeError):
    """No usable answer from the lead controller within the timeout (unreachable, unknown leader, bad reply)."""


def metastore_leader_resolver(store: MetadataStore, cluster: str) -> Callable[[], str | None]:
    """A function returning the lead controller's base URL from the election node, or None if nobody leads."""
    paths = ClusterPaths(cluster)

    def resolve() -> str | None:
        node = store.exists(join(paths.leader, LEADER_NODE))
        if node is None:
            return None
        identifier = leader_identifier(node.data)
        if identifier.startswith(("http://", "https://")):
            return identifier.rstrip("/")
        info_node = store.exists(paths.instance(identifier))
        if info_node is None:
            log.warning("leader %r has no instance record at %s", identifier, paths.instance(identifier))
            return None
        try:
            info = InstanceInfo.decode(info_node.data)
        except RecordFormatError as exc:
            log.warning("leader %r: unreadable instance record: %s", identifier, exc)
            return None
        for name in _HTTP_PORT_NAMES:
            if name in info.ports:
                return info.url(name)
        return info.url()

    return resolve


class SegmentCompletionClient:
    """Sends completion requests to the lead controller. Thread-safe (one httpx client, a lock for the leader).

    Give ``resolve_leader`` (e.g. ``metastore_leader_resolver(store, cluster)``), a fixed ``leader_url``, or both
    (the URL is tried first)."""

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        resolve_leader: Callable[[], str | None] | None = None,
        leader_url: str | None = None,
        paths: dict[RequestKind, str] | None = None,
        headers: Mapping[str, str] | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        if resolve_leader is None and leader_url is None:
            raise ValueError("SegmentCompletionClient needs resolve_leader or leader_url")
        self._config = config
        self._resolve = resolve_leader
        self._fixed = leader_url.rstrip("/") if leader_url else None  # used whenever nothing better is known
        self._leader: str | None = self._fixed
        self._paths = paths or dict(COMPLETION_PATHS)
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=config.controller_timeout_seconds, headers=dict(headers or {}), verify=verify)
        self.requests_sent = 0
        self.leader_resolutions = 0

    @classmethod
    def for_cluster(cls, config: ConsumerConfig, store: MetadataStore, cluster: str,
                    headers: Mapping[str, str] | None = None,
                    verify: ssl.SSLContext | bool = True) -> SegmentCompletionClient:
        """``headers``: what the controller needs to know it is talking to the cluster (``internal_headers``);
        ``verify``: what its TLS certificate must chain to (``TlsConfig.client_verify``)."""
        return cls(config, resolve_leader=metastore_leader_resolver(store, cluster), headers=headers, verify=verify)

    @property
    def leader_url(self) -> str | None:
        return self._leader

    def invalidate_leader(self, hint: str | None = None) -> None:
        """Forget the leader; the next request uses ``hint`` if given, else asks the election node."""
        with self._lock:
            self._leader = hint.rstrip("/") if hint else None

    def send(self, request: Request) -> Response:
        """The controller's answer to ``request``; raises CompletionUnavailable when there is none in time."""
        deadline = time.monotonic() + self._config.controller_timeout_seconds
        backoff = self._config.request_retry_initial_seconds
        last_error = "no attempt made"
        attempts = 0
        while True:
            attempts += 1
            leader = self._current_leader()
            if leader is None:
                last_error = "no lead controller is known (election node empty)" + (
                    f"; before that: {last_error}" if attempts > 1 else "")
            else:
                try:
                    return self._post(leader, request, deadline)
                except (httpx.TransportError, CompletionUnavailable) as exc:
                    last_error = f"{leader}: {exc}"
                    self.invalidate_leader()  # it may have died; re-read the election next time
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CompletionUnavailable(f"{request.kind.value} for {request.segment}: {last_error}")
            time.sleep(min(backoff, remaining))
            backoff = min(backoff * 2, self._config.request_retry_max_seconds)

    def close(self) -> None:
        self._http.close()

    def _current_leader(self) -> str | None:
        with self._lock:
            if self._leader is not None:
                return self._leader
        if self._resolve is None:
            return self._fixed
        try:
            url = self._resolve()
        except MetadataStoreError as exc:
            log.warning("cannot read the controller election: %s", exc)
            return None
        self.leader_resolutions += 1
        url = url.rstrip("/") if url else self._fixed
        with self._lock:
            self._leader = url
        return url

    def _post(self, leader: str, request: Request, deadline: float) -> Response:
        timeout = max(deadline - time.monotonic(), 0.05)
        self.requests_sent += 1
        reply = self._http.post(leader + self._paths[request.kind], json=request.to_dict(), timeout=timeout)
        try:
            body = reply.json()
        except ValueError:
            raise CompletionUnavailable(f"HTTP {reply.status_code} with a body that is not JSON") from None
        try:
            return Response.from_dict(body)
        except ProtocolError as exc:
            raise CompletionUnavailable(f"HTTP {reply.status_code}: {exc}") from None
