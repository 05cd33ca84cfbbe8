"""``POST /segments/{table}/{segment}/compacted``: an upsert compaction's swap of one committed REALTIME segment.

Pinot's design: the compacted copy keeps the segment's **name** (its LLC partition, sequence and offsets stay on
record, so the completion protocol, the repair task and the broker's partition routing see the segment they knew)
and gets a new CRC. The controller checks the copy the job compacted is still the one on record
(``expectedCrc``: a compare-and-set), writes the record (CRC, docs, size, download URI; offsets and time range as
they were) and then names the new CRC in the ideal state (having named the CRC on record there first, the first
time a segment is compacted: if the controller dies between the two writes, the repair task finds the ideal
state naming a CRC the record no longer has and names the record's, ``cuvee.controller.repair``); each replica
reloads the segment (ONLINE → ONLINE), swapping the copy in its registry and upsert key map in one step
(``cuvee.upsert.table.TableUpsert.serve``). A
replica answers exactly as before on either copy, because the job compacted only what every replica agreed it
may drop; so queries never see a key twice or miss one while replicas reload one after the other.

A segment with no doc left to keep gets a copy with no doc the same way: it is not deleted, because deleting
takes it OFFLINE on every replica before it leaves the external view, which a broker reports as unavailable
(error 305) for that moment; retention removes it later with its neighbours.

The controller does not take the job's word for the copy: before the swap it reads the archive's
``metadata.json`` from the deep store (streamed from the head of the tar, not fetched whole) and refuses (400)
a copy whose name, table, CRC or doc count differ from the claim, that holds more docs than the segment, or
whose offsets are not the segment's. A wrong claim would otherwise have every replica reload it and fail its
own name/CRC check: ERROR on all of them.

Sending the same compacted copy again (a job that lost the answer) is answered as done.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Body
from starlette.concurrency import run_in_threadpool

from cuvee.cluster.records import IdealState, SegmentRecord, SegmentState
from cuvee.config import TableType, raw_table_name
from cuvee.controller import faults
from cuvee.controller.api_common import require_body
from cuvee.controller.catalog import Catalog
from cuvee.controller.errors import ApiError, BadGateway, BadRequest, Conflict, NotFound
from cuvee.controller.segment_deletion import schedule_archive_deletion
from cuvee.controller.segment_push import PushedSegment
from cuvee.controller.table_locks import TABLE_LOCKS
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.archive import read_archive_metadata
from cuvee.segment.errors import CorruptSegmentError
from cuvee.segment.metadata import SegmentMetadata
from cuvee.spi.deepstore import DeepStoreError, ObjectNotFoundError

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller

COMPACTED_PATH = "/segments/{table}/{segment}/compacted"
log = logging.getLogger(__name__)


def router(ctl: Controller) -> APIRouter:
    api = APIRouter()

    @api.post(COMPACTED_PATH)
    async def compacted(table: str, segment: str, body: Any = Body(None)) -> dict[str, Any]:
        ctl.require_leader()
        doc = require_body(body)
        expected = doc.get("expectedCrc")
        if not isinstance(expected, int) or isinstance(expected, bool):
            raise BadRequest("expectedCrc (the CRC of the copy compacted) must be an integer")
        full = raw_table_name(table) + TableType.REALTIME.suffix
        config = Catalog(ctl.store).find_table(full) if full in Catalog(ctl.store).resolve(table) else None
        if config is None or not config.is_upsert:
            raise NotFound(f"table {table!r} has no REALTIME upsert half")
        try:
            LLCSegmentName.parse(segment)
        except InvalidSegmentNameError:
            raise BadRequest(f"{segment[:256]!r} is not a realtime (LLC) segment name") from None
        return await run_in_threadpool(_replace, ctl, full, _pushed(doc.get("segment"), segment), expected)

    return api


def _pushed(doc: Any, name: str) -> PushedSegment:
    """The compacted copy's metadata (``PushedSegment.from_json`` refuses LLC names: pushes must not make them)."""
    if not isinstance(doc, dict):
        raise BadRequest("segment must be a JSON object (segmentName, downloadUri, crc, totalDocs, sizeBytes)")
    if doc.get("segmentName") != name:
        raise BadRequest(f"a compacted copy keeps its name: got {str(doc.get('segmentName'))[:256]!r} for {name!r}")
    uri = doc.get("downloadUri")
    if not isinstance(uri, str) or not uri or len(uri) > 4096:
        raise BadRequest("segment.downloadUri must be a deep store URI")
    numbers = {}
    for key in ("crc", "totalDocs", "sizeBytes"):
        value = doc.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequest(f"segment.{key} must be a non-negative integer")
        numbers[key] = value
    return PushedSegment(name=name, download_uri=uri, crc=numbers["crc"], total_docs=numbers["totalDocs"],
                         size_bytes=numbers["sizeBytes"], time_min=None, time_max=None)


