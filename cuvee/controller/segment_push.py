"""Segments pushed into OFFLINE tables: by metadata (the bytes are already in the deep store) or as one archive.

A metadata push sends, per segment, its name, CRC, row count, size, time range and download URI. The controller
never reads the bytes: it checks that the URI lies in its deep store and that the object exists, writes the
segment records (status UPLOADED), then places the new segments on ``replication`` servers tagged
``<tenant>_OFFLINE`` in one ideal-state compare-and-set (records first: a server told to load a segment must
find where to fetch it). A name that exists is replaced: its record is overwritten and it keeps its servers; the
ideal state carries each pushed segment's CRC so servers holding another copy reload it.

A tar push (``POST /segments`` multipart, small manual uploads) is unpacked and verified here, stored in the deep
store, and then registered exactly like a metadata push.

A table with a ``segmentPartitionConfig`` is the one exception to "never reads the bytes": the partitions of each
pushed segment's rows are read from the archive's own ``metadata.json`` (streamed from the head of the tar; what
the builder computed from the rows, not what the push body says), recorded in the segment's record, and a segment
of one partition under the table's configured function is placed on the servers of that partition (``assign_partition``, as consuming segments are), so
tables partitioned alike are colocated and the broker can join them on their servers. A segment whose metadata
cannot be read, names another segment, or spans several partitions is placed as any other (never refused: it is
only not colocated).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuvee.cluster.errors import AssignmentError
from cuvee.cluster.offline_assignment import offline_server_tag, place_offline_segments, replicas
from cuvee.cluster.assignment import eligible_instances, server_tag
from cuvee.cluster.paths import check_name
from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.cluster.store import ClusterStore
from cuvee.config import TableConfig
from cuvee.controller.errors import BadRequest, Conflict
from cuvee.controller.segment_deletion import cancel_archive_deletions, schedule_archive_deletion
from cuvee.controller.table_locks import TABLE_LOCKS
from cuvee.errors import UserError
from cuvee.lineage.model import LineageState
from cuvee.lineage.rules import hidden_segments
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.segment.archive import archive_suffix, read_archive_metadata, unpack
from cuvee.segment.errors import SegmentError
from cuvee.segment.immutable import ImmutableSegment
from cuvee.segment.naming import check_segment_name
from cuvee.segment.partitioning import PARTITIONS_KEY, SegmentPartitions, configured_partition
from cuvee.spi.deepstore import DeepStore, DeepStoreError

log = logging.getLogger(__name__)

MAX_SEGMENT_NAME = 255
MAX_SEGMENTS_PER_PUSH = 10_000
_METADATA_READERS = 8  # archives whose metadata a push of a partitioned table reads at once


@dataclass(frozen=True)
class PushedSegment:
    """What a pusher tells the controller about one segment it put in the deep store."""

    name: str
    download_uri: str
    crc: int
    total_docs: int
    size_bytes: int
    time_min: int | None
    time_max: int | None
    partitions: SegmentPartitions | None = None  # read from the archive, never taken from the pusher

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PushedSegment:
        if not isinstance(doc, dict):
            raise BadRequest(f"{where} must be a JSON object")
        name = doc.get("segmentName")
        check_offline_segment_name(name, where)
        uri = doc.get("downloadUri")
        if not isinstance(uri, str) or not uri or len(uri) > 4096:
            raise BadRequest(f"{where}.downloadUri must be a deep store URI")
        return cls(name=name, download_uri=uri, crc=_integer(doc, "crc", where),
                   total_docs=_integer(doc, "totalDocs", where), size_bytes=_integer(doc, "sizeBytes", where),
                   time_min=_integer(doc, "timeMin", where, optional=True),
                   time_max=_integer(doc, "timeMax", where, optional=True))


def check_offline_segment_name(name: Any, where: str = "segmentName") -> str:
    """A pushed segment's name: a plain file and path segment name, bounded, and not an LLC (stream) name, which
    routing would group as a stream partition."""
    if not isinstance(name, str) or not name or len(name) > MAX_SEGMENT_NAME:
        raise BadRequest(f"{where}: a segment name must be a string of 1..{MAX_SEGMENT_NAME} characters")
    try:
        check_name("segment", name)
        check_segment_name(name)
    except UserError as exc:
        raise BadRequest(f"{where}: {exc}") from None
    try:
        LLCSegmentName.parse(name)
    except InvalidSegmentNameError:
        return name
    raise BadRequest(f"{where}: {name!r} has the shape of a stream segment name (table__partition__sequence__time)")


def _integer(doc: dict[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = doc.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (key != "timeMin" and key != "timeMax" and value < 0):
        raise BadRequest(f"{where}.{key} must be {'an integer or null' if optional else 'a non-negative integer'}")
    return value


def parse_push(body: Any) -> list[PushedSegment]:
    if not isinstance(body, dict) or not isinstance(body.get("segments"), list):
        raise BadRequest('a metadata push body is {"segments": [{"segmentName": ..., "downloadUri": ..., ...}]}')
    items = body["segments"]
    if not items or len(items) > MAX_SEGMENTS_PER_PUSH:
        raise BadRequest(f"a push carries 1..{MAX_SEGMENTS_PER_PUSH} segments, got {len(items)}")
    pushed = [PushedSegment.from_json(item, f"segments[{i}]") for i, item in enumerate(items)]
    names = [p.name for p in pushed]
    if len(set(names)) != len(names):
        raise BadRequest("a push lists the same segment twice")
    return pushed


def register_segments(store: ClusterStore, deep_store: DeepStore | None, table: TableConfig,
                      pushed: Sequence[PushedSegment], now_ms: int, deletion_grace_ms: int) -> list[str]:
    """Check, then write records and the ideal state. Every user error is raised before anything is written. An
    archive a push replaces (same name, other download URI) is deleted after ``deletion_grace_ms``. The checks
    that read the deep store run before the table's lock (``TABLE_LOCKS``); the writes run under it."""
    name = table.name_with_type
    if deep_store is None:
        raise BadRequest("this controller has no deep store configured; segments cannot be pushed")
    for segment in pushed:
        try:
            key = deep_store.key_of(segment.download_uri)
            present = deep_store.exists(key)
        except DeepStoreError as exc:
            log.warning("push of %s: download URI %r is not usable: %s", segment.name, segment.download_uri, exc)
            raise BadRequest(f"segment {segment.name}: download URI {segment.download_uri[:512]!r} is not in this "
                             "controller's deep store") from None
        if not key.startswith(name + "/"):  # deleting this segment later deletes the object: only the table's own
            raise BadRequest(f"segment {segment.name}: the archive must lie under {name}/ in the deep store, "
                             f"not at {segment.download_uri}")
        if segment.time_min is not None and segment.time_max is not None and segment.time_min > segment.time_max:
            raise BadRequest(f"segment {segment.name}: timeMin {segment.time_min} is after timeMax {segment.time_max}")
        if not present:
            raise BadRequest(f"segment {segment.name}: nothing at {segment.download_uri}; upload it first")
    if table.indexing.extra.get("segmentPartitionConfig"):  # a few reads at once: a batch job pushes thousands
        with ThreadPoolExecutor(max_workers=_METADATA_READERS, thread_name_prefix="push-metadata") as pool:
            found = list(pool.map(lambda s: s.partitions or _archive_partitions(deep_store, s), pushed))
        pushed = [dataclasses.replace(s, partitions=parts) for s, parts in zip(pushed, found)]
    with TABLE_LOCKS.hold(name):
        return _register(store, table, pushed, now_ms, deletion_grace_ms)


