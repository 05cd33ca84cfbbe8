"""The benchmark workload every bench script shares: the issue's 10-column event.

4 string dimensions with 10, 100, 1,000 and 10,000 distinct values, a LONG id, 4 numeric metrics and a
millisecond TIMESTAMP, generated deterministically from a seed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cuvee.config.schema import Schema

SCHEMA = Schema.from_json(
    {
        "schemaName": "events",
        "dimensionFieldSpecs": [
            {"name": "country", "dataType": "STRING"},
            {"name": "device", "dataType": "STRING"},
            {"name": "page", "dataType": "STRING"},
            {"name": "user", "dataType": "STRING"},
            {"name": "event_id", "dataType": "LONG"},
        ],
        "metricFieldSpecs": [
            {"name": "clicks", "dataType": "INT"},
            {"name": "views", "dataType": "LONG"},
            {"name": "revenue", "dataType": "DOUBLE"},
            {"name": "latency", "dataType": "FLOAT"},
        ],
        "dateTimeFieldSpecs": [
            {"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
        ],
    }
)
CARDINALITIES = {"country": 10, "device": 100, "page": 1_000, "user": 10_000}
DIMENSIONS = tuple(CARDINALITIES)


def event_table(rows: int, seed: int = 7) -> pa.Table:
    """``rows`` events as one Arrow table of the schema's types, ``ts`` ascending."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {}
    for name, cardinality in CARDINALITIES.items():
        words = np.array([f"{name}-{i:05d}" for i in rng.permutation(cardinality)], dtype=object)
        columns[name] = pa.array(words[rng.integers(0, cardinality, rows)], pa.string())
    columns["event_id"] = pa.array(np.arange(rows, dtype=np.int64) * 7 + 1_000_000_000)
    columns["clicks"] = pa.array(rng.integers(0, 10, rows, dtype=np.int32))
    columns["views"] = pa.array(rng.integers(0, 1_000, rows, dtype=np.int64))
    columns["revenue"] = pa.array(rng.random(rows) * 100)
    columns["latency"] = pa.array(rng.random(rows).astype(np.float32))
    millis = 1_790_000_000_000 + np.sort(rng.integers(0, 3_600_000, rows))
    columns["ts"] = pa.array(millis).cast(pa.timestamp("ms"))
    return pa.table(columns).select(SCHEMA.column_names).cast(SCHEMA.arrow_schema()).combine_chunks()


def event_batches(rows: int, batch_rows: int, seed: int = 7) -> list[pa.RecordBatch]:
    """The same events cut into record batches of ``batch_rows``."""
    return event_table(rows, seed).to_batches(max_chunksize=batch_rows)
