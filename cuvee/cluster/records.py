"""The records of the cluster state (DESIGN.md section 3), as frozen dataclasses with a strict JSON form.

Each record has ``to_json() -> dict`` / ``from_json(dict)`` (the shape REST answers reuse) and ``encode() -> bytes``
/ ``decode(bytes)`` (what the metadata store holds). Decoding never guesses: a malformed node raises
RecordFormatError naming the record and the field. Records are values: the ``with_*`` helpers return new records,
which is what the compare-and-set update functions of ``cuvee.cluster.store`` need.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from cuvee.cluster._json import Fields, RecordFormatError, decode, encode
from cuvee.segment.partitioning import SegmentPartitions

__all__ = [
    "ControllerJobs",
    "CurrentState",
    "ExternalView",
    "IdealState",
    "InstanceInfo",
    "PendingDeletion",
    "TaskState",
    "RebalanceJob",
    "Record",
    "RecordFormatError",
    "SegmentRecord",
    "SegmentState",
    "SegmentStatus",
    "ServedSchemaVersion",
    "TimeBoundaryOverride",
]

R = TypeVar("R", bound="Record")


class SegmentStatus(str, enum.Enum):
    """Lifecycle of a segment's metadata: consuming, committing (pauseless tables: the end offset is fixed and the
    next segment already consumes from it), committed from a stream, or pushed by a batch job."""

    IN_PROGRESS = "IN_PROGRESS"
    COMMITTING = "COMMITTING"
    DONE = "DONE"
    UPLOADED = "UPLOADED"


class SegmentState(str, enum.Enum):
    """A replica's state. ERROR appears only in current states and external views, never in an ideal state."""

    CONSUMING = "CONSUMING"
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    DROPPED = "DROPPED"
    ERROR = "ERROR"


class Record(abc.ABC):
    """Shared bytes codec; subclasses provide KIND, to_json and from_json."""

    KIND = "record"

    @abc.abstractmethod
    def to_json(self) -> dict[str, Any]: ...

    @classmethod
    @abc.abstractmethod
    def from_json(cls: type[R], doc: Any) -> R: ...

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def decode(cls: type[R], data: bytes | str) -> R:
        return cls.from_json(decode(cls.KIND, data))


# ---- instances ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceInfo(Record):
    """A registered server, broker or controller: where to reach it and which tenants' work it takes."""

    KIND = "instance"

    instance_id: str
    host: str
    ports: Mapping[str, int] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    tls: bool = False  # its HTTP port speaks TLS (https)
    tags_managed: bool = False  # tags set over REST (updateTags): the instance's own config no longer sets them

    def has_tag(self, tag: str) -> bool:
        return tag in self.tags

    def url(self, port_name: str = "http") -> str | None:
        """``http[s]://host:port`` of the named port (else the only port); None if it has none. The one place an
        instance's address is spelled."""
        port = self.ports.get(port_name)
        if port is None and len(self.ports) == 1:
            port = next(iter(self.ports.values()))
        return None if port is None else f"{'https' if self.tls else 'http'}://{self.host}:{port}"

    def to_json(self) -> dict[str, Any]:
        doc = {"id": self.instance_id, "host": self.host, "ports": dict(self.ports), "tags": list(self.tags)}
        if self.tls:
            doc["tls"] = True
        if self.tags_managed:
            doc["tagsManaged"] = True
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> InstanceInfo:
        f = Fields(cls.KIND, doc)
        ports: dict[str, int] = {}
        for name, port in f.object("ports").items():
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise RecordFormatError(f"{cls.KIND}: port {name!r} must be an integer in 1..65535, got {port!r}")
            ports[name] = port
        tls = doc.get("tls", False) if isinstance(doc, dict) else False
        if not isinstance(tls, bool):
            raise RecordFormatError(f"{cls.KIND}: 'tls' must be true or false")
        return cls(instance_id=f.string("id"), host=f.string("host"), ports=ports, tags=f.strings("tags"), tls=tls,
                   tags_managed=f.boolean("tagsManaged", False))


