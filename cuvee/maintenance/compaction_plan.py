"""What an UpsertCompactionTask run rewrites (Pinot's UpsertCompactionTaskGenerator rules, our own replica check).
Pure: segments, the replicas' answers and the clock in, one decision per segment out.

Two steps, so the servers are asked only about segments that may qualify:

1. ``candidates``: committed segments of the REALTIME upsert table (never a consuming one) whose end time is
   older than ``now - bufferTimePeriod`` (a segment with no end time never is).
2. ``decide``: each candidate's **kept docs** as every replica holding it ONLINE reports them (the valid docs, the
   tombstones that hide a deleted key, and the docs of keys whose newest version is still in a consuming segment:
   ``cuvee.upsert.table.TableUpsert.kept_docs``). The segment is considered only when every replica answered for
   the CRC the controller has and all of them keep the same docs: rewriting it then leaves each replica's answer
   as it was. Otherwise it is skipped this run, with the reason. Invalid docs are ``totalDocs - kept``; a segment
   is rewritten when it has one and reaches both ``invalidRecordsThresholdPercent`` and
   ``invalidRecordsThresholdCount``. A segment with no doc kept is **emptied**: replaced by a copy with no doc
   under its name (its offsets stay on record; retention removes it with its neighbours). Deleting it instead
   would take it through OFFLINE on every replica, which brokers report as unavailable (error 305) for a moment.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cuvee.cluster.records import SegmentRecord
from cuvee.maintenance.config import UpsertCompactionConfig
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName


@dataclass(frozen=True)
class CompactionCandidate:
    """A committed segment of the table: its LLC partition and sequence, end time (epoch ms), docs and CRC."""

    name: str
    partition: int
    sequence: int
    end_ms: int | None
    total_docs: int
    crc: int
    replicas: tuple[str, ...]  # instances the ideal state has it ONLINE on


@dataclass(frozen=True)
class ReplicaAnswer:
    """One replica's kept docs of a segment (sorted doc ids), for the CRC of the copy it serves; ``error``: why it
    gave none (a short reason of ours, never a server's text: it ends in the run's message)."""

    instance: str
    crc: int | None = None
    total_docs: int = 0
    kept: tuple[int, ...] = ()
    error: str = ""


class Action(str, enum.Enum):
    COMPACT = "COMPACT"  # rewrite with the kept docs only
    EMPTY = "EMPTY"  # no doc kept: replaced by a copy with no doc
    SKIP = "SKIP"  # left as it is this run (replicas disagree, too few invalid docs…)


@dataclass(frozen=True)
class Decision:
    segment: str
    action: Action
    kept: tuple[int, ...] = ()
    invalid: int = 0
    reason: str = ""


def candidates(config: UpsertCompactionConfig, segments: Sequence[CompactionCandidate],
               now_ms: int) -> list[CompactionCandidate]:
    """The committed segments old enough to compact, oldest partition sequence first."""
    limit = now_ms - config.buffer_ms
    return sorted((s for s in segments if s.end_ms is not None and s.end_ms < limit and s.total_docs > 0),
                  key=lambda s: (s.partition, s.sequence))


def decide(config: UpsertCompactionConfig, segment: CompactionCandidate,
           answers: Mapping[str, ReplicaAnswer]) -> Decision:
    """What to do with ``segment`` given each of its ONLINE replicas' answer (``answers`` by instance)."""
    skip = _disagreement(segment, answers)
    if skip:
        return Decision(segment.name, Action.SKIP, reason=skip)
    kept = answers[segment.replicas[0]].kept
    invalid = segment.total_docs - len(kept)
    if invalid <= 0:
        return Decision(segment.name, Action.SKIP, kept, 0, "no invalid doc")
    if not kept:
        return Decision(segment.name, Action.EMPTY, kept, invalid, "every doc invalid")
    percent = 100.0 * invalid / segment.total_docs
    if percent < config.invalid_percent or invalid < config.invalid_count:
        return Decision(segment.name, Action.SKIP, kept, invalid,
                        f"{invalid} invalid doc(s), {percent:.1f}%: below the thresholds "
                        f"({config.invalid_count}, {config.invalid_percent:g}%)")
    return Decision(segment.name, Action.COMPACT, kept, invalid)


def _disagreement(segment: CompactionCandidate, answers: Mapping[str, ReplicaAnswer]) -> str:
    """Why the replicas' answers cannot be trusted together ("" when they can). Replicas are named by position
    (``replica 2/3``, in instance order): the reason ends in the run's message, which READ users see."""
    if not segment.replicas:
        return "no replica holds it ONLINE"
    first: tuple[int, ...] | None = None
    count = len(segment.replicas)
    for index, instance in enumerate(segment.replicas, 1):
        replica = f"replica {index}/{count}"
        answer = answers.get(instance)
        if answer is None:
            return f"{replica} did not answer"
        if answer.error:
            return f"{replica}: {answer.error}"
        if answer.crc != segment.crc:
            return f"{replica} serves CRC {answer.crc}, the controller has {segment.crc} (reloading?)"
        if answer.total_docs != segment.total_docs:
            return f"{replica} holds {answer.total_docs} docs, the controller says {segment.total_docs}"
        if first is None:
            first = answer.kept
        elif answer.kept != first:
            return f"replicas disagree on its valid docs ({replica} keeps {len(answer.kept)}, " \
                   f"replica 1/{count} keeps {len(first)}): a replica is still catching up"
    if first is not None and first and (first[-1] >= segment.total_docs or first[0] < 0):
        return "a replica names a doc outside the segment"
    return ""


def table_segments(records: Mapping[str, SegmentRecord], ideal: Mapping[str, Mapping[str, object]],
                   step_ms: float | None) -> list[CompactionCandidate]:
    """The REALTIME half's committed LLC segments as candidates: ``replicas`` are the instances the ideal state has
    the segment on, or none when one of them is not ONLINE (moving, failed: asked again next run)."""
    parsed = {}
    for name in ideal:
        try:
            parsed[name] = LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            continue
    out = []
    for name, llc in sorted(parsed.items()):
        record = records.get(name)
        if record is None or record.is_consuming or record.crc is None:
            continue
        states = {i: str(getattr(s, "value", s)) for i, s in ideal[name].items()}
        replicas = tuple(sorted(states)) if states and all(s == "ONLINE" for s in states.values()) else ()
        end = int(record.time_max * step_ms) if step_ms is not None and record.time_max is not None else None
        out.append(CompactionCandidate(name, llc.partition, llc.sequence, end, record.total_docs, record.crc,
                                       replicas))
    return out
