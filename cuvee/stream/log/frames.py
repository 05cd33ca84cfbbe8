"""Record framing of the embedded log's segment files: pure functions over bytes, no I/O.

One frame per message, little-endian::

    crc u32 | length u32 | offset i64 | timestamp_ms i64 | key_len i32 (-1: no key) | key | value

``length`` counts the bytes after the length field; ``crc`` is CRC-32 of everything after itself (length included),
so a torn or zero-filled tail is detected and truncated on recovery. The offset is stored in the frame so a reader
can check that the index pointed it at the right message.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cuvee.spi.stream import StreamError

HEADER = struct.Struct("<IIqqi")
HEADER_SIZE = HEADER.size  # 28
_AFTER_CRC = struct.Struct("<Iqqi")
_CRC = struct.Struct("<I")
_LENGTH_FIELD_END = 8
_FIXED_AFTER_LENGTH = HEADER_SIZE - _LENGTH_FIELD_END  # offset, timestamp, key_len
HEADER_DTYPE = np.dtype([("crc", "<u4"), ("length", "<u4"), ("offset", "<i8"), ("timestamp", "<i8"), ("key_len", "<i4")])
_HEADER_BYTE_RANGE = np.arange(HEADER_SIZE, dtype=np.int64)

# (key, value, timestamp_ms): what a producer hands the log.
Record = tuple[bytes | None, bytes, int]


class CorruptFrameError(StreamError):
    """A frame the index points at does not check out: the segment file was damaged after it was written."""


def encode_frame(offset: int, key: bytes | None, value: bytes, timestamp_ms: int) -> bytes:
    key_len = -1 if key is None else len(key)
    key_bytes = key or b""
    rest = _AFTER_CRC.pack(_FIXED_AFTER_LENGTH + len(key_bytes) + len(value), offset, timestamp_ms, key_len)
    crc = zlib.crc32(value, zlib.crc32(key_bytes, zlib.crc32(rest)))
    return b"".join((_CRC.pack(crc), rest, key_bytes, value))


@dataclass(frozen=True)
class EncodedChunk:
    """Frames for consecutive offsets, ready to append in one write, with their positions relative to ``start``."""

    data: bytes
    relative_positions: list[int]


def encode_frames(first_offset: int, records: Sequence[Record], start: int = 0) -> EncodedChunk:
    frames = []
    positions = []
    position = start
    for i, (key, value, timestamp_ms) in enumerate(records):
        frame = encode_frame(first_offset + i, key, value, timestamp_ms)
        frames.append(frame)
        positions.append(position)
        position += len(frame)
    return EncodedChunk(b"".join(frames), positions)


def read_headers(buffer: bytes, starts: np.ndarray) -> np.ndarray:
    """Headers of the frames at ``starts`` (byte positions in ``buffer``) as one structured array, vectorised."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    gathered = raw[starts.astype(np.int64)[:, None] + _HEADER_BYTE_RANGE]
    return gathered.view(HEADER_DTYPE).reshape(len(starts))


@dataclass
class DecodedFrames:
    """Messages of consecutive offsets from ``first_offset``, column by column (see MessageBatch)."""

    first_offset: int
    keys: list[bytes | None]
    values: list[bytes]
    timestamps_ms: list[int]

    def __len__(self) -> int:
        return len(self.values)

    def extend(self, other: DecodedFrames) -> None:
        if other.first_offset != self.first_offset + len(self):
            raise ValueError("decoded frames must be consecutive to be joined")
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.timestamps_ms.extend(other.timestamps_ms)


def decode_frames(buffer: bytes, starts: np.ndarray, first_offset: int, context: str) -> DecodedFrames:
    """Messages of consecutive offsets whose frames start at ``starts`` in ``buffer`` (which must hold them whole).

    Checks every frame's CRC and offset: a mismatch means on-disk damage, reported as CorruptFrameError. Headers
    are checked as arrays; the only per-frame Python work is one CRC call and one slice per value."""
    count = len(starts)
    if count == 0:
        return DecodedFrames(first_offset, [], [], [])
    if int(starts[-1]) + HEADER_SIZE > len(buffer):
        raise CorruptFrameError(f"{context}: frame at offset {first_offset + count - 1} runs past the end of the data")
    headers = read_headers(buffer, starts)
    starts = starts.astype(np.int64)
    ends = starts + _LENGTH_FIELD_END + headers["length"].astype(np.int64)
    expected = np.arange(first_offset, first_offset + count, dtype=np.int64)
    key_lens = headers["key_len"].astype(np.int64)
    bad = (headers["offset"] != expected) | (ends > len(buffer)) | (key_lens > ends - starts - HEADER_SIZE)
    if count > 1:
        bad[:-1] |= ends[:-1] != starts[1:]
    if bad.any():
        where = int(np.argmax(bad))
        raise CorruptFrameError(f"{context}: frame for offset {first_offset + where} does not match the index")
    view = memoryview(buffer)
    end_list = ends.tolist()
    crc = zlib.crc32
    computed = np.fromiter((crc(view[start:end]) for start, end in zip((starts + 4).tolist(), end_list)),
                           dtype=np.uint32, count=count)
    mismatched = computed != headers["crc"]
    if mismatched.any():
        raise CorruptFrameError(f"{context}: CRC mismatch in the frame of offset {first_offset + int(np.argmax(mismatched))}")
    bodies = starts + HEADER_SIZE
    if (key_lens < 0).all():
        keys: list[bytes | None] = [None] * count
    else:
        keys = [None if length < 0 else buffer[body:body + length]
                for body, length in zip(bodies.tolist(), key_lens.tolist())]
        bodies = bodies + np.maximum(key_lens, 0)
    values = [buffer[body:end] for body, end in zip(bodies.tolist(), end_list)]
    return DecodedFrames(first_offset, keys, values, headers["timestamp"].tolist())


def frame_length(header: bytes) -> int:
    """Total size of a frame from its first 8 bytes."""
    return _LENGTH_FIELD_END + struct.unpack_from("<I", header, 4)[0]


def valid_frame_at(buffer: bytes, start: int, expected_offset: int) -> int | None:
    """End of the frame at ``start`` if it is complete, has the expected offset and a good CRC; else None."""
    if start + HEADER_SIZE > len(buffer):
        return None
    crc, length, offset, _timestamp, key_len = HEADER.unpack_from(buffer, start)
    end = start + _LENGTH_FIELD_END + length
    if length < _FIXED_AFTER_LENGTH or end > len(buffer) or offset != expected_offset:
        return None
    if key_len > length - _FIXED_AFTER_LENGTH:
        return None
    if zlib.crc32(memoryview(buffer)[start + 4 : end]) != crc:
        return None
    return end


def scan_valid_frames(buffer: bytes, start: int, first_offset: int) -> list[int]:
    """Start positions of the run of valid frames from ``start`` (recovery: what survives a torn tail)."""
    positions = []
    position = start
    offset = first_offset
    while (end := valid_frame_at(buffer, position, offset)) is not None:
        positions.append(position)
        position = end
        offset += 1
    return positions


def max_timestamp(buffer: bytes, starts: np.ndarray) -> int | None:
    """Newest message timestamp among the frames at ``starts`` (age-based retention)."""
    if len(starts) == 0:
        return None
    return int(read_headers(buffer, starts)["timestamp"].max())