def _archive_partitions(deep_store: DeepStore, segment: PushedSegment) -> SegmentPartitions | None:
    """The partitions of a pushed segment's rows, from its archive's metadata; None when that cannot be read or
    is not this segment's (the segment is then placed as an unpartitioned one)."""
    try:
        with deep_store.reader(deep_store.key_of(segment.download_uri)) as stream:
            metadata = read_archive_metadata(stream, segment.download_uri)
    except (DeepStoreError, SegmentError, OSError) as exc:
        log.warning("push of %s: partition metadata not read from %s: %s", segment.name, segment.download_uri, exc)
        return None
    if metadata.segment_name != segment.name or metadata.crc != segment.crc:
        log.warning("push of %s: the archive at %s holds %s (CRC %s), not the segment pushed; its partitions are "
                    "not used", segment.name, segment.download_uri, metadata.segment_name, metadata.crc)
        return None
    return SegmentPartitions.from_json(metadata.custom.get(PARTITIONS_KEY))


def _register(store: ClusterStore, table: TableConfig, pushed: Sequence[PushedSegment], now_ms: int,
              deletion_grace_ms: int) -> list[str]:
    name = table.name_with_type
    _check_lineage(store, name, pushed)
    tag = _serving_tag(table)
    instances = eligible_instances(store.instances(), set(store.live_instance_ids()), tag)
    found = store.ideal_state(name)
    current = found.record if found is not None else None
    replication = replicas(table.replication, table.is_dim_table, instances)  # a dim table: every server
    found = {s.name: configured_partition(table.indexing.extra, s.partitions) for s in pushed}
    partition_of = {name: p for name, p in found.items() if p is not None and not table.is_dim_table}
    try:  # a dry run, so too few servers is a 400 before anything is written
        if current is not None:
            place_offline_segments(current, [s.name for s in pushed], replication, instances, partition_of)
        elif len(set(instances)) < replication:
            raise AssignmentError(f"{replication} replica(s) wanted but only {len(instances)} eligible server(s)")
    except AssignmentError as exc:
        raise BadRequest(f"table {name}: {exc} (servers must carry tag {tag!r})") from None
    # the archives pushed are served from now on: deletions pending for them (replaced, or their segment deleted,
    # and now pushed again) are called off
    cancel_archive_deletions(store, name, [(s.name, s.download_uri) for s in pushed])
    for segment in pushed:
        old = store.find_segment(name, segment.name)
        created = old.record.creation_time_ms if old is not None else now_ms
        record = SegmentRecord(segment_name=segment.name, status=SegmentStatus.UPLOADED, creation_time_ms=created,
                               total_docs=segment.total_docs, size_bytes=segment.size_bytes, crc=segment.crc,
                               time_min=segment.time_min, time_max=segment.time_max,
                               download_uri=segment.download_uri, commit_time_ms=now_ms,
                               partitions=segment.partitions)
        if old is not None and old.record.download_uri and old.record.download_uri != segment.download_uri:
            # scheduled before the record moves on, so a crash in between leaks nothing (the purge skips an archive
            # the record still points at); deleted after the grace period, so a server still loading the old copy
            # or a Spark read planned on it finishes
            schedule_archive_deletion(store, name, segment.name, old.record.download_uri,
                                      now_ms + deletion_grace_ms)
            log.info("%s/%s replaced; its previous archive %s is deleted after the grace period", name,
                     segment.name, old.record.download_uri)
        store.put(store.paths.segment(name, segment.name), record)
    crcs = {s.name: s.crc for s in pushed}
    try:
        store.update_ideal_state(name, lambda ideal: place_offline_segments(
            ideal, [s.name for s in pushed], replication, instances, partition_of).with_crcs(crcs))
    except AssignmentError as exc:
        raise BadRequest(f"table {name}: {exc}") from None
    log.info("pushed %d segment(s) into %s", len(pushed), name)
    return [s.name for s in pushed]


