"""Upsert key map: metadata bytes per key and rows per second through ``KeyMap.apply`` (keys made as the server
makes them, ``cuvee.upsert.hashing``, then decided), one partition, batches as a consumer sees them, for each
``hashFunction`` and key shape: NONE with a LONG key (its own index), a 16-character STRING key and a STRING + LONG
key (a hash and the key's bytes), MD5 and MURMUR3 (a 128-bit hash of a 16-character STRING key).

    .venv/bin/python bench/upsert.py [--keys 1000000] [--batch 10000] [--updates 0.5] [--shapes none-long ...]

The server-level figures of issue 7 (ingest rows per CPU-second against append-only, query latency overhead,
restart time with and without preload) are ``bench/upsert_server.py``'s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from rich.console import Console
from rich.table import Table

from cuvee.config.schema import DataType
from cuvee.upsert.hashing import KeyColumn, KeyHasher
from cuvee.upsert.keymap import KeyMap, Versions


def _strings(ids: np.ndarray) -> pa.Array:
    """16 characters: ``acct-`` and 11 digits."""
    return pa.array(np.char.add("acct-", np.char.zfill(ids.astype(str), 11)))


@dataclass(frozen=True)
class Shape:
    label: str
    hasher: KeyHasher
    rows: Callable[[np.ndarray], pa.Table]


ID = KeyColumn("id", DataType.LONG, -(2**63))
NAME = KeyColumn("name", DataType.STRING, "null")
SHAPES = {
    "none-long": Shape("NONE, LONG key", KeyHasher([ID]), lambda ids: pa.table({"id": ids})),
    "none-string": Shape("NONE, 16-char STRING key", KeyHasher([NAME]), lambda ids: pa.table({"name": _strings(ids)})),
    "none-composite": Shape("NONE, STRING + LONG key", KeyHasher([NAME, ID]),
                            lambda ids: pa.table({"name": _strings(ids), "id": ids % 7})),
    "md5": Shape("MD5, 16-char STRING key", KeyHasher([NAME], "MD5"), lambda ids: pa.table({"name": _strings(ids)})),
    "murmur3": Shape("MURMUR3, 16-char STRING key", KeyHasher([NAME], "MURMUR3"),
                     lambda ids: pa.table({"name": _strings(ids)})),
}


@dataclass
class Figures:
    bytes_per_key: float = 0.0
    insert_rate: float = 0.0
    insert_hash_share: float = 0.0
    update_rate: float = 0.0
    update_hash_share: float = 0.0


def measure(shape: Shape, keys: int, batch: int, updates: float) -> Figures:
    """Every key once (inserts), then updates of random existing keys, a tenth of them out of order."""
    rng = np.random.default_rng(7)
    km = KeyMap(np.int64)  # comparison values are epoch millis, as with a time column
    out = Figures()

    def run(ids: np.ndarray, cmps: np.ndarray, first_doc: int) -> tuple[float, float]:
        rows = shape.rows(ids)  # made outside the timing: the decoder's work, not the key map's
        t0 = time.perf_counter()
        made = shape.hasher.keys(rows)
        t1 = time.perf_counter()
        km.apply(0, Versions(made, cmps, np.arange(len(ids), dtype=np.int32) + first_doc))
        return t1 - t0, time.perf_counter() - t1

    hashing = deciding = 0.0
    for start in range(0, keys, batch):
        ids = np.arange(start, min(start + batch, keys))
        h, d = run(ids, np.full(len(ids), 1, np.int64), start)
        hashing, deciding = hashing + h, deciding + d
    out.bytes_per_key = km.bytes_per_key
    out.insert_rate, out.insert_hash_share = keys / (hashing + deciding), hashing / (hashing + deciding)
    count = int(keys * updates)
    hashing = deciding = 0.0
    for start in range(0, count, batch):
        ids = rng.integers(0, keys, min(batch, count - start))
        h, d = run(ids, rng.choice(np.array([0, 2], np.int64), len(ids), p=[0.1, 0.9]), keys + start)
        hashing, deciding = hashing + h, deciding + d
    if count:
        out.update_rate, out.update_hash_share = count / (hashing + deciding), hashing / (hashing + deciding)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--updates", type=float, default=0.5, help="share of rows after the first pass that update")
    parser.add_argument("--shapes", nargs="*", choices=list(SHAPES), default=list(SHAPES))
    args = parser.parse_args()
    table = Table(title=f"upsert key map, {args.keys:,} keys, batches of {args.batch:,}")
    for column in ("hashFunction, key", "bytes per key", "inserts rows/s", "(hashing)", "updates rows/s",
                   "(hashing)"):
        table.add_column(column, justify="right")
    for name in args.shapes:
        shape = SHAPES[name]
        got = measure(shape, args.keys, args.batch, args.updates)
        table.add_row(shape.label, f"{got.bytes_per_key:.1f}", f"{got.insert_rate:,.0f}",
                      f"{got.insert_hash_share:.0%}", f"{got.update_rate:,.0f}", f"{got.update_hash_share:.0%}")
    Console(width=150).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
