"""Where dropped messages go so an operator can find them: a bounded in-memory log, optionally mirrored to JSONL.

Bounded because a stream full of garbage must not exhaust memory; the total count is kept exactly so metrics
and status pages can say how many were dropped even after the oldest examples were forgotten.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from pathlib import Path

import orjson

from cuvee.decode.base import BadRecord


class BadRecordLog:
    """Thread-safe: the total number of bad records ever seen plus the most recent ``keep_last`` of them."""

    def __init__(self, keep_last: int = 100, jsonl_path: str | Path | None = None) -> None:
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")
        self._recent: collections.deque[BadRecord] = collections.deque(maxlen=keep_last)
        self._total = 0
        self._lock = threading.Lock()
        self._path = Path(jsonl_path) if jsonl_path is not None else None

    @property
    def total(self) -> int:
        return self._total

    @property
    def jsonl_path(self) -> Path | None:
        return self._path

    def recent(self) -> list[BadRecord]:
        """The last records seen, oldest first."""
        with self._lock:
            return list(self._recent)

    def record(self, records: Iterable[BadRecord], source: str = "") -> None:
        """Count and keep ``records``; ``source`` (e.g. a segment name) is written to the JSONL file with them."""
        batch = list(records)
        if not batch:
            return
        with self._lock:
            self._total += len(batch)
            self._recent.extend(batch)
            if self._path is not None:
                lines = b"".join(
                    orjson.dumps(
                        {"source": source, "offset": r.offset, "reason": r.reason, "raw_prefix": r.raw_prefix}
                    )
                    + b"\n"
                    for r in batch
                )
                with self._path.open("ab") as out:
                    out.write(lines)