# ---- segment metadata -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentRecord(Record):
    """One segment's metadata (Pinot's "segment ZK metadata"): the contract between controller and servers.

    While IN_PROGRESS it tells every replica where to start consuming and when to stop; once DONE it says where
    the segment ended and where to fetch it. ``download_uri`` is empty when only peers hold the segment.
    """

    KIND = "segment metadata"

    segment_name: str
    status: SegmentStatus
    creation_time_ms: int
    partition: int | None = None
    sequence: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    row_threshold: int | None = None
    time_threshold_ms: int | None = None
    total_docs: int = 0
    size_bytes: int = 0
    crc: int | None = None
    time_min: int | None = None
    time_max: int | None = None
    download_uri: str = ""
    commit_time_ms: int | None = None
    # Auto-tuned tables: the learned bytes per row the row threshold came from (a new leader learns on from the
    # newest; None on fixed-size tables and before anything was learned)
    bytes_per_row: float | None = None
    # A segment of a table with a segmentPartitionConfig: the partitions of its rows, read by the controller
    # from a pushed archive's own metadata, or sent by a realtime committer with segmentCommitEnd (placement,
    # colocated joins, broker pruning and summed distinct counts use it; None: not known)
    partitions: SegmentPartitions | None = None
    # A consuming segment: the version of the table's schema (``cuvee.cluster.schemas``) every replica consumes
    # and builds it under, fixed by the controller when it created the record (None: written before versions)
    schema_version: int | None = None

    @property
    def is_consuming(self) -> bool:
        """Replicas hold it CONSUMING: not committed yet (IN_PROGRESS, or COMMITTING with a fixed end offset)."""
        return self.status in (SegmentStatus.IN_PROGRESS, SegmentStatus.COMMITTING)

    def committing(self, *, end_offset: int, now_ms: int) -> SegmentRecord:
        """This segment's end offset fixed before its commit ends (pauseless: the next segment starts there).
        ``now_ms`` becomes the commit time repair measures a stuck commit from (step 1 overwrites it)."""
        return dataclasses.replace(self, status=SegmentStatus.COMMITTING, end_offset=end_offset,
                                   commit_time_ms=now_ms)

    def committed(
        self,
        *,
        end_offset: int,
        total_docs: int,
        size_bytes: int,
        crc: int,
        download_uri: str,
        now_ms: int,
        time_min: int | None = None,
        time_max: int | None = None,
        partitions: SegmentPartitions | None = None,
    ) -> SegmentRecord:
        """This segment marked DONE (commit step 1). ``now_ms`` becomes the commit time repair compares against;
        ``partitions``: those of the built segment's rows (a realtime segment's partition metadata, as Pinot's
        committed segment ZK metadata carries it)."""
        return dataclasses.replace(
            self,
            status=SegmentStatus.DONE,
            end_offset=end_offset,
            total_docs=total_docs,
            size_bytes=size_bytes,
            crc=crc,
            download_uri=download_uri,
            time_min=time_min,
            time_max=time_max,
            commit_time_ms=now_ms,
            partitions=partitions,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "segmentName": self.segment_name,
            "status": self.status.value,
            "creationTimeMs": self.creation_time_ms,
            "partition": self.partition,
            "sequence": self.sequence,
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "rowThreshold": self.row_threshold,
            "timeThresholdMs": self.time_threshold_ms,
            "totalDocs": self.total_docs,
            "sizeBytes": self.size_bytes,
            "crc": self.crc,
            "timeMin": self.time_min,
            "timeMax": self.time_max,
            "downloadUri": self.download_uri,
            "commitTimeMs": self.commit_time_ms,
            **({"bytesPerRow": self.bytes_per_row} if self.bytes_per_row is not None else {}),
            **({"partitionMetadata": self.partitions.to_json()} if self.partitions is not None else {}),
            **({"schemaVersion": self.schema_version} if self.schema_version is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: Any) -> SegmentRecord:
        f = Fields(cls.KIND, doc)
        return cls(
            segment_name=f.string("segmentName"),
            status=f.enum("status", SegmentStatus),
            creation_time_ms=f.integer("creationTimeMs"),
            partition=f.optional_integer("partition"),
            sequence=f.optional_integer("sequence"),
            start_offset=f.optional_integer("startOffset"),
            end_offset=f.optional_integer("endOffset"),
            row_threshold=f.optional_integer("rowThreshold"),
            time_threshold_ms=f.optional_integer("timeThresholdMs"),
            total_docs=f.optional_integer("totalDocs") or 0,
            size_bytes=f.optional_integer("sizeBytes") or 0,
            crc=f.optional_integer("crc"),
            time_min=f.optional_integer("timeMin"),
            time_max=f.optional_integer("timeMax"),
            download_uri=f.string("downloadUri", ""),
            commit_time_ms=f.optional_integer("commitTimeMs"),
            bytes_per_row=_optional_positive_float(f, "bytesPerRow"),
            partitions=SegmentPartitions.from_json(f.doc.get("partitionMetadata")),
            schema_version=_optional_version(f, "schemaVersion"),
        )


def _optional_version(f: Fields, key: str) -> int | None:
    value = f.optional_integer(key)
    if value is not None and value < 0:
        raise RecordFormatError(f"{f.kind}: field {key!r} must be a non-negative integer, got {value!r}")
    return value


def _optional_positive_float(f: Fields, key: str) -> float | None:
    value = f.doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise RecordFormatError(f"{f.kind}: field {key!r} must be a positive number, got {value!r}")
    return float(value)


# ---- segment → instance → state maps --------------------------------------------------------------------

Assignment = Mapping[str, Mapping[str, SegmentState]]
"""``{segment: {instance: state}}``."""


def _read_assignment(f: Fields, key: str, allow_error: bool) -> dict[str, dict[str, SegmentState]]:
    out: dict[str, dict[str, SegmentState]] = {}
    for segment, replicas in f.object(key).items():
        if not isinstance(replicas, dict):
            raise RecordFormatError(f"{f.kind}: segment {segment!r} must map instances to states, got {replicas!r}")
        states = {inst: f.to_enum(f"{key}.{segment}.{inst}", s, SegmentState) for inst, s in replicas.items()}
        if not allow_error and SegmentState.ERROR in states.values():
            raise RecordFormatError(f"{f.kind}: segment {segment!r} has state ERROR, which only servers report")
        out[segment] = states
    return out


def _write_assignment(segments: Assignment) -> dict[str, dict[str, str]]:
    return {seg: {inst: state.value for inst, state in replicas.items()} for seg, replicas in segments.items()}


@dataclass(frozen=True)
class IdealState(Record):
    """What the controller wants: each segment's replicas and their target states. One node per table.

    ``paused`` records pauseConsumption: while set, the controller creates no new consuming segments. ``crcs``
    holds the CRC of each pushed (offline) segment: a segment pushed again under its name with other content
    changes it, and servers holding another copy reload it. A committed stream segment has one only once an upsert
compaction swapped a copy in under its name (``cuvee.controller.api_compaction``).
    """

    KIND = "ideal state"

    table: str
    segments: Assignment = field(default_factory=dict)
    paused: bool = False
    crcs: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for segment, replicas in self.segments.items():
            if SegmentState.ERROR in replicas.values():
                raise ValueError(f"ideal state of {self.table}: segment {segment} cannot target ERROR")

    def instances_of(self, segment: str) -> tuple[str, ...]:
        """The segment's replicas, sorted; empty if the segment is unknown."""
        return tuple(sorted(self.segments.get(segment, {})))

    def segments_in(self, state: SegmentState) -> list[str]:
        return sorted(seg for seg, replicas in self.segments.items() if state in replicas.values())

    def consuming_counts(self) -> dict[str, int]:
        """Consuming segments per instance (instances holding none are absent)."""
        counts: dict[str, int] = {}
        for replicas in self.segments.values():
            for inst, state in replicas.items():
                if state is SegmentState.CONSUMING:
                    counts[inst] = counts.get(inst, 0) + 1
        return counts

    def with_segment(self, segment: str, replicas: Mapping[str, SegmentState]) -> IdealState:
        """A copy with ``segment`` set to ``replicas`` (added or replaced)."""
        return dataclasses.replace(self, segments={**self.segments, segment: dict(replicas)})

    def with_segments_in(self, segment: str, instances: Iterable[str], state: SegmentState) -> IdealState:
        return self.with_segment(segment, {inst: state for inst in instances})

    def without_segment(self, segment: str) -> IdealState:
        return dataclasses.replace(self, segments={s: r for s, r in self.segments.items() if s != segment},
                                   crcs={s: c for s, c in self.crcs.items() if s != segment})

    def with_crcs(self, crcs: Mapping[str, int]) -> IdealState:
        return dataclasses.replace(self, crcs={**self.crcs, **crcs})

    def to_json(self) -> dict[str, Any]:
        out = {"table": self.table, "paused": self.paused, "segments": _write_assignment(self.segments)}
        if self.crcs:
            out["crcs"] = dict(self.crcs)
        return out

    @classmethod
    def from_json(cls, doc: Any) -> IdealState:
        f = Fields(cls.KIND, doc)
        crcs = f.object("crcs")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in crcs.values()):
            raise RecordFormatError(f"{cls.KIND}: crcs must map segments to integers")
        return cls(
            table=f.string("table"), segments=_read_assignment(f, "segments", False), paused=f.boolean("paused", False),
            crcs=crcs,
        )