def _serving_tag(table: TableConfig) -> str:
    """Pushed segments go to the servers of the table's half: a REALTIME table receives pushes only as the
    outputs of a maintenance job's replace (merged committed segments), served by its realtime servers."""
    return server_tag(table.tenants.server) if table.is_realtime else offline_server_tag(table.tenants.server)


def _check_lineage(store: ClusterStore, table: str, pushed: Sequence[PushedSegment]) -> None:
    """A name lineage hides for good (replaced by a completed entry, abandoned by a reverted one) would be served by
    no query and deleted by retention: refuse it. The segmentsTo of an entry in progress are what its pusher pushes."""
    lineage = store.lineage(table)
    if lineage is None:
        return
    pushing = {s for e in lineage.entries.values() if e.state is LineageState.IN_PROGRESS for s in e.segments_to}
    blocked = sorted({p.name for p in pushed} & (hidden_segments(lineage) - pushing))
    if blocked:
        raise Conflict(f"segment(s) {', '.join(blocked[:5])} of {table} are replaced or abandoned by a lineage entry; "
                       "push new data under new names, or through startReplaceSegments")


UNPACK_RATIO = 16  # an uploaded archive may unpack to at most this many times its size (segments compress ~2-8x)


def store_uploaded_archive(deep_store: DeepStore | None, table: TableConfig, archive: Path) -> PushedSegment:
    """A tar push: verify the archive, put it in the deep store, and describe it for ``register_segments``."""
    if deep_store is None:
        raise BadRequest("this controller has no deep store configured; segments cannot be pushed")
    with tempfile.TemporaryDirectory(prefix="cuvee-push-") as tmp:
        try:
            cap = max(archive.stat().st_size * UNPACK_RATIO, 1 << 20)
            segment = ImmutableSegment.load(unpack(archive, tmp, max_bytes=cap))
        except (SegmentError, OSError) as exc:  # without the controller's temporary paths
            reason = str(exc).replace(str(archive), "the archive").replace(tmp, "<tmp>")
            raise BadRequest(f"the upload is not a valid segment archive: {reason}") from None
        meta = segment.metadata
        check_offline_segment_name(segment.name)
        time_min = meta.start_time if isinstance(meta.start_time, int) else None
        time_max = meta.end_time if isinstance(meta.end_time, int) else None
        described = (segment.name, segment.crc, segment.total_docs, segment.size_bytes)
        partitions = SegmentPartitions.from_json(meta.custom.get(PARTITIONS_KEY))
    # stored as sent, under a key of its own: a push never overwrites an archive a segment may still point at
    key = f"{table.name_with_type}/{described[0]}.{uuid.uuid4().hex[:12]}{archive_suffix(archive)}"
    try:
        uri = deep_store.put(archive, key)
    except DeepStoreError as exc:
        log.error("storing a pushed segment under %s failed: %s", key, exc)
        raise BadRequest("cannot store the segment in the deep store (the controller log has the details)") from None
    return PushedSegment(name=described[0], download_uri=uri, crc=described[1], total_docs=described[2],
                         size_bytes=described[3], time_min=time_min, time_max=time_max, partitions=partitions)