def _replace(ctl: Controller, full: str, pushed: PushedSegment, expected: int) -> dict[str, Any]:
    if ctl.deep_store is None:
        raise BadRequest("this controller has no deep store configured")
    try:
        key = ctl.deep_store.key_of(pushed.download_uri)
        present = ctl.deep_store.exists(key)
    except DeepStoreError:
        raise BadRequest(f"download URI {pushed.download_uri[:512]!r} is not in this controller's deep store") from None
    if not key.startswith(full + "/") or not present:
        raise BadRequest(f"nothing of {full} at {pushed.download_uri[:512]!r}; upload the archive first")
    name = pushed.name
    try:  # before the lock (it reads the deep store); a refusal waits for the state checks, so a segment that
        # changed since it was compacted is still a 409 (the job skips it) and a copy sent again is still done
        stored: SegmentMetadata | ApiError = _archive_metadata(ctl, key, pushed.download_uri)
    except ApiError as exc:
        stored = exc
    with TABLE_LOCKS.hold(full):
        record = _committed_record(ctl, full, name)
        _all_online(ctl, full, name)
        if record.crc == pushed.crc and record.download_uri == pushed.download_uri:
            _name_crc(ctl, full, name, pushed.crc)  # sent again: finish what may not have been finished
            return {"status": f"{full}/{name} is compacted already", "crc": pushed.crc}
        if record.crc != expected:
            raise Conflict(f"{full}/{name} has CRC {record.crc}, not {expected}: it changed since it was compacted")
        if isinstance(stored, ApiError):
            raise stored
        _check_copy(full, record, pushed, stored)

        def rewrite(current: SegmentRecord) -> SegmentRecord:
            if current.crc != expected:
                raise Conflict(f"{full}/{name} changed while it was being swapped")
            return dataclasses.replace(current, crc=pushed.crc, total_docs=pushed.total_docs,
                                       size_bytes=pushed.size_bytes, download_uri=pushed.download_uri)

        if record.download_uri and record.download_uri != pushed.download_uri:
            # before the record moves on, so a crash in between leaks nothing; after the grace period, so a replica
            # still loading the old copy (or a Spark read planned on it) finishes
            schedule_archive_deletion(ctl.store, full, name, record.download_uri,
                                      ctl.clock_ms() + round(ctl.config.deletion_grace_seconds * 1000))
        ideal = ctl.store.ideal_state(full)
        if ideal is None or name not in ideal.record.crcs:  # every replica holds it already: no reload
            _name_crc(ctl, full, name, expected)
        ctl.store.update(SegmentRecord, ctl.store.paths.segment(full, name), rewrite)
        faults.fault(faults.COMPACTION_AFTER_RECORD)
        _name_crc(ctl, full, name, pushed.crc)  # the replicas reload it
    return {"status": f"{full}/{name} compacted: {record.total_docs} → {pushed.total_docs} docs", "crc": pushed.crc}


def _archive_metadata(ctl: Controller, key: str, uri: str) -> SegmentMetadata:
    """The compacted archive's own metadata, streamed from the head of its tar in the deep store."""
    assert ctl.deep_store is not None
    try:
        with ctl.deep_store.reader(key) as stream:
            return read_archive_metadata(stream, uri)
    except ObjectNotFoundError:
        raise BadRequest(f"nothing at {uri[:512]!r}; upload the archive first") from None
    except CorruptSegmentError as exc:
        log.warning("compacted archive %s refused: %s", uri, exc)
        raise BadRequest(f"{uri[:512]!r} is not a readable segment archive") from None
    except DeepStoreError as exc:
        log.warning("compacted archive %s could not be read: %s", uri, exc)
        raise BadGateway("the deep store could not be read; retry later") from None


def _check_copy(full: str, record: SegmentRecord, pushed: PushedSegment, stored: SegmentMetadata) -> None:
    """The archive is the copy claimed, of this segment: its name, table, CRC and docs as claimed, no more docs
    than the segment holds, and the segment's offsets (its LLC partition is in the name)."""
    name = pushed.name
    problems = []
    if stored.segment_name != name:
        problems.append(f"it holds segment {stored.segment_name[:256]!r}")
    if stored.table_name != full:
        problems.append(f"it belongs to table {str(stored.table_name)[:256]!r}")
    if stored.crc != pushed.crc:
        problems.append(f"its CRC is {stored.crc}, not {pushed.crc}")
    if stored.total_docs != pushed.total_docs:
        problems.append(f"it holds {stored.total_docs} docs, not {pushed.total_docs}")
    elif stored.total_docs > record.total_docs:
        problems.append(f"it holds {stored.total_docs} docs, more than the segment's {record.total_docs}")
    if (stored.start_offset, stored.end_offset) != (record.start_offset, record.end_offset):
        problems.append(f"its offsets {stored.start_offset}..{stored.end_offset} are not the segment's "
                        f"{record.start_offset}..{record.end_offset}")
    if problems:
        raise BadRequest(f"the archive at {pushed.download_uri[:512]!r} is not a compacted copy of {full}/{name}: "
                         + "; ".join(problems))


def _committed_record(ctl: Controller, full: str, name: str) -> SegmentRecord:
    found = ctl.store.find_segment(full, name)
    if found is None:
        raise NotFound(f"segment {name!r} of {full} does not exist")
    if found.record.is_consuming:
        raise Conflict(f"{full}/{name} is consuming; only committed segments are compacted")
    return found.record


def _all_online(ctl: Controller, full: str, name: str) -> None:
    ideal = ctl.store.ideal_state(full)
    states = ideal.record.segments.get(name) if ideal is not None else None
    if not states:
        raise NotFound(f"segment {name!r} is not in the ideal state of {full}")
    if any(state is not SegmentState.ONLINE for state in states.values()):
        raise Conflict(f"{full}/{name} is not ONLINE on every replica ({', '.join(s.value for s in states.values())})")


def _name_crc(ctl: Controller, full: str, name: str, crc: int) -> None:
    def named(ideal: IdealState) -> IdealState:
        if name not in ideal.segments:
            raise Conflict(f"{full}/{name} left the ideal state meanwhile")
        return ideal.with_crcs({name: crc})

    ctl.store.update_ideal_state(full, named)
