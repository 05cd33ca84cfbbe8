"""Record framing of the embedded log (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.stream.log import frames

records = st.lists(
    st.tuples(st.none() | st.binary(max_size=40), st.binary(max_size=300), st.integers(0, 2**62)), max_size=30
)


@given(records, st.integers(0, 2**40))
def test_encode_decode_round_trip(batch: list[frames.Record], first_offset: int) -> None:
    chunk = frames.encode_frames(first_offset, batch)
    starts = np.asarray(chunk.relative_positions, dtype=np.int64)
    decoded = frames.decode_frames(chunk.data, starts, first_offset, "test")
    assert decoded.first_offset == first_offset
    assert list(zip(decoded.keys, decoded.values, decoded.timestamps_ms)) == batch
    assert frames.scan_valid_frames(chunk.data, 0, first_offset) == chunk.relative_positions


@given(records.filter(lambda batch: len(batch) > 0), st.data())
def test_a_torn_tail_ends_the_valid_run(batch: list[frames.Record], data: st.DataObject) -> None:
    chunk = frames.encode_frames(0, batch)
    cut = data.draw(st.integers(chunk.relative_positions[-1], len(chunk.data) - 1))
    assert frames.scan_valid_frames(chunk.data[:cut], 0, 0) == chunk.relative_positions[:-1]


def test_a_flipped_bit_fails_the_crc() -> None:
    chunk = frames.encode_frames(10, [(b"k", b"hello world", 5), (None, b"second", 6)])
    damaged = bytearray(chunk.data)
    damaged[frames.HEADER_SIZE + 3] ^= 0x01
    assert frames.scan_valid_frames(bytes(damaged), 0, 10) == []
    with pytest.raises(frames.CorruptFrameError, match="CRC"):
        frames.decode_frames(bytes(damaged), np.asarray(chunk.relative_positions), 10, "test")


def test_decode_rejects_a_frame_with_an_unexpected_offset() -> None:
    chunk = frames.encode_frames(10, [(None, b"a", 1)])
    with pytest.raises(frames.CorruptFrameError, match="offset 11"):
        frames.decode_frames(chunk.data, np.asarray([0]), 11, "test")


def test_max_timestamp_reads_headers_only() -> None:
    chunk = frames.encode_frames(0, [(None, b"a", 30), (None, b"b", 90), (None, b"c", 60)])
    assert frames.max_timestamp(chunk.data, np.asarray(chunk.relative_positions)) == 90
    assert frames.max_timestamp(b"", np.asarray([], dtype=np.int64)) is None
