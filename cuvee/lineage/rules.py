"""Pure lineage transitions (no I/O): the controller applies them inside compare-and-set updates, with the
table's current segment names passed in, so each premise is re-checked against the state it writes over.

Visibility (``hidden_segments``) is the one rule readers apply: an IN_PROGRESS entry hides its segmentsTo (they
are still being pushed), a COMPLETED one hides its segmentsFrom (replaced), a REVERTED one hides its segmentsTo
(abandoned, deleted soon). So a query sees exactly the old set until ``end_replace`` and exactly the new set after,
and a pusher that dies mid-way leaves the old set served.

A re-run's ``start_replace`` cleans up after a dead run: IN_PROGRESS entries that touch the same segments (or,
with ``input_key``, the same input) are reverted; names the new entry pushes again move to it, the others are
returned for deletion. A name an older entry lists but that no longer exists (deleted, expired, abandoned by a
revert) may be pushed anew: the older entry lets go of it, so it never hides nor deletes the new segment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from cuvee.errors import CuveeError
from cuvee.lineage.model import LineageEntry, LineageState, SegmentLineage

INPUT_KEY = "inputKey"  # custom map key naming the input a batch job read (APPEND re-runs replace its segments)
TASK_TYPE = "taskType"  # custom map key naming the maintenance task that made the entry (MergeRollupTask, ...)


class LineageError(CuveeError):
    """A lineage request that cannot be applied to the current state; the message says why (HTTP 400/409)."""

    def __init__(self, message: str, *, conflict: bool = False):
        super().__init__(message)
        self.conflict = conflict


def hidden_segments(lineage: SegmentLineage | None) -> frozenset[str]:
    """The segments no query may read now."""
    if lineage is None:
        return frozenset()
    hidden: set[str] = set()
    for entry in lineage.entries.values():
        hidden.update(entry.segments_from if entry.state is LineageState.COMPLETED else entry.segments_to)
    return frozenset(hidden)


@dataclass(frozen=True)
class StartResult:
    lineage: SegmentLineage
    to_delete: tuple[str, ...]  # segmentsTo of the stale entries reverted here, not pushed again by the new one


def start_replace(lineage: SegmentLineage, entry_id: str, segments_from: Iterable[str], segments_to: Iterable[str],
                  existing: Set[str], now_ms: int, *, custom: dict[str, str] | None = None,
                  force_cleanup: bool = True) -> StartResult:
    """A new IN_PROGRESS entry. ``existing``: the table's segments (ideal state). Stale IN_PROGRESS entries that
    overlap it are reverted when ``force_cleanup`` (else LineageError, conflict)."""
    sources, targets = _unique(segments_from, "segmentsFrom"), _unique(segments_to, "segmentsTo")
    custom = dict(custom or {})
    if entry_id in lineage.entries:
        raise LineageError(f"lineage entry {entry_id} already exists", conflict=True)
    if not targets and not sources:
        raise LineageError("segmentsFrom and segmentsTo are both empty")
    both = set(sources) & set(targets)
    if both:
        raise LineageError(f"segments in both segmentsFrom and segmentsTo: {_names(both)}")
    missing = set(sources) - existing
    if missing:
        raise LineageError(f"segmentsFrom names segments the table does not have: {_names(missing)}")
    gone = set(sources) & hidden_segments(lineage)
    if gone:  # replaced already (a concurrent job won), or abandoned: replacing them again would add their rows twice
        raise LineageError(f"segmentsFrom names segments lineage already hides: {_names(gone)}", conflict=True)
    stale = {eid for eid, e in lineage.entries.items() if e.state is LineageState.IN_PROGRESS
             and (_overlaps(e, sources, targets) or _same_input(e, custom))}
    task = custom.get(TASK_TYPE)
    others = sorted(eid for eid in stale if task and lineage.entries[eid].custom.get(TASK_TYPE) != task)
    if others:  # a maintenance job cleans up after its own dead runs only, never under a user's running push
        raise LineageError(f"lineage entries {', '.join(others)} (not {task} runs) are in progress for these "
                           "segments", conflict=True)
    if stale and not force_cleanup:
        raise LineageError(f"lineage entries {', '.join(sorted(stale))} are in progress for these segments",
                           conflict=True)
    released: dict[str, set[str]] = {}  # entry id → names the new entry takes over (gone, or abandoned)
    for eid, entry in lineage.entries.items():
        if eid in stale:
            continue
        claimed = set(targets) & (set(entry.segments_to) | set(entry.segments_from))
        taken = claimed & existing if entry.state is not LineageState.REVERTED else set()
        if taken:
            raise LineageError(f"segmentsTo names segments lineage entry {eid} already owns: {_names(taken)}",
                               conflict=True)
        if claimed:  # an older entry must not go on hiding (and its clean-up deleting) a name pushed anew
            released[eid] = claimed
        if entry.state is LineageState.IN_PROGRESS and set(sources) & set(entry.segments_from):
            raise LineageError(f"lineage entry {eid} is replacing some of segmentsFrom", conflict=True)
    owned_by_stale = {s for eid in stale for s in lineage.entries[eid].segments_to}
    clash = (set(targets) & existing) - owned_by_stale
    if clash:
        raise LineageError(f"segmentsTo names segments the table already has: {_names(clash)}", conflict=True)
    to_delete: list[str] = []
    out = lineage
    for eid, names in released.items():
        entry = lineage.entries[eid]
        out = out.with_entry(eid, LineageEntry(tuple(x for x in entry.segments_from if x not in names),
                                               tuple(x for x in entry.segments_to if x not in names), entry.state,
                                               entry.timestamp_ms, entry.custom))
    for eid in sorted(stale):
        entry = lineage.entries[eid]
        kept = tuple(s for s in entry.segments_to if s not in targets)  # what the new entry pushes again is its own
        to_delete.extend(kept)
        out = out.with_entry(eid, LineageEntry(entry.segments_from, kept, LineageState.REVERTED, now_ms,
                                               entry.custom))
    out = out.with_entry(entry_id, LineageEntry(sources, targets, LineageState.IN_PROGRESS, now_ms, custom))
    return StartResult(out, tuple(sorted(set(to_delete))))


def end_replace(lineage: SegmentLineage, entry_id: str, existing: Set[str], now_ms: int) -> SegmentLineage:
    """IN_PROGRESS → COMPLETED once every segmentsTo is in the table; COMPLETED again is a no-op (a retried call)."""
    entry = _entry(lineage, entry_id)
    if entry.state is LineageState.COMPLETED:
        return lineage
    if entry.state is not LineageState.IN_PROGRESS:
        raise LineageError(f"lineage entry {entry_id} is {entry.state.value}, not IN_PROGRESS", conflict=True)
    missing = set(entry.segments_to) - existing
    if missing:
        raise LineageError(f"lineage entry {entry_id}: segmentsTo not pushed yet: {_names(missing)}")
    return lineage.with_entry(entry_id, entry.with_state(LineageState.COMPLETED, now_ms))


def revert_replace(lineage: SegmentLineage, entry_id: str, existing: Set[str], now_ms: int) -> SegmentLineage:
    """IN_PROGRESS or COMPLETED → REVERTED (segmentsFrom served again: a COMPLETED entry only while they all
    still exist); REVERTED again is a no-op."""
    entry = _entry(lineage, entry_id)
    if entry.state is LineageState.REVERTED:
        return lineage
    if entry.state is LineageState.COMPLETED:
        gone = set(entry.segments_from) - existing
        if gone:
            raise LineageError(f"lineage entry {entry_id} cannot be reverted: segmentsFrom already deleted: "
                               f"{_names(gone)}", conflict=True)
    return lineage.with_entry(entry_id, entry.with_state(LineageState.REVERTED, now_ms))


def prune(lineage: SegmentLineage, existing: Set[str]) -> SegmentLineage:
    """Drop entries with nothing left to hide: REVERTED ones whose segmentsTo are gone, COMPLETED ones whose
    segmentsFrom and segmentsTo are all gone (the latest COMPLETED entry per input key is kept while any of its
    segmentsTo exist, so an APPEND re-run finds the previous run's segments). A batch run's entry whose segments a
    maintenance job merged is kept as long as the merged rows are (through every later merge): an APPEND re-run
    must learn that its input's rows live on in merged segments (``merged_runs``), not push them a second time."""
    completed = {eid: e for eid, e in lineage.entries.items() if e.state is LineageState.COMPLETED}
    kept = {eid for eid, e in completed.items() if (set(e.segments_from) | set(e.segments_to)) & existing}
    carrying = _carrying_input(completed)
    grew = True
    while grew:  # a carrying entry is kept while an entry kept replaced some of what it pushed
        consumed = {s for eid in kept for s in completed[eid].segments_from}
        more = {eid for eid in carrying - kept if set(completed[eid].segments_to) & consumed}
        kept |= more
        grew = bool(more)
    out = lineage
    for eid, entry in lineage.entries.items():
        if entry.state is LineageState.REVERTED and not set(entry.segments_to) & existing:
            out = out.without_entry(eid)
        elif entry.state is LineageState.COMPLETED and eid not in kept:
            out = out.without_entry(eid)
    return out


def _carrying_input(completed: Mapping[str, LineageEntry]) -> set[str]:
    """Entries holding a batch input's rows: the runs with an input key, and the merges of what those pushed."""
    carrying = {eid for eid, e in completed.items() if INPUT_KEY in e.custom}
    grew = True
    while grew:
        pushed = {s for eid in carrying for s in completed[eid].segments_to}
        more = {eid for eid, e in completed.items() if eid not in carrying and set(e.segments_from) & pushed}
        carrying |= more
        grew = bool(more)
    return carrying


def merged_runs(lineage: SegmentLineage | None, input_key: str) -> tuple[str, ...]:
    """The segments the latest COMPLETED run over ``input_key`` pushed that a later COMPLETED entry replaced (a
    maintenance job merged them with other rows): an APPEND re-run cannot take those rows back out."""
    latest = _latest_run(lineage, input_key)
    if lineage is None or latest is None:
        return ()
    replaced = {s for e in lineage.entries.values() if e is not latest and e.state is LineageState.COMPLETED
                for s in e.segments_from}
    return tuple(s for s in latest.segments_to if s in replaced)


def previous_run(lineage: SegmentLineage | None, input_key: str, existing: Set[str]) -> tuple[str, ...]:
    """The segments the latest COMPLETED entry for ``input_key`` pushed that still exist (an APPEND re-run's
    segmentsFrom)."""
    latest = _latest_run(lineage, input_key)
    return () if latest is None else tuple(s for s in latest.segments_to if s in existing)


def _latest_run(lineage: SegmentLineage | None, input_key: str) -> LineageEntry | None:
    runs = [e for e in (lineage.entries.values() if lineage is not None else ())
            if e.state is LineageState.COMPLETED and e.custom.get(INPUT_KEY) == input_key]
    return max(runs, key=lambda e: e.timestamp_ms) if runs else None


def _entry(lineage: SegmentLineage, entry_id: str) -> LineageEntry:
    entry = lineage.entries.get(entry_id)
    if entry is None:
        raise LineageError(f"lineage entry {entry_id!r} does not exist")
    return entry


def _overlaps(entry: LineageEntry, sources: tuple[str, ...], targets: tuple[str, ...]) -> bool:
    return bool(set(entry.segments_from) & set(sources) or set(entry.segments_to) & set(targets))


def _same_input(entry: LineageEntry, custom: dict[str, str]) -> bool:
    key = custom.get(INPUT_KEY)
    return key is not None and entry.custom.get(INPUT_KEY) == key


def _unique(names: Iterable[str], what: str) -> tuple[str, ...]:
    items = tuple(names)
    if len(set(items)) != len(items):
        raise LineageError(f"{what} lists a segment twice")
    return items


def _names(names: Iterable[str], shown: int = 5) -> str:
    ordered = sorted(names)
    text = ", ".join(ordered[:shown])
    return text + (f" (+{len(ordered) - shown} more)" if len(ordered) > shown else "")
