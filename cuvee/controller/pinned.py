"""The schema versions a table's unfinished consuming segments are pinned to, and keeping those pins right.

A consuming segment's record names the schema version every replica consumes and builds it under
(``SegmentRecord.schema_version``, ``cuvee.cluster.schemas``); its table config is the table's latest, read when a
replica starts the segment. Two rules keep that pair buildable and current:

- ``check_config_fits_pinned``: a table-config update must also fit the schema version of every segment still
  consuming or being built (IN_PROGRESS, COMMITTING). A config naming a column added to the schema since (an index,
  ``sortedColumn``, ``timeColumnName``, a transform's destination...) is refused (400, naming the segments and
  versions): a replica (re)starting such a segment would otherwise combine the new config with a schema lacking the
  column and fail, stopping the partition. A reload first force-commits those segments; their successors are pinned
  to the current schema, and the update is then accepted. Refusing keeps every replica deterministic (nothing is
  derived per replica) and never leaves a segment that cannot be built.
- ``repin_unplaced``: a record made earlier (commit step 2, a leftover of a controller that died before placing it)
  is brought to the table's current schema version, and to the start offset its placer computed, by
  compare-and-set just before it is placed in the ideal state, when no server consumes it yet. Without it a reload
  between the record's creation and its placement (it force-commits only what is consuming) leaves the successor
  ingesting under the old schema, dropping the new columns' values until the next commit.
"""

from __future__ import annotations

import dataclasses
import logging

from cuvee.cluster.errors import RequirementFailedError
from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.cluster.schemas import SchemaVersions, schema_name_of
from cuvee.cluster.store import ClusterStore
from cuvee.config import ConfigValidationError, TableConfig
from cuvee.config.validation import table_schema_issues
from cuvee.controller.errors import BadRequest
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

log = logging.getLogger(__name__)

_UNFINISHED = (SegmentStatus.IN_PROGRESS, SegmentStatus.COMMITTING)


def unfinished_pins(store: ClusterStore, table: str) -> dict[int, list[str]]:
    """Schema version -> the table's segments pinned to it that are still consumed or built. Walks each partition's
    records from the newest down past its first two finished ones (a commit's successor and its predecessors still
    building: three with a pauseless build and a force commit), not every segment's. A record in no ideal state
    yet is left out: it is re-pinned when placed (``repin_unplaced``), so it is never built under its old pin (a
    pause between commit steps 2 and 3 leaves one, which no reload could commit)."""
    latest: dict[int, list[LLCSegmentName]] = {}
    for name in store.segment_names(table):
        try:
            llc = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
        latest.setdefault(llc.partition, []).append(llc)
    ideal = store.ideal_state(table)
    placed = set(ideal.record.segments) if ideal is not None else set()
    pins: dict[int, list[str]] = {}
    for names in latest.values():
        finished = 0
        for llc in sorted(names, key=lambda n: n.sequence, reverse=True):
            found = store.find_segment(table, llc.name)
            if found is None:
                continue
            if found.record.status not in _UNFINISHED:
                finished += 1
                if finished == 2:  # older ones are finished too (one finished out of order is looked past)
                    break
                continue
            if found.record.schema_version is None or llc.name not in placed:
                continue
            pins.setdefault(found.record.schema_version, []).append(llc.name)
    return pins


def check_config_fits_pinned(store: ClusterStore, table: TableConfig) -> None:
    """Refuse (400) ``table``'s new config if it does not fit the schema version an unfinished consuming segment of
    the table is pinned to (see the module); the current schema is checked by the caller."""
    if table.stream is None:
        return
    name = schema_name_of(table)
    versions = SchemaVersions(store)
    for version, segments in sorted(unfinished_pins(store, table.name_with_type).items()):
        issues = table_schema_issues(table, versions.schema_at(name, version))
        if not issues:
            continue
        shown = ", ".join(sorted(segments)[:5]) + (" ..." if len(segments) > 5 else "")
        error = ConfigValidationError(
            f"table config {table.name_with_type!r} for schema {name!r} version {version}, which consuming "
            f"segment(s) {shown} are built under; reload the table first (POST /segments/{table.name_with_type}"
            "/reload: it commits them and their successors use the current schema), then update the config once "
            "they have committed", issues)
        raise BadRequest.invalid(error)


def repin_unplaced(store: ClusterStore, table: TableConfig, segment: str,
                   start_offset: int | None = None) -> SegmentRecord | None:
    """Segment ``segment``'s record pinned to the table's schema version now and, when given, starting at
    ``start_offset``, by compare-and-set, if it is IN_PROGRESS and in no ideal state yet (no server consumes it: see
    the module). Returns the record as it is now (None: there is none)."""
    name = table.name_with_type
    found = store.find_segment(name, segment)
    if found is None:
        return None
    current = found.record
    ideal = store.ideal_state(name)
    if current.status is not SegmentStatus.IN_PROGRESS or (ideal is not None and segment in ideal.record.segments):
        return current  # placed, or moved on: servers may consume it under what it names
    version = SchemaVersions(store).pin(schema_name_of(table))
    start = current.start_offset if start_offset is None else start_offset
    if current.schema_version == version and current.start_offset == start:
        return current

    def update(record: SegmentRecord) -> SegmentRecord:
        if record.status is not SegmentStatus.IN_PROGRESS:
            raise RequirementFailedError(f"segment {record.segment_name} is {record.status.value}")
        return dataclasses.replace(record, schema_version=version, start_offset=start)

    try:
        updated = store.update_segment(name, segment, update)
    except RequirementFailedError:
        return store.segment(name, segment).record  # moved on meanwhile: left as its writer made it
    log.info("%s: %s was created before it was placed (schema version %s, start offset %s); it is placed under "
             "schema version %d from offset %s", name, segment, current.schema_version, current.start_offset,
             version, start)
    return updated.record
