"""Several processes append to one embedded-log topic at once while this process reads it."""

from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict
from pathlib import Path

import pytest

from cuvee.spi.stream import StreamMessage
from cuvee.stream.log import LogAdmin, LogConsumer, LogProducer, TopicSettings

PROCESSES = 4
MESSAGES_PER_PROCESS = 2500
PARTITIONS = 2


def produce_from_child(log_dir: str, worker: int, start: multiprocessing.synchronize.Barrier) -> None:
    start.wait(60)  # everyone (and the reader) is ready: the appends really overlap
    with LogProducer(log_dir, "shared", batch_messages=10, retention_check_interval_ms=None) as producer:
        for i in range(MESSAGES_PER_PROCESS):
            producer.produce(f"{worker}:{i}".encode(), key=f"key-{worker}-{i % 5}".encode())


@pytest.mark.multiprocess
def test_concurrent_producers_in_several_processes(tmp_path: Path) -> None:
    LogAdmin(tmp_path).create_topic("shared", PARTITIONS, TopicSettings(segment_bytes=16 * 1024))
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES + 1)
    workers = [context.Process(target=produce_from_child, args=(str(tmp_path), w, start)) for w in range(PROCESSES)]
    for worker in workers:
        worker.start()
    start.wait(60)

    # Read while they write: every fetch must continue the previous one exactly (lock-free readers see a prefix).
    total = PROCESSES * MESSAGES_PER_PROCESS
    received: dict[int, list[StreamMessage]] = defaultdict(list)
    next_offsets = [0] * PARTITIONS
    deadline = time.monotonic() + 90
    with LogConsumer(tmp_path, "shared", poll_interval_ms=1) as consumer:
        while sum(next_offsets) < total:
            assert time.monotonic() < deadline, f"only {sum(next_offsets)} of {total} messages arrived"
            assert all(w.exitcode in (None, 0) for w in workers), "a producer process failed"
            for partition in range(PARTITIONS):
                batch = consumer.fetch(partition, next_offsets[partition], max_messages=700, max_wait_ms=5)
                assert [m.offset for m in batch.messages] == list(range(next_offsets[partition], batch.next_offset))
                received[partition].extend(batch.messages)
                next_offsets[partition] = batch.next_offset
        assert [consumer.latest_offset(p) for p in range(PARTITIONS)] == next_offsets
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0

    values = [m.value.decode() for p in range(PARTITIONS) for m in received[p]]
    assert len(values) == len(set(values)) == total, "every message exactly once"
    assert set(values) == {f"{w}:{i}" for w in range(PROCESSES) for i in range(MESSAGES_PER_PROCESS)}
    writers_in_turn = [m.value.split(b":")[0] for m in received[0]]
    switches = sum(a != b for a, b in zip(writers_in_turn, writers_in_turn[1:]))
    assert switches >= 10, f"the producers hardly overlapped ({switches} switches): the test proves little"
    for partition in range(PARTITIONS):
        last_seen: dict[str, int] = {}
        for message in received[partition]:
            worker, i = message.value.decode().split(":")
            assert last_seen.get(worker, -1) < int(i), "one producer's messages keep their order in a partition"
            last_seen[worker] = int(i)
    segments = len(list((tmp_path / "shared" / "0").glob("*.log")))
    assert segments > 3, "the test should roll segments while several writers append"
