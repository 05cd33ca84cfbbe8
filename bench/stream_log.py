"""Embedded-log throughput: produce and fetch of 200-byte JSON values, in messages per second.

    .venv/bin/python bench/stream_log.py [--messages N] [--partitions P]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from cuvee.stream.log import LogAdmin, LogConsumer, LogProducer


def make_values(count: int) -> list[bytes]:
    """JSON events padded to exactly 200 bytes."""
    values = []
    for i in range(count):
        event = {"id": i, "user": f"user{i % 1000}", "country": "FR", "amount": i * 0.5, "ts": 1_700_000_000_000 + i}
        text = json.dumps(event, separators=(",", ":"))[:-1] + ',"pad":""}'
        values.append((text[:-2] + "x" * (200 - len(text)) + '"}').encode())
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--fetch-size", type=int, default=10_000)
    args = parser.parse_args()
    values = make_values(args.messages)
    assert all(len(v) == 200 for v in values)
    with tempfile.TemporaryDirectory() as log_dir:
        LogAdmin(log_dir).create_topic("bench", args.partitions)
        with LogProducer(log_dir, "bench", retention_check_interval_ms=None) as producer:
            started = time.perf_counter()
            producer.produce_many((None, value) for value in values)
            producer.flush()
            produce_s = time.perf_counter() - started
        print(f"produce: {args.messages / produce_s:,.0f} msgs/s ({args.messages:,} x 200-byte values, "
              f"{args.partitions} partition(s), {produce_s:.2f}s)")

        keyed = [(str(i).encode(), v) for i, v in enumerate(values[: args.messages // 5])]
        LogAdmin(log_dir).create_topic("bench-keyed", args.partitions)
        with LogProducer(log_dir, "bench-keyed", retention_check_interval_ms=None) as producer:
            started = time.perf_counter()
            producer.produce_many(keyed)
            producer.flush()
            keyed_s = time.perf_counter() - started
        print(f"produce keyed: {len(keyed) / keyed_s:,.0f} msgs/s ({len(keyed):,} messages)")

        with LogConsumer(log_dir, "bench") as consumer:
            started = time.perf_counter()
            total = 0
            for partition in range(args.partitions):
                offset = 0
                while True:
                    batch = consumer.fetch(partition, offset, max_messages=args.fetch_size, max_wait_ms=0)
                    if not len(batch):
                        break
                    total += len(batch)
                    offset = batch.next_offset
            fetch_s = time.perf_counter() - started
        assert total == args.messages, (total, args.messages)
        print(f"fetch: {total / fetch_s:,.0f} msgs/s (batches of {args.fetch_size:,}, {fetch_s:.2f}s)")


if __name__ == "__main__":
    main()
