"""Fetching a committed segment: from the deep store when its metadata has a download URI, else from a random
ONLINE peer in the external view (deep-store bypass), retrying with exponential backoff. Every copy is
CRC-checked (the archive's own CRC on unpack, then against the committed metadata) before it is used.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from cuvee.metrics.server import ServerMetrics
from cuvee.story import StoryWriter
from cuvee.cluster.records import InstanceInfo, SegmentRecord, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.errors import CuveeError
from cuvee.protocol.completion_http import HTTP_PORT_NAME, SEGMENT_DOWNLOAD_PATH
from cuvee.segment.archive import unpack
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment
from cuvee.server.local import LocalSegments
from cuvee.spi.deepstore import DeepStore, DeepStoreError

log = logging.getLogger(__name__)

"""GET on a server: the committed segment's archive bytes (404 when the server does not hold it)."""


class DownloadError(CuveeError):
    """No source gave a good copy of the segment within the configured attempts."""


@dataclass(frozen=True)
class Backoff:
    initial_seconds: float
    max_seconds: float
    attempts: int

    def delays(self) -> Iterator[float]:
        """The waits between attempts: initial, doubled each time, capped (attempts - 1 of them)."""
        delay = self.initial_seconds
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_seconds)
            delay *= 2


class SegmentFetcher:
    """Downloads committed segments into ``LocalSegments``; ``stopping`` cuts a backoff wait short."""

    def __init__(
        self,
        *,
        store: ClusterStore,
        deep_store: DeepStore,
        local: LocalSegments,
        instance_id: str,
        backoff: Backoff,
        http_timeout_seconds: float,
        stopping: threading.Event,
        rng: random.Random | None = None,
        headers: Mapping[str, str] | None = None,
        metrics: ServerMetrics | None = None,
        story: StoryWriter | None = None,
        verify: ssl.SSLContext | bool = True,
    ):
        """``headers``: what a peer needs to know another server asks (``cuvee.auth.layer.internal_headers``)."""
        self._store = store
        self._deep_store = deep_store
        self._local = local
        self._instance_id = instance_id
        self._backoff = backoff
        self._timeout = http_timeout_seconds
        self._stopping = stopping
        self._rng = rng or random.Random()
        self._headers = dict(headers or {})
        self._metrics = metrics
        self._story = story
        self._verify = verify
        self.failed_attempts = 0  # attempts that found no good copy (inspectable)

    def fetch(self, table: str, record: SegmentRecord) -> ImmutableSegment:
        """A verified local copy of the committed segment ``record`` (blocks through retries)."""
        name = record.segment_name
        delays = self._backoff.delays()
        errors: list[str] = []
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            errors = []
            segment = self._attempt(table, record, errors)
            if segment is not None:
                if self._metrics is not None:
                    self._metrics.download_seconds.labels(table).observe(time.perf_counter() - started)
                return segment
            self.failed_attempts += 1
            if self._metrics is not None:
                self._metrics.download_failures.labels(table).inc()
            if self._story is not None:
                self._story.record(table, name, "downloadFailed", attempt=attempt, errors=len(errors))
            delay = next(delays, None)
            if delay is None:
                break
            log.warning("download of %s/%s failed (%s); retrying in %.2fs", table, name, "; ".join(errors), delay)
            if self._stopping.wait(delay):
                raise DownloadError(f"download of {table}/{name} abandoned: the server is stopping")
            latest = self._store.find_segment(table, name)  # the repair task may have uploaded it meanwhile
            if latest is not None:
                record = latest.record
        raise DownloadError(
            f"could not download {table}/{name} in {self._backoff.attempts} attempt(s): {'; '.join(errors)}"
        )

    def _attempt(self, table: str, record: SegmentRecord, errors: list[str]) -> ImmutableSegment | None:
        if record.download_uri:
            try:
                got = self._from_deep_store(table, record)
                self._count(table, "deep_store", record.segment_name, record.download_uri)
                return got
            except (DeepStoreError, SegmentError, DownloadError, OSError) as exc:
                errors.append(f"deep store {record.download_uri}: {exc}")
        peers = self._peers(table, record.segment_name)
        if not peers and not record.download_uri:
            errors.append("no download URI and no ONLINE peer holds it")
        for peer in peers:
            try:
                got = self._from_peer(table, record, peer)
                self._count(table, "peer", record.segment_name, peer)
                return got
            except (httpx.HTTPError, SegmentError, DownloadError, OSError) as exc:
                errors.append(f"peer {peer}: {exc}")
        return None

    def _count(self, table: str, source: str, segment: str = "", where: str = "") -> None:
        if self._metrics is not None:
            self._metrics.downloads.labels(table, source).inc()
        if self._story is not None and segment:
            self._story.record(table, segment, "downloaded", source=source, origin=where)

    def _from_deep_store(self, table: str, record: SegmentRecord) -> ImmutableSegment:
        key = self._deep_store.key_of(record.download_uri)
        target = self._local.downloads_dir(table) / f"{record.segment_name}.deep.archive"
        self._deep_store.get(key, target)
        return self._install(table, record, target)

    def _from_peer(self, table: str, record: SegmentRecord, peer_url: str) -> ImmutableSegment:
        url = peer_url + SEGMENT_DOWNLOAD_PATH.format(table=table, segment=record.segment_name)
        target = self._local.downloads_dir(table) / f"{record.segment_name}.peer.archive"
        try:
            with httpx.stream("GET", url, timeout=self._timeout, headers=self._headers,
                              verify=self._verify) as response:
                if response.status_code != 200:
                    raise DownloadError(f"GET {url} answered HTTP {response.status_code}")
                with open(target, "wb") as out:
                    for chunk in response.iter_bytes(1 << 20):
                        out.write(chunk)
            return self._install(table, record, target)
        finally:
            target.unlink(missing_ok=True)

    def _install(self, table: str, record: SegmentRecord, archive: Path) -> ImmutableSegment:
        try:
            path = unpack(archive, self._local.table_dir(table), overwrite=True)  # checks the archive's own CRC
            segment = ImmutableSegment.load(path)
            if path.name != record.segment_name:
                raise DownloadError(f"archive holds segment {path.name}, not {record.segment_name}")
            if record.crc is not None and segment.crc != record.crc:
                raise DownloadError(f"downloaded copy has CRC {segment.crc}, committed CRC is {record.crc}")
        except BaseException:
            archive.unlink(missing_ok=True)
            raise
        self._local.keep_archive(table, record.segment_name, archive)
        return segment

    def _peers(self, table: str, segment: str) -> list[str]:
        """Base URLs of the live peers (not this server) that hold ``segment`` ONLINE, in random order."""
        view = self._store.external_view(table)
        if view is None:
            return []
        live = set(self._store.live_instance_ids())
        urls: list[str] = []
        for instance_id in view.instances_in(segment, SegmentState.ONLINE):
            if instance_id == self._instance_id or instance_id not in live:
                continue
            found = self._store.find(InstanceInfo, self._store.paths.instance(instance_id))
            if found is None or HTTP_PORT_NAME not in found.record.ports:
                continue
            url = found.record.url(HTTP_PORT_NAME)
            if url is not None:
                urls.append(url)
        self._rng.shuffle(urls)
        return urls
