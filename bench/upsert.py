"""Upsert key map: metadata bytes per key at ten million keys (target ≤ 32) and rows per second through
``KeyMap.apply`` (keys hashed as the server hashes them, then resolved), one partition, batches as a consumer sees them.

    .venv/bin/python bench/upsert.py [--keys 10000000] [--batch 100000] [--updates 0.5]

The server-level figures of issue 7 (ingest rows per CPU-second against append-only, query latency overhead,
restart time with and without preload) come with the server wiring.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from cuvee.upsert.hashing import key_hashes
from cuvee.upsert.keymap import KeyMap, Versions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--updates", type=float, default=0.5, help="share of rows after the first pass that update")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    km = KeyMap(np.int64)  # comparison values are epoch millis, as with a time column
    hash_s = apply_s = 0.0
    rows = 0
    # first pass: every key once (inserts); second pass: updates of random existing keys, some out of order
    for start in range(0, args.keys, args.batch):
        ids = np.arange(start, min(start + args.batch, args.keys))
        batch = pa.table({"user": pa.array(np.char.add("user-", ids.astype(str))), "region": pa.array(ids % 7)})
        t0 = time.perf_counter()
        keys = key_hashes(batch, ["user", "region"])
        t1 = time.perf_counter()
        km.apply(0, Versions(keys, np.full(len(ids), 1, np.int64), np.arange(len(ids), dtype=np.int32) + start))
        t2 = time.perf_counter()
        hash_s, apply_s, rows = hash_s + t1 - t0, apply_s + t2 - t1, rows + len(ids)
    insert_rate = rows / (hash_s + apply_s)
    bytes_per_key = km.bytes_per_key
    updates = int(args.keys * args.updates)
    u_hash = u_apply = 0.0
    for start in range(0, updates, args.batch):
        ids = rng.integers(0, args.keys, min(args.batch, updates - start))
        batch = pa.table({"user": pa.array(np.char.add("user-", ids.astype(str))), "region": pa.array(ids % 7)})
        cmps = rng.choice(np.array([0, 2], np.int64), len(ids), p=[0.1, 0.9])  # a tenth arrive out of order
        t0 = time.perf_counter()
        keys = key_hashes(batch, ["user", "region"])
        t1 = time.perf_counter()
        km.apply(1, Versions(keys, cmps, np.arange(len(ids), dtype=np.int32) + start))
        t2 = time.perf_counter()
        u_hash, u_apply = u_hash + t1 - t0, u_apply + t2 - t1
    table = Table(title=f"upsert key map, {args.keys:,} keys, batches of {args.batch:,}")
    for column in ("figure", "value"):
        table.add_column(column, justify="right")
    table.add_row("metadata bytes per key", f"{bytes_per_key:.1f}")
    table.add_row("inserts: rows/s (hash + apply)", f"{insert_rate:,.0f}")
    table.add_row("  of which hashing s / apply s", f"{hash_s:.2f} / {apply_s:.2f}")
    if updates:
        table.add_row("updates: rows/s (hash + apply)", f"{updates / (u_hash + u_apply):,.0f}")
        table.add_row("  of which hashing s / apply s", f"{u_hash:.2f} / {u_apply:.2f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
