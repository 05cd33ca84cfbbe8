"""What a MergeRollupTask run merges (Pinot's MergeRollupTaskGenerator rules). Pure: segments, watermarks and
the clock in, tasks and the watermarks to store after them out.

Per level, smallest bucket first, a **watermark** marks the start of the next window to merge (the first run
starts at the bucket of the oldest segment). A window ``[w, w + bucket)`` is due when it ended ``buffer`` ago,
and — above the first level — when the level below has passed it (a day is merged from its merged hours). The
segments whose *start* time lies in the window and that were not merged at this level or higher are merged into
segments of at most ``maxNumRecordsPerSegment`` rows, in tasks of at most ``maxNumRecordsPerTask`` rows; rows of a
segment that reach past the window go with it (nothing is split or lost). Empty windows are skipped; a window
holding a single segment is not rewritten by a concat merge. Up to ``maxNumParallelBuckets`` windows per level and
run. A segment's merge level is in its name (``merged_<level>_…``), so it survives every restart.

Segments can reach a window after the watermark passed it (a backfill pushed over several runs: the first run saw
one segment, which needs no merge, and moved on). Windows behind the watermark that hold two or more segments not
merged at the level (one, for a rollup) are merged too, oldest first, with what the forward windows leave of the
run's bucket budget, and the watermark stays where it is: Pinot would leave those segments unmerged for good.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cuvee.maintenance.config import MergeLevel, MergeRollupConfig, MergeType

MERGED_PREFIX = "merged_"


@dataclass(frozen=True)
class SegmentSpan:
    """A committed, served segment: its rows' time range in epoch milliseconds (None: no time values)."""

    name: str
    start_ms: int | None
    end_ms: int | None
    total_docs: int


@dataclass(frozen=True)
class MergeTask:
    level: str
    window_start_ms: int
    window_end_ms: int
    segments: tuple[str, ...]
    total_docs: int

    @property
    def name_prefix(self) -> str:
        """Output names start ``merged_<level>_<digest of the inputs>_`` (then the table, times, sequence and the
        run's id): the level marks them merged; a rerun's replace over the same inputs reverts the dead run's
        entry."""
        digest = hashlib.sha1("\n".join(sorted(self.segments)).encode()).hexdigest()[:8]
        return f"{MERGED_PREFIX}{self.level}_{digest}_"


@dataclass(frozen=True)
class MergePlan:
    tasks: tuple[MergeTask, ...]
    watermarks: Mapping[str, int]  # level → watermark to store once the tasks are in
    skipped: int = 0  # due windows left alone (empty, or one segment under concat)

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(s for task in self.tasks for s in task.segments)


def merged_level(segment: str, levels: Sequence[MergeLevel]) -> int:
    """The index of the level ``segment`` was merged at (-1: not merged, or at a level no longer configured)."""
    if not segment.startswith(MERGED_PREFIX):
        return -1
    rest = segment[len(MERGED_PREFIX):]
    for index, level in enumerate(levels):
        if rest.startswith(level.name + "_"):
            return index
    return -1


def plan_merges(config: MergeRollupConfig, segments: Sequence[SegmentSpan], watermarks: Mapping[str, int],
                now_ms: int) -> MergePlan:
    tasks: list[MergeTask] = []
    marks: dict[str, int] = {}
    skipped = 0
    for index, level in enumerate(config.levels):
        below = config.levels[index - 1].name if index else None
        limit = now_ms - level.buffer_ms  # a window may end no later than this
        if below is not None:
            if below not in watermarks:
                continue  # the level below has not merged anything yet
            limit = min(limit, watermarks[below])
        taken = {name for task in tasks for name in task.segments}  # a lower level merges them in this run
        candidates = sorted((s for s in segments if s.start_ms is not None and s.name not in taken
                             and merged_level(s.name, config.levels) < index), key=lambda s: (s.start_ms, s.name))
        mark = watermarks.get(level.name)
        if mark is None:  # the first run starts at the oldest segment this level merges or has merged
            starts = [s.start_ms for s in segments if s.start_ms is not None
                      and merged_level(s.name, config.levels) <= index]
            if not starts:
                continue
            mark = _floor(min(starts), level.bucket_ms)
        level_tasks, mark, level_skipped = _plan_level(level, candidates, mark, limit)
        tasks.extend(level_tasks)
        skipped += level_skipped
        if mark != watermarks.get(level.name):
            marks[level.name] = mark
    return MergePlan(tuple(tasks), marks, skipped)


def _plan_level(level: MergeLevel, candidates: Sequence[SegmentSpan], mark: int,
                limit: int) -> tuple[list[MergeTask], int, int]:
    """Walks the due windows from ``mark`` over the start-sorted ``candidates`` with bisection: each window and
    each jump costs O(log n), so years of one-segment windows plan in milliseconds."""
    tasks: list[MergeTask] = []
    buckets = skipped = 0
    starts = [s.start_ms or 0 for s in candidates]
    stored = mark  # windows before it were passed by earlier runs; those after, by this one
    while buckets < level.max_parallel_buckets:
        end = mark + level.bucket_ms
        if end > limit:
            break
        first, after = bisect.bisect_left(starts, mark), bisect.bisect_left(starts, end)
        window = candidates[first:after]
        if not window:
            # jump over empty windows at once (a bucket of 1s over years of history would loop forever)
            mark = min(_floor(starts[after], level.bucket_ms), _floor(limit, level.bucket_ms)) \
                if after < len(starts) else max(end, _floor(limit, level.bucket_ms))
            skipped += 1
            continue
        if len(window) == 1 and level.merge_type is MergeType.CONCAT:
            mark, skipped = end, skipped + 1
            continue
        tasks.extend(_split(level, window, mark, end))
        mark, buckets = end, buckets + 1
    for start, window in _late_windows(level, candidates, starts, stored, level.max_parallel_buckets - buckets):
        tasks.extend(_split(level, window, start, start + level.bucket_ms))
    return tasks, mark, skipped


def _late_windows(level: MergeLevel, candidates: Sequence[SegmentSpan], starts: Sequence[int], mark: int,
                  budget: int) -> list[tuple[int, list[SegmentSpan]]]:
    """Up to ``budget`` windows behind ``mark``, oldest first, whose unmerged segments arrived after the
    watermark passed them and now need a merge (see the module's docstring)."""
    found: list[tuple[int, list[SegmentSpan]]] = []
    least = 1 if level.merge_type is MergeType.ROLLUP else 2
    behind = bisect.bisect_left(starts, mark)
    index = 0
    while index < behind and len(found) < budget:
        start = _floor(starts[index], level.bucket_ms)
        after = min(bisect.bisect_left(starts, start + level.bucket_ms), behind)
        if after - index >= least:
            found.append((start, list(candidates[index:after])))
        index = after
    return found


def _split(level: MergeLevel, window: Sequence[SegmentSpan], start: int, end: int) -> list[MergeTask]:
    """The window's segments in tasks of at most ``max_records_per_task`` rows (a bigger segment alone)."""
    out: list[MergeTask] = []
    group: list[SegmentSpan] = []
    docs = 0
    for segment in window:
        if group and docs + segment.total_docs > level.max_records_per_task:
            out.append(MergeTask(level.name, start, end, tuple(s.name for s in group), docs))
            group, docs = [], 0
        group.append(segment)
        docs += segment.total_docs
    if group:
        out.append(MergeTask(level.name, start, end, tuple(s.name for s in group), docs))
    return out


def _floor(value: int, step: int) -> int:
    return value - value % step
