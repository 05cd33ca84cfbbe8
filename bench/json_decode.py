"""JSON decode throughput (messages/s) for the 10-column event of bench/mutable_append.py.

Measures the fast path (well-typed messages through Arrow's JSON reader), a batch with one poison message
(one retry chunk goes message by message), and the per-message fallback alone (every message needs coercion).

    .venv/bin/python bench/json_decode.py [--rows 200000] [--batch 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from cuvee.decode import JsonDecoder
from _events import SCHEMA, event_batches


def event_messages(rows: int, batch_rows: int) -> list[list[bytes]]:
    """The events as JSON messages (timestamps as epoch millis, as producers usually send them)."""
    out = []
    for batch in event_batches(rows, batch_rows):
        records = batch.to_pylist()
        for record in records:
            record["ts"] = int(record["ts"].timestamp() * 1000)
        out.append([orjson.dumps(record) for record in records])
    return out


def with_strings_for_numbers(messages: list[list[bytes]]) -> list[list[bytes]]:
    """Every id sent as a JSON string: valid input that only the coercing fallback accepts."""
    return [[m.replace(b'"event_id":', b'"event_id":"', 1).replace(b',"clicks"', b'","clicks"', 1) for m in batch]
            for batch in messages]


def with_poison(messages: list[list[bytes]]) -> list[list[bytes]]:
    return [batch[:-1] + [b"{not json"] for batch in messages]


def rate(batches: list[list[bytes]], decode: Callable[[list[bytes], range], object], repeat: int) -> float:
    rows = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for batch in batches:
            decode(batch, range(len(batch)))
        best = min(best, time.perf_counter() - start)
    return rows / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    messages = event_messages(args.rows, args.batch)
    size = sum(len(m) for b in messages for m in b) / args.rows
    print(f"JSON decode: {args.rows:,} messages (~{size:.0f} bytes) in batches of {args.batch:,}, "
          f"best of {args.repeat}")
    decoder = JsonDecoder(SCHEMA)
    sample = decoder.decode(messages[0], range(len(messages[0])))
    assert not sample.bad and sample.num_good == len(messages[0])
    cases = {
        "fast path (well-typed)": messages,
        "one poison message per batch": with_poison(messages),
        "every message coerced (fallback)": with_strings_for_numbers(messages),
    }
    for label, batches in cases.items():
        print(f"  {label:<34} {rate(batches, decoder.decode, args.repeat):>12,.0f} msgs/s")


if __name__ == "__main__":
    main()
