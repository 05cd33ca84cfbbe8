"""The server's segments on local disk.

Layout under ``data_dir``::

    <tableWithType>/<segment>/                 a committed segment directory (cuvee.segment format); consuming
                                               segments build here too
    <tableWithType>/.archives/<segment>.tar.zst the segment packed for peers (deterministic, so built on demand)
    <tableWithType>/.downloads/                downloads in progress
    <tableWithType>/.upsert/                   an upsert table's valid-docs snapshots (cuvee.upsert.snapshot)

A local copy is trusted only when its metadata CRC equals the committed metadata's CRC and its files still hash to
it; anything else is deleted and downloaded again.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

from cuvee.cluster.paths import check_name
from cuvee.segment.archive import ARCHIVE_SUFFIX, archive_suffix, pack
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment

log = logging.getLogger(__name__)

ARCHIVES = ".archives"
DOWNLOADS = ".downloads"
UPSERT_SNAPSHOTS = ".upsert"


class LocalSegments:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self._pack_lock = threading.Lock()

    def table_dir(self, table: str) -> Path:
        return self.data_dir / check_name("table", table)

    def segment_dir(self, table: str, segment: str) -> Path:
        return self.table_dir(table) / check_name("segment", segment)

    def archive_path(self, table: str, segment: str) -> Path:
        return self.table_dir(table) / ARCHIVES / (check_name("segment", segment) + ARCHIVE_SUFFIX)

    def downloads_dir(self, table: str) -> Path:
        path = self.table_dir(table) / DOWNLOADS
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scan(self) -> list[tuple[str, str]]:
        """(table, segment) of every segment directory on disk."""
        found: list[tuple[str, str]] = []
        if not self.data_dir.is_dir():
            return found
        for table_dir in sorted(p for p in self.data_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for seg_dir in sorted(p for p in table_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                found.append((table_dir.name, seg_dir.name))
        return found

    def load_valid(self, table: str, segment: str, crc: int | None) -> ImmutableSegment | None:
        """The local copy if it is intact and has the committed ``crc``, else None."""
        path = self.segment_dir(table, segment)
        if crc is None or not (path / "metadata.json").is_file():
            return None
        try:
            loaded = ImmutableSegment.load(path)
            if loaded.crc != crc:
                log.warning("local copy of %s/%s has CRC %s, committed CRC is %s", table, segment, loaded.crc, crc)
                return None
            loaded.verify_crc()
            return loaded
        except (SegmentError, OSError, ValueError) as exc:
            log.warning("local copy of %s/%s is unusable: %s", table, segment, exc)
            return None

    def delete(self, table: str, segment: str) -> None:
        shutil.rmtree(self.segment_dir(table, segment), ignore_errors=True)
        archive = self.archive_path(table, segment)
        archive.unlink(missing_ok=True)
        archive.with_name(check_name("segment", segment) + ".tar.gz").unlink(missing_ok=True)  # before zstd

    def delete_table_if_empty(self, table: str) -> None:
        table_dir = self.table_dir(table)
        if table_dir.is_dir() and not any(p for p in table_dir.iterdir() if not p.name.startswith(".")):
            shutil.rmtree(table_dir, ignore_errors=True)

    def archive(self, table: str, segment: ImmutableSegment) -> Path:
        """The segment's archive for peers, packed on first request (same bytes on every replica)."""
        target = self.archive_path(table, segment.name)
        with self._pack_lock:
            if not target.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                pack(segment.path, target)
        return target

    def keep_archive(self, table: str, segment: str, downloaded: Path) -> None:
        """Keep a downloaded zstd archive as the peer cache (the bytes ``archive`` would pack); a gzip one (an
        older deep store, a hand-made tar push) is dropped, and ``archive`` packs the segment anew when asked."""
        if archive_suffix(downloaded) != ARCHIVE_SUFFIX:
            downloaded.unlink(missing_ok=True)
            return
        target = self.archive_path(table, segment)
        target.parent.mkdir(parents=True, exist_ok=True)
        downloaded.replace(target)
