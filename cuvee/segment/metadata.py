"""``metadata.json`` of an immutable segment: what it holds, per-column stats, offsets, time range and CRC.

Stats values are JSON-friendly: BYTES as hex, TIMESTAMP as epoch milliseconds, non-finite floats as the strings
"NaN", "Infinity" and "-Infinity". Floats' min and max follow IEEE total order (NaN sorts last).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from cuvee.segment.errors import CorruptSegmentError

FORMAT_VERSION = 1


@dataclass(frozen=True)
class ColumnMetadata:
    """Stats and layout of one column."""

    name: str
    data_type: str
    single_value: bool
    cardinality: int
    min: Any
    max: Any
    is_sorted: bool
    null_count: int
    has_dictionary: bool
    has_inverted_index: bool
    has_range_index: bool
    has_bloom_filter: bool
    bytes: int
    total_values: int  # number of values (multi-value: sum of list lengths; single-value: non-null rows)
    max_values_per_entry: int
    bloom_hashes: int = 0

    _KEYS = {
        "data_type": "dataType",
        "single_value": "singleValue",
        "is_sorted": "isSorted",
        "null_count": "nullCount",
        "has_dictionary": "hasDictionary",
        "has_inverted_index": "hasInvertedIndex",
        "has_range_index": "hasRangeIndex",
        "has_bloom_filter": "hasBloomFilter",
        "total_values": "totalValues",
        "max_values_per_entry": "maxValuesPerEntry",
        "bloom_hashes": "bloomHashes",
    }

    def to_json(self) -> dict[str, Any]:
        return {self._KEYS.get(k, k): v for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ColumnMetadata:
        reverse = {v: k for k, v in cls._KEYS.items()}
        return cls(**{reverse.get(k, k): v for k, v in doc.items()})


@dataclass(frozen=True)
class SegmentMetadata:
    """Everything ``metadata.json`` says about a segment."""

    segment_name: str
    table_name: str
    total_docs: int
    crc: int
    creation_time_ms: int
    columns: dict[str, ColumnMetadata]
    start_offset: int | None = None
    end_offset: int | None = None
    time_column: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    time_unit: str | None = None
    sorted_column: str | None = None
    custom: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "segmentName": self.segment_name,
            "tableName": self.table_name,
            "totalDocs": self.total_docs,
            "crc": self.crc,
            "creationTimeMs": self.creation_time_ms,
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "timeColumn": self.time_column,
            "startTime": self.start_time,
            "endTime": self.end_time,
            "timeUnit": self.time_unit,
            "sortedColumn": self.sorted_column,
            "custom": self.custom,
            "formatVersion": self.format_version,
            "columns": {name: c.to_json() for name, c in self.columns.items()},
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SegmentMetadata:
        try:
            version = doc["formatVersion"]
            if version != FORMAT_VERSION:
                raise CorruptSegmentError(f"unsupported segment format version {version} (this Cuvee reads {FORMAT_VERSION})")
            return cls(
                segment_name=doc["segmentName"],
                table_name=doc["tableName"],
                total_docs=doc["totalDocs"],
                crc=doc["crc"],
                creation_time_ms=doc["creationTimeMs"],
                start_offset=doc.get("startOffset"),
                end_offset=doc.get("endOffset"),
                time_column=doc.get("timeColumn"),
                start_time=doc.get("startTime"),
                end_time=doc.get("endTime"),
                time_unit=doc.get("timeUnit"),
                sorted_column=doc.get("sortedColumn"),
                custom=doc.get("custom") or {},
                format_version=version,
                columns={name: ColumnMetadata.from_json(c) for name, c in doc["columns"].items()},
            )
        except (KeyError, TypeError) as exc:
            raise CorruptSegmentError(f"metadata.json is incomplete or malformed: {exc!r}") from exc


def json_value(value: Any) -> Any:
    """A stats value as JSON can carry it (see module docstring)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value