@dataclass(frozen=True)
class CurrentState(Record):
    """What one server actually holds for one table, written only by that server."""

    KIND = "current state"

    instance_id: str
    table: str
    segments: Mapping[str, SegmentState] = field(default_factory=dict)

    def with_segment(self, segment: str, state: SegmentState) -> CurrentState:
        return dataclasses.replace(self, segments={**self.segments, segment: state})

    def without_segment(self, segment: str) -> CurrentState:
        return dataclasses.replace(self, segments={s: st for s, st in self.segments.items() if s != segment})

    def to_json(self) -> dict[str, Any]:
        return {
            "instance": self.instance_id,
            "table": self.table,
            "segments": {seg: state.value for seg, state in self.segments.items()},
        }

    @classmethod
    def from_json(cls, doc: Any) -> CurrentState:
        f = Fields(cls.KIND, doc)
        segments = {seg: f.to_enum(f"segments.{seg}", s, SegmentState) for seg, s in f.object("segments").items()}
        return cls(instance_id=f.string("instance"), table=f.string("table"), segments=segments)


@dataclass(frozen=True)
class ExternalView(Record):
    """What live servers actually hold, merged by the controller; brokers route from it."""

    KIND = "external view"

    table: str
    segments: Assignment = field(default_factory=dict)

    def instances_in(self, segment: str, state: SegmentState) -> tuple[str, ...]:
        return tuple(sorted(inst for inst, s in self.segments.get(segment, {}).items() if s is state))

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "segments": _write_assignment(self.segments)}

    @classmethod
    def from_json(cls, doc: Any) -> ExternalView:
        f = Fields(cls.KIND, doc)
        return cls(table=f.string("table"), segments=_read_assignment(f, "segments", True))


