"""On-disk layout of an immutable segment directory, and the CRC that replicas compare.

    <segment_name>/
      metadata.json             stats, offsets, time range, CRC (not covered by the CRC: it holds the build time)
      <col>.fwd.arrow           forward index: dictionary ids (int32 / list<int32>) or raw values; nulls are
                                the Arrow validity bitmap
      <col>.dict.arrow          sorted distinct values (dictionary columns)
      <col>.inv.arrow           inverted index: serialized roaring bitmap per dictionary id (binary column)
      <col>.range.arrow         range index: sorted values and their doc ids
      <col>.bloom.arrow         bloom filter bits (uint8)

Every ``.arrow`` file is an uncompressed Arrow IPC file with one record batch, so it can be memory-mapped.
Column names are percent-encoded in file names, so any column name is a safe file name.
"""

from __future__ import annotations

import enum
import os
import zlib
from pathlib import Path
from urllib.parse import quote

import orjson
import pyarrow as pa

from cuvee.segment.errors import CorruptSegmentError
from cuvee.segment.metadata import SegmentMetadata

METADATA_FILE = "metadata.json"
_CRC_CHUNK = 1 << 20


class ColumnFile(str, enum.Enum):
    FORWARD = "fwd"
    DICTIONARY = "dict"
    INVERTED = "inv"
    RANGE = "range"
    BLOOM = "bloom"


def column_file(segment_dir: Path, column: str, kind: ColumnFile) -> Path:
    return segment_dir / f"{quote(column, safe='')}.{kind.value}.arrow"


def write_arrow(path: Path, table: pa.Table) -> int:
    """Write one record batch as an uncompressed IPC file; returns its size in bytes."""
    batch = table.combine_chunks().to_batches()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for b in batch or [pa.record_batch([pa.array([], f.type) for f in table.schema], schema=table.schema)]:
            writer.write_batch(b)
    return path.stat().st_size


def write_array(path: Path, name: str, array: pa.Array) -> int:
    return write_arrow(path, pa.table({name: array}))


def read_arrow(path: Path) -> pa.Table:
    """Memory-map an IPC file (zero-copy: pages load on first touch)."""
    try:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
        table.schema.names  # decoded lazily: a damaged footer surfaces here, not at first use
        return table
    except FileNotFoundError:
        raise CorruptSegmentError(f"segment file missing: {path}") from None
    except (pa.ArrowException, OSError, ValueError) as exc:  # a damaged footer can fail as a UnicodeDecodeError
        raise CorruptSegmentError(f"segment file {path} is unreadable: {exc}") from exc


def data_files(segment_dir: Path) -> list[Path]:
    """The files the CRC covers, in the fixed order it reads them (every file but metadata.json, by name)."""
    return sorted((p for p in segment_dir.iterdir() if p.is_file() and p.name != METADATA_FILE), key=lambda p: p.name)


def compute_crc(segment_dir: Path) -> int:
    """CRC-32 over each data file's name and bytes, in name order; independent of build time and host."""
    crc = 0
    for path in data_files(segment_dir):
        crc = zlib.crc32(path.name.encode() + b"\0", crc)
        with open(path, "rb") as f:
            while chunk := f.read(_CRC_CHUNK):
                crc = zlib.crc32(chunk, crc)
    return crc


def write_metadata(segment_dir: Path, metadata: SegmentMetadata) -> None:
    tmp = segment_dir / (METADATA_FILE + ".tmp")
    tmp.write_bytes(orjson.dumps(metadata.to_json(), option=orjson.OPT_INDENT_2))
    os.replace(tmp, segment_dir / METADATA_FILE)


def read_metadata(segment_dir: Path) -> SegmentMetadata:
    path = segment_dir / METADATA_FILE
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise CorruptSegmentError(f"{segment_dir} is not a segment: no {METADATA_FILE}") from None
    except orjson.JSONDecodeError as exc:
        raise CorruptSegmentError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptSegmentError(f"{path} is not a JSON object")
    return SegmentMetadata.from_json(doc)
