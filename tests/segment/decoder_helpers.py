"""What the decoder tests of every format share: a schema with every column type (and a default), the rows the
tests write in each format, and decoding through the factory from Pinot's stream config keys."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import numpy as np
import orjson
import pyarrow as pa

from cuvee.config import IndexingConfig
from cuvee.config.decoder_config import DecoderSpec, parse_decoder
from cuvee.config.errors import ConfigIssue
from cuvee.config.schema import Schema
from cuvee.decode.base import Decoder
from cuvee.decode.factory import build_decoder
from cuvee.segment.mutable import MutableSegment
from cuvee.server.consuming.build import logical_table

SCHEMA = Schema.from_json({
    "schemaName": "every",
    "dimensionFieldSpecs": [
        {"name": "i", "dataType": "INT"},
        {"name": "b", "dataType": "BOOLEAN"},
        {"name": "s", "dataType": "STRING", "defaultNullValue": "unknown"},
        {"name": "raw", "dataType": "BYTES"},
        {"name": "doc", "dataType": "JSON"},
        {"name": "tags", "dataType": "STRING", "singleValueField": False},
        {"name": "nums", "dataType": "INT", "singleValueField": False},
    ],
    "metricFieldSpecs": [{"name": "l", "dataType": "LONG"}, {"name": "f", "dataType": "FLOAT"},
                         {"name": "d", "dataType": "DOUBLE"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "TIMESTAMP", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}],
})

TS = 1_790_000_000_000


def row(n: int) -> dict[str, Any]:
    """Row ``n`` as the columns hold it after decoding (the TIMESTAMP as epoch millis)."""
    return {"i": n, "b": n % 2 == 0, "s": f"s{n}", "raw": bytes([n % 256, 0xFF]), "doc": {"k": f"v{n}", "n": n},
            "tags": [f"t{n % 3}", "x"], "nums": [n, n + 1], "l": n * 1_000_000_007, "f": n + 0.5, "d": n / 4,
            "ts": TS + n}


def expected(n: int) -> dict[str, Any]:
    out = row(n)
    out["doc"] = orjson.dumps(out["doc"]).decode()
    return out


def spec_of(stream_configs: dict[str, str], stream_type: str = "kafka") -> DecoderSpec:
    issues: list[ConfigIssue] = []
    spec = parse_decoder(stream_configs, stream_type, lambda key: key, issues)
    assert issues == [] and spec is not None, issues
    return spec


def decoder_of(stream_configs: dict[str, str], schema: Schema = SCHEMA, **options: Any) -> Decoder:
    return build_decoder(spec_of(stream_configs), schema, **options)


def as_rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows with TIMESTAMPs as epoch millis, for comparison with ``expected``."""
    columns = [column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column for column in batch.columns]
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names).to_pylist()


def stored(schema: Schema, batch: pa.RecordBatch) -> pa.Table:
    """The rows as a consuming segment stores them: nulls become the columns' defaults."""
    segment = MutableSegment(schema, IndexingConfig(), max(batch.num_rows, 1))
    segment.append(batch, np.arange(batch.num_rows))
    return logical_table(segment.snapshot(), schema)


def avro_bytes(schema: Any, record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()