@dataclass(frozen=True)
class ServedSchemaVersion(Record):
    """The schema version (``cuvee.cluster.schemas``) a table's segments are served under on every server: written
    by the controller when the table is created and at each reload, read by servers when they load one of the
    table's segments and when a reload reaches them. One node per table (with its type)."""

    KIND = "served schema"

    table: str
    schema_name: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "schemaName": self.schema_name, "version": self.version}

    @classmethod
    def from_json(cls, doc: Any) -> ServedSchemaVersion:
        f = Fields(cls.KIND, doc)
        version = f.integer("version")
        if version < 0:
            raise RecordFormatError(f"{cls.KIND}: 'version' must be a non-negative integer, got {version}")
        return cls(table=f.string("table"), schema_name=f.string("schemaName"), version=version)


# ---- batch data ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeBoundaryOverride(Record):
    """An explicit hybrid time boundary (``POST /tables/{t}/timeBoundary``), in the time column's own unit: it
    wins over the computed one until deleted."""

    KIND = "time boundary"

    table: str  # the raw table name
    value: int

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "timeValue": self.value}

    @classmethod
    def from_json(cls, doc: Any) -> TimeBoundaryOverride:
        f = Fields(cls.KIND, doc)
        return cls(table=f.string("table"), value=f.integer("timeValue"))


@dataclass(frozen=True)
class RebalanceJob(Record):
    """A table's last rebalance (``POST /tables/{t}/rebalance``): its moves and progress, kept in the store so
    ``rebalanceStatus`` answers the same on any controller and after a leader change. ``controller`` is the
    instance running it; a job IN_PROGRESS under a controller that is no longer leader has stopped (its segments
    stay ONLINE on old and new replicas, which is safe; running it again finishes it)."""

    KIND = "rebalance job"

    table: str
    status: str
    moves: tuple[dict[str, Any], ...]
    done: int
    left: tuple[str, ...]
    error: str
    controller: str
    started_ms: int
    updated_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "status": self.status, "moves": list(self.moves), "done": self.done,
                "left": list(self.left), "error": self.error, "controller": self.controller,
                "startedMs": self.started_ms, "updatedMs": self.updated_ms}

    @classmethod
    def from_json(cls, doc: Any) -> RebalanceJob:
        f = Fields(cls.KIND, doc)
        moves = doc.get("moves", [])
        if not isinstance(moves, list) or not all(isinstance(m, dict) for m in moves):
            raise RecordFormatError(f"{cls.KIND}: moves must be a list of objects")
        return cls(table=f.string("table"), status=f.string("status"), moves=tuple(moves), done=f.integer("done"),
                   left=f.strings("left"), error=f.string("error", ""), controller=f.string("controller", ""),
                   started_ms=f.integer("startedMs"), updated_ms=f.integer("updatedMs"))


