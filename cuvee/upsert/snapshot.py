"""Valid-docs snapshots of an upsert partition's committed segments: what a restart preloads instead of deciding
every key again (Pinot's validDocIds snapshots, made atomic per partition).

A snapshot *round* captures, in one step under the partition's lock, every committed segment's valid docs and
tombstones (delete rows that hide their key). Only the segments whose state changed since the last round get a new
file (``<segment>.<round>.vd``); a per-partition manifest (``partition-<p>.json``, replaced atomically) then names,
for every committed segment of the partition, its CRC and the file of its latest snapshot. A restart trusts only
what the manifest names, so it always reads one consistent round: a crash while files are written leaves the
previous manifest, whose files are still there (files are deleted only once no manifest names them).

File format: ``CUVEEVD1``, the segment's CRC (u64), the two bitmaps' sizes (u32 each), the valid docs and the
tombstone docs as serialized roaring bitmaps, and a CRC32 of all that (u32), little-endian.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from pyroaring import BitMap

log = logging.getLogger(__name__)

MAGIC = b"CUVEEVD1"
_HEADER = struct.Struct("<8sQII")
_TRAILER = struct.Struct("<I")


class SnapshotError(ValueError):
    """A snapshot file that is not one, or not of the segment copy it is read for."""


@dataclass(frozen=True)
class Snapshot:
    """A committed segment's valid docs and tombstone docs (sorted uint32 arrays) at one round."""

    crc: int
    valid: np.ndarray
    tombstones: np.ndarray


def encode(snapshot: Snapshot) -> bytes:
    valid = BitMap(np.asarray(snapshot.valid, np.uint32)).serialize()
    tombs = BitMap(np.asarray(snapshot.tombstones, np.uint32)).serialize()
    body = _HEADER.pack(MAGIC, snapshot.crc & 0xFFFFFFFFFFFFFFFF, len(valid), len(tombs)) + valid + tombs
    return body + _TRAILER.pack(zlib.crc32(body))


def decode(data: bytes) -> Snapshot:
    if len(data) < _HEADER.size + _TRAILER.size:
        raise SnapshotError("snapshot too short")
    magic, crc, n_valid, n_tombs = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SnapshotError("not a valid-docs snapshot")
    end = _HEADER.size + n_valid + n_tombs
    if end + _TRAILER.size != len(data) or _TRAILER.unpack_from(data, end)[0] != zlib.crc32(data[:end]):
        raise SnapshotError("snapshot damaged (size or checksum)")
    valid = BitMap.deserialize(data[_HEADER.size:_HEADER.size + n_valid])
    tombs = BitMap.deserialize(data[_HEADER.size + n_valid:end])
    return Snapshot(crc, _array(valid), _array(tombs))


def _array(bits: BitMap) -> np.ndarray:
    return np.frombuffer(bits.to_array(), np.uint32).astype(np.int64) if len(bits) else np.zeros(0, np.int64)


class SnapshotStore:
    """One table's snapshot files on one server (``<table dir>/.upsert/``)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def _manifest(self, partition: int) -> Path:
        return self.directory / f"partition-{int(partition)}.json"

    def load(self, partition: int) -> dict[str, Snapshot]:
        """Segment name → snapshot, as of the partition's last complete round; empty when there is none or it is
        unreadable (the partition is then decided from the rows, as without snapshots)."""
        path = self._manifest(partition)
        try:
            manifest = orjson.loads(path.read_bytes())
            entries = manifest["segments"]
            out: dict[str, Snapshot] = {}
            for name, entry in entries.items():
                snap = decode((self.directory / _safe_file(entry["file"])).read_bytes())
                if snap.crc != int(entry["crc"]):
                    raise SnapshotError(f"snapshot of {name} is of CRC {snap.crc}, the manifest says {entry['crc']}")
                out[str(name)] = snap
            return out
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("upsert snapshots of partition %d in %s are unusable (%s): it is rebuilt from its rows",
                        partition, self.directory, exc)
            return {}

    def write_round(self, partition: int, round_id: int, changed: Mapping[str, Snapshot],
                    kept: Mapping[str, Snapshot]) -> set[str]:
        """Write ``changed`` segments' snapshots, then the manifest naming them and the ``kept`` ones (unchanged
        since their last round: their file is named again, or written if the last manifest lacks it), then delete
        files no manifest names any more. Returns the segments the new manifest names."""
        self.directory.mkdir(parents=True, exist_ok=True)
        previous = self._entries(partition)
        entries: dict[str, dict[str, object]] = {}
        for name, snap in kept.items():
            old = previous.get(name)
            if old is not None and old["crc"] == snap.crc:
                entries[name] = old
            else:
                changed = {**changed, name: snap}  # the last manifest lost it: write it again
        for name, snap in changed.items():
            file = _safe_file(f"{name}.{round_id}.vd")
            _write_atomically(self.directory / file, encode(snap))
            entries[name] = {"crc": snap.crc, "file": file}
        _write_atomically(self._manifest(partition), orjson.dumps({"round": round_id, "segments": entries}))
        named = {str(e["file"]) for e in entries.values()}
        for old in previous.values():
            if old["file"] not in named:
                (self.directory / old["file"]).unlink(missing_ok=True)
        return set(entries)

    def _entries(self, partition: int) -> dict[str, dict[str, object]]:
        """The last manifest's well-formed entries (a damaged manifest counts as none)."""
        try:
            entries = orjson.loads(self._manifest(partition).read_bytes())["segments"]
            out: dict[str, dict[str, object]] = {}
            for name, entry in entries.items():
                if isinstance(entry, dict) and isinstance(entry.get("crc"), int) and isinstance(entry.get("file"), str):
                    _safe_file(entry["file"])
                    out[str(name)] = {"crc": entry["crc"], "file": entry["file"]}
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}


def _safe_file(name: str) -> str:
    if not name or "/" in name or "\\" in name or "\x00" in name or name.startswith("."):
        raise SnapshotError(f"bad snapshot file name {name[:80]!r}")
    return name


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
