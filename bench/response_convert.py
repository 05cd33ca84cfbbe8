"""Broker response building: Arrow result -> Pinot's JSON rows, for a large answer.

    .venv/bin/python bench/response_convert.py [--rows 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import orjson
import pyarrow as pa

from cuvee.query.response import result_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    n = args.rows
    table = pa.table({"i": pa.array(rng.integers(0, 1000, n)), "d": pa.array(rng.random(n)),
                      "s": pa.array([f"s{i % 100}" for i in range(n)]),
                      "ts": pa.array(rng.integers(0, 10**12, n).astype("datetime64[ms]"))})
    best_rows = best_json = float("inf")
    for _ in range(args.repeat):
        started = time.perf_counter()
        rows = result_table(table)
        best_rows = min(best_rows, time.perf_counter() - started)
        started = time.perf_counter()
        orjson.dumps(rows)
        best_json = min(best_json, time.perf_counter() - started)
    print(f"response rows: {n:,} rows x 4 columns in {best_rows:.3f} s ({n / best_rows:,.0f} rows/s); "
          f"JSON encoding {best_json:.3f} s")


if __name__ == "__main__":
    main()
