"""Embedded log on disk: segment rolling, index lookups, torn-tail recovery, retention, topic layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from cuvee.errors import UserError
from cuvee.spi.stream import OffsetOutOfRangeError, StreamMessage, TopicExistsError, TopicNotFoundError
from cuvee.stream.log import CorruptFrameError, LogAdmin, LogConsumer, LogProducer, TopicSettings
from cuvee.stream.log.frames import encode_frame
from cuvee.stream.log.consumer import FULL_READ_S, IDLE_POLL_MAX_S
from cuvee.stream.log.partition import list_segment_bases


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def make_topic(log_dir: Path, name: str = "events", partitions: int = 1, **settings: int | None) -> LogAdmin:
    admin = LogAdmin(log_dir)
    admin.create_topic(name, partitions, TopicSettings(**settings))  # type: ignore[arg-type]
    return admin


def produce(log_dir: Path, count: int, start: int = 0, topic: str = "events", timestamp_ms: int | None = None,
            batch: int = 10) -> None:
    with LogProducer(log_dir, topic, retention_check_interval_ms=None) as producer:
        for i in range(start, start + count):
            producer.produce(f"message-{i:05d}".encode(), key=b"k", partition=0, timestamp_ms=timestamp_ms)
            if (i + 1) % batch == 0:
                producer.flush()


def read_all(log_dir: Path, start: int = 0, topic: str = "events") -> list[StreamMessage]:
    with LogConsumer(log_dir, topic) as consumer:
        messages = []
        offset = start
        while batch := consumer.fetch(0, offset, max_messages=1000, max_wait_ms=0).messages:
            messages.extend(batch)
            offset = batch[-1].offset + 1
        return messages


def partition_dir(log_dir: Path, topic: str = "events", partition: int = 0) -> Path:
    return log_dir / topic / str(partition)


def test_topic_layout_on_disk(tmp_path: Path) -> None:
    make_topic(tmp_path, partitions=3, segment_bytes=4096, retention_ms=60_000)
    meta = json.loads((tmp_path / "events" / "topic.json").read_text())
    assert meta["partitions"] == 3 and meta["segment_bytes"] == 4096 and meta["retention_ms"] == 60_000
    assert meta["retention_bytes"] is None
    for partition in range(3):
        names = sorted(os.listdir(partition_dir(tmp_path, partition=partition)))
        assert names == [".lock", "00000000000000000000.index", "00000000000000000000.log"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging directories left behind"
    with pytest.raises(TopicExistsError):
        make_topic(tmp_path)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "x" * 250, "sp ace"])
def test_bad_topic_names_are_user_errors(tmp_path: Path, name: str) -> None:
    with pytest.raises(UserError, match="invalid topic name"):
        LogAdmin(tmp_path).create_topic(name, 1)


def test_bad_settings_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="at least 1 partition"):
        LogAdmin(tmp_path).create_topic("t", 0)
    with pytest.raises(UserError, match="segment size"):
        TopicSettings(segment_bytes=0)
    with pytest.raises(UserError, match="retention_ms"):
        TopicSettings(retention_ms=-5)
    make_topic(tmp_path, partitions=3)
    with pytest.raises(UserError, match="never shrink"):
        LogAdmin(tmp_path).set_partition_count("events", 2)


def test_segments_roll_and_one_fetch_reads_across_them(tmp_path: Path) -> None:
    make_topic(tmp_path, segment_bytes=500)
    produce(tmp_path, 200)
    bases = list_segment_bases(partition_dir(tmp_path))
    assert len(bases) > 10
    # Every segment file stays within the size, and starts where the previous one ended.
    for base, next_base in zip(bases, bases[1:]):
        stem = partition_dir(tmp_path) / f"{base:020d}"
        assert os.path.getsize(stem.with_suffix(".log")) <= 500
        assert os.path.getsize(stem.with_suffix(".index")) == 4 * (next_base - base)
    with LogConsumer(tmp_path, "events") as consumer:
        batch = consumer.fetch(0, 3, max_messages=150, max_wait_ms=0)
    assert [m.offset for m in batch.messages] == list(range(3, 153))
    assert batch.messages[-1].value == b"message-00152"


def test_index_lookup_goes_straight_to_the_frame(tmp_path: Path) -> None:
    make_topic(tmp_path, segment_bytes=1000)
    produce(tmp_path, 60)
    with LogConsumer(tmp_path, "events") as consumer:
        for offset in (0, 1, 17, 33, 59):
            base, position = consumer.position(0, offset)
            log_file = partition_dir(tmp_path) / f"{base:020d}.log"
            frame = encode_frame(offset, b"k", f"message-{offset:05d}".encode(), read_all(tmp_path, offset)[0].timestamp_ms)
            assert log_file.read_bytes()[position : position + len(frame)] == frame
        # Damage the first frame: fetching later offsets never reads it, fetching it reports the damage.
        base, position = consumer.position(0, 0)
        log_file = partition_dir(tmp_path) / f"{base:020d}.log"
        data = bytearray(log_file.read_bytes())
        data[position + 40] ^= 0xFF
        log_file.write_bytes(bytes(data))
        assert [m.offset for m in consumer.fetch(0, 5, max_messages=3, max_wait_ms=0).messages] == [5, 6, 7]
        with pytest.raises(CorruptFrameError, match="CRC"):
            consumer.fetch(0, 0, max_messages=3, max_wait_ms=0)


def _append_raw(path: Path, data: bytes) -> None:
    with open(path, "ab") as out:
        out.write(data)


TORN_TAILS = {
    "partial frame": lambda log, index: _append_raw(log, encode_frame(20, None, b"torn" * 20, 1)[:37]),
    "zero-filled tail": lambda log, index: _append_raw(log, bytes(300)),
    "frame with a bad crc and its index entry": lambda log, index: (
        _append_raw(index, np.asarray([log.stat().st_size], "<u4").tobytes()),
        _append_raw(log, encode_frame(20, None, b"x" * 50, 1)[:-1] + b"!"),
    ),
    "half an index entry": lambda log, index: _append_raw(index, b"\x07\x00"),
}


@pytest.mark.parametrize("damage", TORN_TAILS, ids=list(TORN_TAILS))
def test_a_torn_tail_is_truncated_on_the_next_append(tmp_path: Path, damage: str) -> None:
    make_topic(tmp_path)
    produce(tmp_path, 20)
    log_file = partition_dir(tmp_path) / f"{0:020d}.log"
    index_file = log_file.with_suffix(".index")
    clean_size = log_file.stat().st_size
    TORN_TAILS[damage](log_file, index_file)
    assert [m.offset for m in read_all(tmp_path)] == list(range(20)), "readers never see a torn tail"
    produce(tmp_path, 5, start=20)
    messages = read_all(tmp_path)
    assert [m.offset for m in messages] == list(range(25))
    assert [m.value for m in messages] == [f"message-{i:05d}".encode() for i in range(25)]
    assert index_file.stat().st_size == 25 * 4
    assert bytes(300) not in log_file.read_bytes()[clean_size:]


def test_frames_written_without_their_index_entries_are_recovered(tmp_path: Path) -> None:
    """A writer that died between writing frames and their index entries: the complete frames are kept."""
    make_topic(tmp_path)
    produce(tmp_path, 10)
    log_file = partition_dir(tmp_path) / f"{0:020d}.log"
    _append_raw(log_file, b"".join(encode_frame(o, None, f"orphan-{o}".encode(), 7) for o in (10, 11)))
    _append_raw(log_file, encode_frame(12, None, b"torn", 7)[:20])
    assert len(read_all(tmp_path)) == 10
    produce(tmp_path, 1, start=13)
    values = [m.value for m in read_all(tmp_path)]
    assert values[10:] == [b"orphan-10", b"orphan-11", b"message-00013"]


def test_retention_by_size_deletes_whole_old_segments(tmp_path: Path) -> None:
    admin = make_topic(tmp_path, segment_bytes=1000, retention_bytes=3500)
    produce(tmp_path, 300)
    before = list_segment_bases(partition_dir(tmp_path))
    earliest = admin.apply_retention("events")[0]
    after = list_segment_bases(partition_dir(tmp_path))
    assert earliest == after[0] > 0
    assert after == before[len(before) - len(after) :], "only the oldest segments go"
    kept = sum(f.stat().st_size for f in partition_dir(tmp_path).iterdir() if f.suffix in (".log", ".index"))
    assert kept <= 3500
    with LogConsumer(tmp_path, "events") as consumer:
        assert consumer.latest_offset(0) == 300
        with pytest.raises(OffsetOutOfRangeError) as raised:
            consumer.fetch(0, earliest - 1, max_wait_ms=0)
        assert raised.value.earliest == earliest
    assert [m.offset for m in read_all(tmp_path, earliest)] == list(range(earliest, 300))


def test_retention_by_age_uses_message_timestamps(tmp_path: Path) -> None:
    admin = make_topic(tmp_path, segment_bytes=800, retention_ms=10_000)
    produce(tmp_path, 100, timestamp_ms=1_000)  # old
    produce(tmp_path, 100, start=100, timestamp_ms=50_000)  # recent
    first_recent_segment = max(b for b in list_segment_bases(partition_dir(tmp_path)) if b <= 100)
    earliest = admin.apply_retention("events", now_ms=55_000)[0]
    assert earliest == first_recent_segment
    assert 0 < earliest <= 100
    assert all(m.timestamp_ms == 50_000 for m in read_all(tmp_path, 100))
    # Later, everything is old: even the active segment goes, and the log carries on at the same offset.
    assert admin.apply_retention("events", now_ms=1_000_000)[0] == 200
    with LogConsumer(tmp_path, "events") as consumer:
        assert (consumer.earliest_offset(0), consumer.latest_offset(0)) == (200, 200)
    produce(tmp_path, 3, start=200)
    assert [m.offset for m in read_all(tmp_path, 200)] == [200, 201, 202]
    assert admin.apply_retention("events", now_ms=0)[0] == 200, "nothing expires when nothing is old"


def test_producers_apply_retention_on_their_interval(tmp_path: Path) -> None:
    make_topic(tmp_path, segment_bytes=500, retention_bytes=1200)
    clock = FakeClock()
    producer = LogProducer(tmp_path, "events", retention_check_interval_ms=60_000, clock_ms=clock)
    for i in range(100):
        producer.produce(f"m{i}".encode(), partition=0)
    producer.flush()
    assert list_segment_bases(partition_dir(tmp_path))[0] == 0, "the interval has not passed yet"
    clock.now_ms += 60_000
    producer.produce(b"one more", partition=0)
    producer.close()
    with LogConsumer(tmp_path, "events") as consumer:
        assert consumer.earliest_offset(0) > 0
        assert consumer.latest_offset(0) == 101


def test_unkeyed_messages_go_round_robin(tmp_path: Path) -> None:
    make_topic(tmp_path, partitions=4)
    with LogProducer(tmp_path, "events") as producer:
        for i in range(400):
            producer.produce(str(i).encode())
    with LogConsumer(tmp_path, "events") as consumer:
        assert [consumer.latest_offset(p) for p in range(4)] == [100, 100, 100, 100]


def test_a_deleted_topic_is_gone_for_its_producers(tmp_path: Path) -> None:
    admin = make_topic(tmp_path)
    producer = LogProducer(tmp_path, "events")
    producer.produce(b"buffered", partition=0)
    admin.delete_topic("events")
    assert admin.list_topics() == []
    assert not (tmp_path / "events").exists()
    for _attempt in range(2):  # the message stays pending: it never vanishes silently
        with pytest.raises(TopicNotFoundError):
            producer.flush()
    with pytest.raises(TopicNotFoundError):
        LogProducer(tmp_path, "events")


def test_an_idle_wait_stats_the_log_instead_of_reading_it_again(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer at the end of its partition polls every ``poll_interval_ms``: each poll was a full read (~100 µs:
    a directory listing and an index read), ~5% of a core per idle consuming segment. Now a poll compares a mark
    of the directory and the newest index, and reads only when it changed."""
    make_topic(tmp_path)
    produce(tmp_path, 10)
    reads, marks = [], []
    with LogConsumer(tmp_path, "events", poll_interval_ms=1) as consumer:
        original = consumer._read
        monkeypatch.setattr(consumer, "_read", lambda *a: reads.append(1) or original(*a))
        reader = consumer._reader(0)
        mark = reader.mark
        monkeypatch.setattr(reader, "mark", lambda: marks.append(1) or mark())
        batch = consumer.fetch(0, 10, max_wait_ms=60)
    # the pause doubles from 1 ms to IDLE_POLL_MAX_S: ~7 wake-ups in 60 ms, not 60
    assert len(marks) <= 2 + len(reads) + 60 / 1000 / IDLE_POLL_MAX_S + 4
    # (the first read opens the index the mark watches; a read every FULL_READ_S in case an mtime missed a change)
    assert batch.messages == [] and len(reads) <= 2 + 60 / 1000 / FULL_READ_S


@pytest.mark.parametrize("roll", [False, True], ids=["appended", "in-a-new-segment"])
def test_a_message_written_while_a_fetch_waits_is_found_by_its_mark(tmp_path: Path, roll: bool) -> None:
    import threading

    make_topic(tmp_path, **({"segment_bytes": 60} if roll else {}))
    produce(tmp_path, 3, batch=1)
    with LogConsumer(tmp_path, "events", poll_interval_ms=1) as consumer:
        assert len(consumer.fetch(0, 0, max_wait_ms=0).messages) == 3  # the reader holds its files open
        writer = threading.Timer(0.05, produce, (tmp_path, 1), {"start": 3, "batch": 1})
        writer.start()
        batch = consumer.fetch(0, 3, max_wait_ms=5_000)
        writer.join()
    assert [m.value for m in batch.messages] == [b"message-00003"]
    if roll:
        assert len(list_segment_bases(partition_dir(tmp_path))) > 1
