"""One partition of the embedded log: rolled segment files, each with a dense offset index, appended under a lock.

A partition directory holds ``<base:020d>.log`` (frames, see ``frames``) and ``<base:020d>.index`` (one little-endian
u32 per message: the frame's byte position in its log file), so finding an offset is one array lookup, not a scan.
Writers hold ``fcntl.flock`` on ``.lock`` while they check the tail, assign offsets and append; they write the frames
first and the index entries after, in one write each. Readers take no lock: a message exists for them once its
index entry does, and the frame it points at is complete by then. A writer that died mid-append leaves a tail the
next writer repairs: complete frames with a good CRC are indexed, the torn rest is truncated.
"""

from __future__ import annotations

import bisect
import fcntl
import mmap
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cuvee.spi.stream import OffsetOutOfRangeError, TopicNotFoundError
from cuvee.stream.log import frames
from cuvee.stream.log.frames import CorruptFrameError, Record

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
LOCK_FILE = ".lock"
INDEX_DTYPE = np.dtype("<u4")
INDEX_ENTRY_SIZE = INDEX_DTYPE.itemsize


def segment_stem(base: int) -> str:
    return f"{base:020d}"


def create_partition_files(path: Path, exist_ok: bool = False) -> None:
    path.mkdir(exist_ok=exist_ok)
    (path / LOCK_FILE).touch()
    if not list_segment_bases(path):
        _create_segment(path, 0)