@dataclass(frozen=True)
class TaskState(Record):
    """One maintenance task of a table (``MergeRollupTask``, …): its watermarks (per merge level, or ``""`` for
    a task with one), the run going on and the last run's outcome. Watermarks only move forward, and only after
    a run's replace has completed: a run that dies leaves them where they were and is simply run again."""

    KIND = "task state"

    table: str  # with its type suffix
    task_type: str
    watermarks: tuple[tuple[str, int], ...] = ()
    running: dict[str, Any] | None = None  # {"runId", "startedMs", "by"}
    last_run: dict[str, Any] | None = None  # {"runId", "status", "startedMs", "endedMs", "message", ...}

    @property
    def watermark_map(self) -> dict[str, int]:
        return dict(self.watermarks)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "taskType": self.task_type, "watermarks": dict(self.watermarks),
                "running": self.running, "lastRun": self.last_run}

    @classmethod
    def from_json(cls, doc: Any) -> TaskState:
        f = Fields(cls.KIND, doc)
        marks = doc.get("watermarks") or {}
        if not isinstance(marks, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                  for v in marks.values()):
            raise RecordFormatError(f"{cls.KIND}: watermarks must map names to integers")
        running, last = doc.get("running"), doc.get("lastRun")
        if not isinstance(running, (dict, type(None))) or not isinstance(last, (dict, type(None))):
            raise RecordFormatError(f"{cls.KIND}: running and lastRun must be objects")
        return cls(table=f.string("table"), task_type=f.string("taskType"),
                   watermarks=tuple(sorted((str(k), int(v)) for k, v in marks.items())), running=running,
                   last_run=last)


@dataclass(frozen=True)
class PendingDeletion(Record):
    """A deleted segment's deep-store object, kept until ``delete_after_ms`` (a grace period in which a
    mistaken delete can still be recovered by hand, and readers that planned before the delete finish)."""

    KIND = "pending deletion"

    table: str
    segment: str
    download_uri: str
    delete_after_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "segment": self.segment, "downloadUri": self.download_uri,
                "deleteAfterMs": self.delete_after_ms}

    @classmethod
    def from_json(cls, doc: Any) -> PendingDeletion:
        f = Fields(cls.KIND, doc)
        return cls(table=f.string("table"), segment=f.string("segment"), download_uri=f.string("downloadUri", ""),
                   delete_after_ms=f.integer("deleteAfterMs"))


@dataclass(frozen=True)
class SegmentStory(Record):
    """What every role did to one segment, oldest first (``cuvee.story``): each event a JSON object with
    ``timeMs``, ``role``, ``instance``, ``kind`` and details. Bounded: the oldest events go first."""

    KIND = "segment story"

    table: str
    segment: str
    events: tuple[dict[str, Any], ...] = ()

    def appended(self, event: dict[str, Any], limit: int) -> SegmentStory:
        return SegmentStory(self.table, self.segment, (*self.events, event)[-limit:])

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "segment": self.segment, "events": list(self.events)}

    @classmethod
    def from_json(cls, doc: Any) -> SegmentStory:
        f = Fields(cls.KIND, doc)
        events = doc.get("events", []) if isinstance(doc, dict) else []
        if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
            raise RecordFormatError(f"{cls.KIND}: 'events' must be a list of objects")
        return cls(table=f.string("table"), segment=f.string("segment"), events=tuple(events))


@dataclass(frozen=True)
class ControllerJobs(Record):
    """A table's recent controller jobs (Pinot's ``CONTROLLER_JOBS``: reloads and force commits), newest last,
    each a JSON object with Pinot's keys (``jobId``, ``jobType``, ``tableName``, ``submissionTimeMs``, ...).
    Bounded: the oldest go first."""

    KIND = "controller jobs"

    table: str
    jobs: tuple[dict[str, Any], ...] = ()

    def added(self, job: dict[str, Any], limit: int) -> ControllerJobs:
        return ControllerJobs(self.table, (*self.jobs, job)[-limit:])

    def job(self, job_id: str) -> dict[str, Any] | None:
        return next((j for j in self.jobs if j.get("jobId") == job_id), None)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "jobs": list(self.jobs)}

    @classmethod
    def from_json(cls, doc: Any) -> ControllerJobs:
        f = Fields(cls.KIND, doc)
        jobs = doc.get("jobs", []) if isinstance(doc, dict) else []
        if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
            raise RecordFormatError(f"{cls.KIND}: 'jobs' must be a list of objects")
        return cls(table=f.string("table"), jobs=tuple(jobs))
