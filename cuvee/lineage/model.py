"""The segment lineage record of one table (``ClusterPaths.lineage``): entries that each replace ``segments_from``
by ``segments_to``. One versioned node per table, changed only by compare-and-set with the pure functions of
``cuvee.lineage.rules``, so two pushers racing on one table cannot lose an entry."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cuvee.cluster._json import Fields, RecordFormatError
from cuvee.cluster.records import Record


class LineageState(str, enum.Enum):
    """IN_PROGRESS: segmentsTo are being pushed (hidden); COMPLETED: segmentsTo replace segmentsFrom (hidden);
    REVERTED: the replacement was abandoned (segmentsTo hidden until deleted, segmentsFrom served)."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    REVERTED = "REVERTED"


@dataclass(frozen=True)
class LineageEntry:
    segments_from: tuple[str, ...]
    segments_to: tuple[str, ...]
    state: LineageState
    timestamp_ms: int
    custom: Mapping[str, str] = field(default_factory=dict)

    def with_state(self, state: LineageState, now_ms: int) -> LineageEntry:
        return dataclasses.replace(self, state=state, timestamp_ms=now_ms)

    def to_json(self) -> dict[str, Any]:
        return {"segmentsFrom": list(self.segments_from), "segmentsTo": list(self.segments_to),
                "state": self.state.value, "timestamp": self.timestamp_ms, "customMap": dict(self.custom)}

    @classmethod
    def from_json(cls, kind: str, doc: Any) -> LineageEntry:
        f = Fields(kind, doc)
        custom = f.object("customMap")
        if not all(isinstance(v, str) for v in custom.values()):
            raise RecordFormatError(f"{kind}: customMap values must be strings")
        return cls(segments_from=f.strings("segmentsFrom"), segments_to=f.strings("segmentsTo"),
                   state=f.enum("state", LineageState), timestamp_ms=f.integer("timestamp"), custom=custom)


@dataclass(frozen=True)
class SegmentLineage(Record):
    """``{entry id: LineageEntry}`` of one table (name with type). Pinot's JSON shape for the entries."""

    KIND = "segment lineage"

    table: str
    entries: Mapping[str, LineageEntry] = field(default_factory=dict)

    def with_entry(self, entry_id: str, entry: LineageEntry) -> SegmentLineage:
        return dataclasses.replace(self, entries={**self.entries, entry_id: entry})

    def without_entry(self, entry_id: str) -> SegmentLineage:
        return dataclasses.replace(self, entries={k: v for k, v in self.entries.items() if k != entry_id})

    def to_json(self) -> dict[str, Any]:
        return {"tableName": self.table,
                "lineageEntries": {k: v.to_json() for k, v in sorted(self.entries.items())}}

    @classmethod
    def from_json(cls, doc: Any) -> SegmentLineage:
        f = Fields(cls.KIND, doc)
        entries = {k: LineageEntry.from_json(f"{cls.KIND} entry {k}", v) for k, v in f.object("lineageEntries").items()}
        return cls(table=f.string("tableName"), entries=entries)