def _create_segment(path: Path, base: int) -> None:
    # The index first: readers discover segments by their .log file.
    for suffix in (INDEX_SUFFIX, LOG_SUFFIX):
        os.close(os.open(path / (segment_stem(base) + suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))


def list_segment_bases(path: Path) -> list[int]:
    return sorted(int(name[: -len(LOG_SUFFIX)]) for name in os.listdir(path) if name.endswith(LOG_SUFFIX))


def _pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    while len(data) < size:
        more = os.pread(fd, size - len(data), position + len(data))
        if not more:
            break
        data += more
    return data


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass
class _ActiveSegment:
    """The last segment, open for appending, with its size and message count known to be consistent."""

    base: int
    log_fd: int
    index_fd: int
    log_size: int
    count: int

    @property
    def next_offset(self) -> int:
        return self.base + self.count

    def close(self) -> None:
        os.close(self.log_fd)
        os.close(self.index_fd)


class PartitionWriter:
    """Appends to one partition and applies its retention. Every call takes the partition's lock."""

    def __init__(self, path: Path, topic: str, partition: int):
        self.path = path
        self.context = f"{topic}[{partition}]"
        self._topic = topic

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise TopicNotFoundError(f"topic {self._topic!r} was deleted ({self.path} is gone)") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def append(self, records: Sequence[Record], segment_bytes: int, fsync: bool = False) -> int:
        """Append records at consecutive offsets; returns the first one. Rolls a new segment at ``segment_bytes``.

        Without ``fsync`` the data is in the OS's hands when this returns: it survives the process, not a power cut."""
        with self._locked():
            segment = self._open_active()
            first_offset = segment.next_offset
            try:
                pending: list[Record] = []
                pending_bytes = 0
                for record in records:
                    size = frames.HEADER_SIZE + len(record[0] or b"") + len(record[1])
                    if segment.log_size + pending_bytes + size > segment_bytes and segment.log_size + pending_bytes:
                        self._write(segment, pending, fsync)
                        pending, pending_bytes = [], 0
                        segment = self._roll(segment)
                    pending.append(record)
                    pending_bytes += size
                self._write(segment, pending, fsync)
            finally:
                segment.close()
            return first_offset

    def repair_tail(self) -> None:
        """Truncate a torn tail now (appends do it anyway): for readers that hit a damaged last frame."""
        with self._locked():
            self._open_active().close()

    def _write(self, segment: _ActiveSegment, records: Sequence[Record], fsync: bool) -> None:
        if not records:
            return
        chunk = frames.encode_frames(segment.next_offset, records, start=segment.log_size)
        _write_all(segment.log_fd, chunk.data)
        if fsync:
            os.fsync(segment.log_fd)  # frames reach the disk before the index entries that expose them
        _write_all(segment.index_fd, np.asarray(chunk.relative_positions, dtype=INDEX_DTYPE).tobytes())
        if fsync:
            os.fsync(segment.index_fd)
        segment.log_size += len(chunk.data)
        segment.count += len(records)

    def _roll(self, segment: _ActiveSegment) -> _ActiveSegment:
        segment.close()
        _create_segment(self.path, segment.next_offset)
        return self._open_active()

    def _open_active(self) -> _ActiveSegment:
        try:
            bases = list_segment_bases(self.path)
            if not bases:
                _create_segment(self.path, 0)
                bases = [0]
            stem = self.path / segment_stem(bases[-1])
            log_fd = os.open(stem.with_suffix(LOG_SUFFIX), os.O_RDWR | os.O_APPEND)
            index_fd = os.open(stem.with_suffix(INDEX_SUFFIX), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            raise TopicNotFoundError(f"topic {self._topic!r} was deleted ({self.path} is gone)") from None
        segment = _ActiveSegment(bases[-1], log_fd, index_fd, os.fstat(log_fd).st_size, 0)
        index_size = os.fstat(index_fd).st_size
        segment.count = index_size // INDEX_ENTRY_SIZE
        if not self._tail_is_clean(segment, index_size):
            self._recover(segment)
        return segment

    def _tail_is_clean(self, segment: _ActiveSegment, index_size: int) -> bool:
        if index_size % INDEX_ENTRY_SIZE:
            return False
        if segment.count == 0:
            return segment.log_size == 0
        last = int(np.frombuffer(os.pread(segment.index_fd, INDEX_ENTRY_SIZE, index_size - INDEX_ENTRY_SIZE), INDEX_DTYPE)[0])
        frame = os.pread(segment.log_fd, segment.log_size - last, last) if last < segment.log_size else b""
        return frames.valid_frame_at(frame, 0, segment.next_offset - 1) == segment.log_size - last

    def _recover(self, segment: _ActiveSegment) -> None:
        """Keep the indexed frames that check out, index complete frames written after them, cut the torn rest."""
        positions = np.frombuffer(_pread_exact(segment.index_fd, segment.count * INDEX_ENTRY_SIZE, 0), INDEX_DTYPE)
        data = _pread_exact(segment.log_fd, segment.log_size, 0)
        good = segment.count
        end = None
        while good > 0 and (end := frames.valid_frame_at(data, int(positions[good - 1]), segment.base + good - 1)) is None:
            good -= 1
        start = end if good > 0 and end is not None else 0
        extra = frames.scan_valid_frames(data, start, segment.base + good)
        valid_end = frames.valid_frame_at(data, extra[-1], segment.base + good + len(extra) - 1) if extra else start
        assert valid_end is not None
        os.ftruncate(segment.index_fd, good * INDEX_ENTRY_SIZE)
        _write_all(segment.index_fd, np.asarray(extra, dtype=INDEX_DTYPE).tobytes())
        os.ftruncate(segment.log_fd, valid_end)
        segment.count = good + len(extra)
        segment.log_size = valid_end

    def apply_retention(self, retention_bytes: int | None, retention_ms: int | None, now_ms: int) -> int:
        """Delete whole old segment files by total size and/or age; returns the earliest offset left.

        Size: the oldest segments go while the partition is larger than ``retention_bytes`` (the active segment
        always stays). Age: segments whose newest message is older than ``now_ms - retention_ms`` go, oldest first;
        if even the active segment is that old, a new empty one is rolled so the old one can go too."""
        with self._locked():
            segment = self._open_active()
            segment.close()
            bases = list_segment_bases(self.path)
            if retention_ms is not None:
                bases = self._delete_expired(bases, segment, now_ms - retention_ms)
            if retention_bytes is not None:
                sizes = [self._segment_bytes(base) for base in bases]
                total = sum(sizes)
                for base, size in zip(bases[:-1], sizes[:-1]):
                    if total <= retention_bytes:
                        break
                    self._delete_segment(base)
                    total -= size
            return list_segment_bases(self.path)[0]

    def _delete_expired(self, bases: list[int], active: _ActiveSegment, cutoff_ms: int) -> list[int]:
        remaining = list(bases)
        for base in bases:
            newest = self._newest_timestamp(base)
            if newest is not None and newest >= cutoff_ms:
                break
            if base == active.base:
                if newest is None:
                    break  # the active segment is empty: nothing to expire
                _create_segment(self.path, active.next_offset)
                remaining.append(active.next_offset)
            self._delete_segment(base)
            remaining.remove(base)
        return remaining

    def _newest_timestamp(self, base: int) -> int | None:
        stem = self.path / segment_stem(base)
        positions = np.fromfile(stem.with_suffix(INDEX_SUFFIX), dtype=INDEX_DTYPE)
        if len(positions) == 0:
            return None
        with open(stem.with_suffix(LOG_SUFFIX), "rb") as log, mmap.mmap(log.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return frames.max_timestamp(mapped, positions)  # type: ignore[arg-type]

    def _segment_bytes(self, base: int) -> int:
        stem = self.path / segment_stem(base)
        return os.stat(stem.with_suffix(LOG_SUFFIX)).st_size + os.stat(stem.with_suffix(INDEX_SUFFIX)).st_size

    def _delete_segment(self, base: int) -> None:
        stem = self.path / segment_stem(base)
        os.unlink(stem.with_suffix(LOG_SUFFIX))  # the .log first: it is what makes readers see the segment
        os.unlink(stem.with_suffix(INDEX_SUFFIX))


class PartitionReader:
    """Reads one partition by offset without locks. Keeps the segment files it reads open between calls."""

    def __init__(self, path: Path, topic: str, partition: int):
        self.path = path
        self.topic = topic
        self.partition = partition
        self._open: dict[int, tuple[int, int]] = {}

    def bases(self) -> list[int]:
        try:
            bases = list_segment_bases(self.path)
        except FileNotFoundError:
            raise TopicNotFoundError(f"topic {self.topic!r} was deleted ({self.path} is gone)") from None
        for base in set(self._open) - set(bases):
            for fd in self._open.pop(base):
                os.close(fd)
        return bases

    def mark(self) -> tuple[int, int] | None:
        """A cheap fingerprint of what is stored (~10 µs against ~100 µs for an empty ``read``): the directory's
        mtime (a segment created or deleted) and the size of the newest open index (an append). Taken *before* a
        read, an equal mark later means nothing was written since that read began — unless the directory changed within its mtime's coarse tick (the caller reads now and then
        anyway). None: not known (read)."""
        try:
            directory = os.stat(self.path).st_mtime_ns
            newest = max(self._open, default=None)
            size = -1 if newest is None else os.fstat(self._open[newest][1]).st_size
        except OSError:
            return None
        return directory, size

    def earliest_offset(self) -> int:
        bases = self.bases()
        return bases[0] if bases else 0

    def latest_offset(self) -> int:
        for _attempt in range(3):
            bases = self.bases()
            if not bases:
                return 0
            try:
                size = os.stat(self.path / (segment_stem(bases[-1]) + INDEX_SUFFIX)).st_size
            except FileNotFoundError:
                continue  # rolled or deleted under us: look again
            return bases[-1] + size // INDEX_ENTRY_SIZE
        raise TopicNotFoundError(f"topic {self.topic!r}: partition {self.partition} vanished while being read")

    def position(self, offset: int) -> tuple[int, int]:
        """(segment base, byte position in its log file) of a stored offset: one index lookup."""
        bases = self.bases()
        base = bases[bisect.bisect_right(bases, offset) - 1]
        _log_fd, index_fd = self._fds(base)
        entry = os.pread(index_fd, INDEX_ENTRY_SIZE, (offset - base) * INDEX_ENTRY_SIZE)
        if len(entry) < INDEX_ENTRY_SIZE:
            raise KeyError(f"offset {offset} is not stored in {self.topic}[{self.partition}]")
        return base, int(np.frombuffer(entry, INDEX_DTYPE)[0])

    def read(self, offset: int, max_messages: int) -> frames.DecodedFrames:
        """Up to ``max_messages`` stored messages from ``offset`` (none if it is not written yet); never waits."""
        for _attempt in range(3):
            bases = self.bases()
            if not bases:
                return frames.DecodedFrames(offset, [], [], [])
            if offset < bases[0]:
                raise OffsetOutOfRangeError(self.topic, self.partition, offset, bases[0])
            try:
                return self._read_from(bases, offset, max_messages)
            except FileNotFoundError:
                continue  # retention removed a segment between listing and opening it: list again
        raise OffsetOutOfRangeError(self.topic, self.partition, offset, self.earliest_offset())

    def _read_from(self, bases: list[int], offset: int, max_messages: int) -> frames.DecodedFrames:
        messages = frames.DecodedFrames(offset, [], [], [])
        i = bisect.bisect_right(bases, offset) - 1
        while i < len(bases) and len(messages) < max_messages:
            base = bases[i]
            got, segment_end = self._read_segment(base, offset, max_messages - len(messages))
            messages.extend(got)
            offset += len(got)
            if offset < segment_end or i + 1 >= len(bases) or bases[i + 1] != offset:
                break
            i += 1
        return messages

    def _read_segment(self, base: int, offset: int, limit: int) -> tuple[frames.DecodedFrames, int]:
        log_fd, index_fd = self._fds(base)
        count = os.fstat(index_fd).st_size // INDEX_ENTRY_SIZE
        relative = offset - base
        if relative >= count or limit <= 0:
            return frames.DecodedFrames(offset, [], [], []), base + count
        take = min(limit, count - relative)
        with_next = 1 if relative + take < count else 0
        raw = _pread_exact(index_fd, (take + with_next) * INDEX_ENTRY_SIZE, relative * INDEX_ENTRY_SIZE)
        positions = np.frombuffer(raw, INDEX_DTYPE).astype(np.int64)
        start = int(positions[0])
        if with_next:
            end = int(positions[take])
        else:
            last = int(positions[take - 1])
            end = last + frames.frame_length(_pread_exact(log_fd, 8, last))
        data = _pread_exact(log_fd, end - start, start)
        context = f"{self.path / segment_stem(base)}{LOG_SUFFIX}"
        if len(data) < end - start:
            raise CorruptFrameError(f"{context}: the log file is shorter than its index says")
        return frames.decode_frames(data, positions[:take] - start, offset, context), base + count

    def _fds(self, base: int) -> tuple[int, int]:
        fds = self._open.get(base)
        if fds is None:
            stem = self.path / segment_stem(base)
            log_fd = os.open(stem.with_suffix(LOG_SUFFIX), os.O_RDONLY)
            try:
                index_fd = os.open(stem.with_suffix(INDEX_SUFFIX), os.O_RDONLY)
            except FileNotFoundError:
                os.close(log_fd)
                raise
            fds = self._open[base] = (log_fd, index_fd)
        return fds

    def close(self) -> None:
        for fds in self._open.values():
            for fd in fds:
                os.close(fd)
        self._open.clear()
