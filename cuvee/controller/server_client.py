"""The controller's calls to servers: consuming-segment status, force commit and reload (paths in completion_http).

Calls to several servers run in parallel with one timeout each; a server that fails or answers garbage is
reported per server (never raised), so one dead server cannot hide the others' answers.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from cuvee.cluster.errors import RecordNotFoundError
from cuvee.cluster.records import InstanceInfo, RecordFormatError
from cuvee.cluster.store import ClusterStore
from cuvee.protocol.completion_http import (
    HTTP_PORT_NAME,
    SERVER_CONSUMING_SEGMENTS_INFO,
    SERVER_FORCE_COMMIT,
    SERVER_RELOAD,
)


def instance_url(info: InstanceInfo) -> str | None:
    """``http[s]://host:port`` of an instance (its ``http`` port, else its only port); None if it has none."""
    return info.url(HTTP_PORT_NAME)


@dataclass(frozen=True)
class ServerReply:
    instance: str
    body: Any | None = None
    error: str | None = None


class ServerClient:
    def __init__(self, timeout: float, headers: Mapping[str, str] | None = None,
                 verify: ssl.SSLContext | bool = True):
        """``headers``: what servers need to know the controller calls (``cuvee.auth.layer.internal_headers``)."""
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.verify = verify  # what servers' TLS certificates must chain to

    def consuming_info(self, servers: dict[str, str | None], table: str) -> list[ServerReply]:
        """GET each server's consuming segments of ``table`` (name with type)."""
        path = SERVER_CONSUMING_SEGMENTS_INFO.format(table=table)
        return self._each({inst: (url, _get(path)) for inst, url in servers.items()})

    def force_commit(self, servers: dict[str, tuple[str | None, list[str]]], table: str) -> list[ServerReply]:
        """POST each server the consuming segments of ``table`` it should end with reason forceCommit."""
        path = SERVER_FORCE_COMMIT.format(table=table)
        return self._each({inst: (url, _post(path, {"segments": segs})) for inst, (url, segs) in servers.items()})

    def reload(self, servers: dict[str, tuple[str | None, list[str]]], table: str, job_id: str) -> list[ServerReply]:
        """POST each server a reload of ``table``: the segments listed, or (an empty list) all it holds."""
        path = SERVER_RELOAD.format(table=table)
        return self._each({inst: (url, _post(path, {"segments": segs, "jobId": job_id}))
                           for inst, (url, segs) in servers.items()})

    def _each(self, calls: dict[str, tuple[str | None, Call]]) -> list[ServerReply]:
        if not calls:
            return []
        with httpx.Client(timeout=self.timeout, headers=self.headers, verify=self.verify) as client, ThreadPoolExecutor(min(8, len(calls))) as pool:
            futures = {inst: pool.submit(_one, client, inst, url, call) for inst, (url, call) in calls.items()}
            return [futures[inst].result() for inst in sorted(futures)]


Call = Callable[[httpx.Client, str], httpx.Response]


def _get(path: str) -> Call:
    return lambda client, url: client.get(url + path)


def _post(path: str, body: Any) -> Call:
    return lambda client, url: client.post(url + path, json=body)


def _one(client: httpx.Client, instance: str, url: str | None, call: Call) -> ServerReply:
    if url is None:
        return ServerReply(instance, error="the instance registered no HTTP port")
    try:
        response = call(client, url)
    except httpx.HTTPError as exc:
        return ServerReply(instance, error=f"{type(exc).__name__}: {exc}")
    if response.status_code >= 400:
        return ServerReply(instance, error=f"HTTP {response.status_code}: {response.text[:200]}")
    try:
        return ServerReply(instance, body=response.json())
    except ValueError:
        return ServerReply(instance, error=f"not JSON: {response.text[:200]}")


def server_urls(store: ClusterStore, instances: set[str]) -> dict[str, str | None]:
    """Each instance's URL; None for one with no readable registration (its call is then reported failed)."""
    urls: dict[str, str | None] = {}
    for inst in sorted(instances):
        try:
            urls[inst] = instance_url(store.instance(inst))
        except (RecordNotFoundError, RecordFormatError):
            urls[inst] = None
    return urls


def urls_of(instances: Iterable[InstanceInfo]) -> dict[str, str | None]:
    return {i.instance_id: instance_url(i) for i in instances}
