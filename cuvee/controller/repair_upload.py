"""Repair duty: upload peer-only segments to the deep store (DESIGN.md section 9, deep store bypass).

A committer whose deep store upload failed still commits, with an empty download URI; only servers hold the
segment then. The pure ``plan_uploads`` finds those segments (DONE, empty URI) that some live server holds ONLINE
(external view first: what servers report; then the ideal state); the shell ``PeerUploader`` downloads the archive
from such a server (``GET /tables/{t}/segments/{s}``), checks it unpacks intact with the committed CRC, puts it
under ``<tableWithType>/<segment>.tar.zst`` and compare-and-sets the download URI (only while still empty). Any
failure raises UploadError; the caller counts it and the next pass retries.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from cuvee.cluster.records import ExternalView, IdealState, InstanceInfo, SegmentRecord, SegmentState, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.controller.server_client import instance_url
from cuvee.errors import CuveeError
from cuvee.protocol.completion_http import SEGMENT_DOWNLOAD_PATH
from cuvee.segment.archive import ARCHIVE_SUFFIX, deep_store_key, unpack
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment
from cuvee.spi.deepstore import DeepStore, DeepStoreError

log = logging.getLogger(__name__)


class UploadError(CuveeError):
    """A peer-only segment could not be uploaded this pass (no peer answered, bad copy, deep store down)."""


@dataclass(frozen=True)
class UploadPeerOnly:
    """``segment`` has no download URI; ``peers`` (live, holding it ONLINE) are asked for it in order."""

    segment: str
    peers: tuple[str, ...]


def plan_uploads(ideal: IdealState, view: ExternalView | None, records: Mapping[str, SegmentRecord],
                 live: Collection[str]) -> list[UploadPeerOnly]:
    """The table's peer-only segments and the live servers to fetch each from (none: nothing to do yet)."""
    out = []
    for name in sorted(ideal.segments):
        record = records.get(name)
        if record is None or record.status is not SegmentStatus.DONE or record.download_uri:
            continue
        reported = view.instances_in(name, SegmentState.ONLINE) if view is not None else ()
        wanted = sorted(i for i, s in ideal.segments[name].items() if s is SegmentState.ONLINE)
        peers = tuple(dict.fromkeys(i for i in (*reported, *wanted) if i in live))
        if peers:
            out.append(UploadPeerOnly(name, peers))
    return out


def set_download_uri(uri: str) -> Callable[[SegmentRecord], SegmentRecord]:
    """Update function: the URI goes in only while the record is DONE with none (a re-run changes nothing)."""

    def update(record: SegmentRecord) -> SegmentRecord:
        if record.status is not SegmentStatus.DONE or record.download_uri:
            return record
        return replace(record, download_uri=uri)

    return update


class PeerUploader:
    """Carries out ``UploadPeerOnly``: download from a peer, verify, put into the deep store, set the URI."""

    def __init__(self, store: ClusterStore, deep_store: DeepStore, timeout: float,
                 headers: Mapping[str, str] | None = None, verify: ssl.SSLContext | bool = True):
        self.received_bytes = 0  # archive bytes fetched from peers (the controller receives segment bytes here)
        self.store = store
        self.deep_store = deep_store
        self.timeout = timeout
        self.headers = dict(headers or {})  # what the peer needs to know the controller asks
        self.verify = verify

    def upload(self, table: str, item: UploadPeerOnly, record: SegmentRecord) -> str:
        """Returns the new download URI. Raises UploadError."""
        errors: list[str] = []
        with tempfile.TemporaryDirectory(prefix="cuvee-repair-") as work:
            for peer in item.peers:
                archive = Path(work) / f"{item.segment}{ARCHIVE_SUFFIX}"
                try:
                    self._fetch(table, item.segment, peer, archive)
                    self.received_bytes += archive.stat().st_size
                    self._verify(archive, Path(work) / "check", record)
                    break
                except (httpx.HTTPError, SegmentError, UploadError, OSError) as exc:
                    errors.append(f"{peer}: {exc}")
            else:
                raise UploadError(f"no peer gave a good copy of {table}/{item.segment}: {'; '.join(errors)}")
            try:
                uri = self.deep_store.put(archive, deep_store_key(table, item.segment))
            except (DeepStoreError, OSError) as exc:
                raise UploadError(f"deep store put of {table}/{item.segment} failed: {exc}") from None
        stored = self.store.update_segment(table, item.segment, set_download_uri(uri))
        log.warning("repair: uploaded peer-only segment %s/%s to %s", table, item.segment,
                    stored.record.download_uri)
        return stored.record.download_uri

    def _fetch(self, table: str, segment: str, peer: str, target: Path) -> None:
        found = self.store.find(InstanceInfo, self.store.paths.instance(peer))
        url = instance_url(found.record) if found is not None else None
        if url is None:
            raise UploadError("the instance registered no HTTP port")
        full = url + SEGMENT_DOWNLOAD_PATH.format(table=table, segment=segment)
        with httpx.stream("GET", full, timeout=self.timeout, headers=self.headers, verify=self.verify) as response:
            if response.status_code != 200:
                raise UploadError(f"GET {full} answered HTTP {response.status_code}")
            with open(target, "wb") as out:
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)

    @staticmethod
    def _verify(archive: Path, scratch: Path, record: SegmentRecord) -> None:
        path = unpack(archive, scratch, overwrite=True)  # checks the segment's own CRC
        if path.name != record.segment_name:
            raise UploadError(f"archive holds segment {path.name}, not {record.segment_name}")
        crc = ImmutableSegment.load(path).crc
        if record.crc is not None and crc != record.crc:
            raise UploadError(f"peer copy has CRC {crc}, committed CRC is {record.crc}")
