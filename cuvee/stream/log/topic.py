"""Topic layout of the embedded log on disk, and its ``topic.json`` (partition count and retention settings).

``<dir>/<topic>/topic.json`` is the authority for the partition count: partition directories are created before
the count that exposes them is written, and the file is replaced atomically (temp file + rename), so a reader sees
either the old count or the new one, never a partial file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from cuvee.errors import UserError
from cuvee.spi.stream import TopicExistsError, TopicNotFoundError

log = logging.getLogger(__name__)

TOPIC_FILE = "topic.json"
TOPIC_LOCK_FILE = ".topic.lock"
FORMAT_VERSION = 1
# Kafka's rule for topic names; a leading dot is ours (temporary and deleted topics).
_TOPIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}")
MAX_SEGMENT_BYTES = 1 << 30  # index entries are 32-bit positions inside a segment file


@dataclass(frozen=True)
class TopicSettings:
    """Per-topic storage settings. ``None`` retention means unlimited."""

    segment_bytes: int = 64 * 1024 * 1024
    retention_bytes: int | None = None
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            raise UserError(f"segment size must be between 1 and {MAX_SEGMENT_BYTES} bytes, got {self.segment_bytes}")
        for name in ("retention_bytes", "retention_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise UserError(f"{name} must be >= 0 or unset (unlimited), got {value}")


@dataclass(frozen=True)
class TopicMeta:
    partitions: int
    settings: TopicSettings

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT_VERSION, "partitions": self.partitions, **asdict(self.settings)},
                          indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TopicMeta:
        raw = json.loads(data)
        settings = TopicSettings(
            segment_bytes=int(raw["segment_bytes"]),
            retention_bytes=raw.get("retention_bytes"),
            retention_ms=raw.get("retention_ms"),
        )
        return cls(partitions=int(raw["partitions"]), settings=settings)


def check_topic_name(name: str) -> None:
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise UserError(
            f"invalid topic name {name!r}: use 1 to 249 of the characters A-Z a-z 0-9 . _ - (not starting with '.')"
        )


def partition_dir(topic_dir: Path, partition: int) -> Path:
    return topic_dir / str(partition)


class TopicStore:
    """The topics under one log directory: create, read, grow, reconfigure, delete."""

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root)

    def topic_dir(self, topic: str) -> Path:
        check_topic_name(topic)
        return self.root / topic

    def exists(self, topic: str) -> bool:
        return (self.topic_dir(topic) / TOPIC_FILE).is_file()

    def read(self, topic: str) -> TopicMeta:
        try:
            return TopicMeta.from_json((self.topic_dir(topic) / TOPIC_FILE).read_bytes())
        except (OSError, ValueError) as exc:
            # missing, not a directory, unreadable, not a topic file: one answer, so that a caller naming any
            # directory learns nothing of what exists on this host (the operator finds the cause in the log)
            if not isinstance(exc, FileNotFoundError):
                log.warning("topic %r in log directory %s cannot be read: %s", topic, self.root, exc)
            raise TopicNotFoundError(f"topic {topic!r} does not exist in log directory {self.root}") from None

    def create(self, topic: str, partitions: int, settings: TopicSettings) -> None:
        from cuvee.stream.log.partition import create_partition_files

        if partitions < 1:
            raise UserError(f"a topic needs at least 1 partition, got {partitions}")
        target = self.topic_dir(topic)
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".creating-{topic}-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            for partition in range(partitions):
                create_partition_files(partition_dir(staging, partition))
            (staging / TOPIC_LOCK_FILE).touch()
            _write_atomically(staging / TOPIC_FILE, TopicMeta(partitions, settings).to_json())
            try:
                os.rename(staging, target)  # atomic; fails if the topic exists (its directory is not empty)
            except OSError as exc:
                if target.exists():
                    raise TopicExistsError(f"topic {topic!r} already exists in log directory {self.root}") from exc
                raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def grow(self, topic: str, partitions: int) -> TopicMeta:
        from cuvee.stream.log.partition import create_partition_files

        topic_dir = self.topic_dir(topic)
        with self._topic_lock(topic):
            meta = self.read(topic)
            if partitions < meta.partitions:
                raise UserError(
                    f"topic {topic!r} has {meta.partitions} partitions; a topic can grow but never shrink "
                    f"(asked for {partitions})"
                )
            if partitions == meta.partitions:
                return meta
            for partition in range(meta.partitions, partitions):
                create_partition_files(partition_dir(topic_dir, partition), exist_ok=True)
            grown = replace(meta, partitions=partitions)
            _write_atomically(topic_dir / TOPIC_FILE, grown.to_json())
            return grown

    def configure(self, topic: str, settings: TopicSettings) -> None:
        with self._topic_lock(topic):
            meta = self.read(topic)
            _write_atomically(self.topic_dir(topic) / TOPIC_FILE, replace(meta, settings=settings).to_json())

    def delete(self, topic: str) -> None:
        target = self.topic_dir(topic)
        if not (target / TOPIC_FILE).is_file():
            raise TopicNotFoundError(f"topic {topic!r} does not exist in log directory {self.root}")
        # Rename first so the topic disappears at once for everyone; then remove the files at leisure.
        doomed = self.root / f".deleting-{topic}-{uuid.uuid4().hex}"
        try:
            os.rename(target, doomed)
        except FileNotFoundError:
            raise TopicNotFoundError(f"topic {topic!r} does not exist in log directory {self.root}") from None
        shutil.rmtree(doomed, ignore_errors=True)

    def list_topics(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if not p.name.startswith(".") and (p / TOPIC_FILE).is_file())

    @contextmanager
    def _topic_lock(self, topic: str) -> Iterator[None]:
        try:
            fd = os.open(self.topic_dir(topic) / TOPIC_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise TopicNotFoundError(f"topic {topic!r} does not exist in log directory {self.root}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)


class TopicView:
    """One topic's ``topic.json``, re-read only when the file changes (producers and consumers check it often)."""

    def __init__(self, store: TopicStore, topic: str):
        self.store = store
        self.topic = topic
        self.dir = store.topic_dir(topic)
        self._stamp: tuple[int, int, int] | None = None
        self._meta = store.read(topic)

    def meta(self) -> TopicMeta:
        try:
            stat = os.stat(self.dir / TOPIC_FILE)
        except OSError:  # missing, not a directory, not readable: one answer, so callers learn nothing of the host
            raise TopicNotFoundError(f"topic {self.topic!r} does not exist in log directory {self.store.root}") from None
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            self._meta = self.store.read(self.topic)
            self._stamp = stamp
        return self._meta

    def partition_dir(self, partition: int) -> Path:
        return partition_dir(self.dir, partition)
