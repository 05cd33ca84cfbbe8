"""What a RealtimeToOfflineSegmentsTask run moves (Pinot's RealtimeToOfflineSegmentsTaskGenerator rules, made
safe). Pure: the realtime half's segments, the stream's offsets, the offline half and the clock in; the windows
to move and the watermark to store after them out.

One **watermark** per table: the start of the next window to move. The first run starts at the bucket of the
oldest committed realtime row. A window ``[w, w + bucket)`` is **due** when

1. it ended ``bufferTimePeriod`` ago: ``w + bucket + buffer <= now`` (late rows have arrived), and
2. the committed realtime segments hold all of its rows: for every partition of the stream, either nothing past
   its last committed segment exists upstream (the stream's latest offset is where the committed segments end),
   or its last committed segment reaches ``bufferTimePeriod`` past the window's end (``endTime - buffer >= w +
   bucket``, the newest time capped at now): consumption has passed the window by more than rows may be late, so
   what the consuming segment holds for it is late data. (Pinot's rule, ``endTime >= w + bucket``, moves a
   window while a row a few minutes late still sits in the consuming segment.)

Pinot checks (2) only for partitions whose last completed segment overlaps the window, so a partition whose
consuming segment started before the window and holds rows of it is moved without them (those rows are then
hidden below the time boundary for good). Here every partition counts; an idle partition does not block (nothing
uncommitted upstream), a slow one blocks until its rows commit (flush threshold rows or time), and a partition
whose latest offset is unknown (the stream did not answer) blocks.

The window's rows are those of the committed segments overlapping it whose time lies in it (a segment reaching over
several windows is read once per window). Empty windows are jumped over at once (never one loop per empty bucket
over years), windows an earlier run already moved (its completed lineage entry, or its output names
``rto_<start>_<end>_…``, when it died before the watermark moved) are skipped, and the watermark never falls below
the newest time of rows the offline half holds from elsewhere (batch pushes): the task never adds rows to a time
range the offline half already answers for, and moves the rest of a bucket such rows end inside (a first window
shorter than a bucket), so no realtime row between their end and the next bucket is left below the time boundary.
Rows older than the first watermark and rows arriving after their window moved ("late rows") are not moved: they
stay in the realtime half, counted by queries only while they lie above the time boundary.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from cuvee.cluster.records import SegmentRecord
from cuvee.lineage.model import LineageState, SegmentLineage
from cuvee.lineage.rules import INPUT_KEY
from cuvee.maintenance.config import REALTIME_TO_OFFLINE, RealtimeToOfflineConfig
from cuvee.maintenance.merge_plan import SegmentSpan
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

WATERMARK = ""  # the task's one watermark (TaskState keys watermarks by merge level; this task has none)
OUTPUT_PREFIX = "rto_"
MAX_WINDOWS_PER_RUN = 100  # a run catching up on a long backlog moves this many windows, the next run goes on
_OUTPUT = re.compile(r"^rto_(-?\d+)_(-?\d+)_")


@dataclass(frozen=True)
class RealtimeSegment:
    """A segment of the realtime half in its ideal state: committed (DONE) or not (consuming, committing), with
    its rows' time range in epoch milliseconds (None: no rows, or unknown) and its stream offsets."""

    name: str
    partition: int | None  # None: not a stream segment (an upload): it holds back no window
    sequence: int
    committed: bool
    start_ms: int | None = None
    end_ms: int | None = None
    total_docs: int = 0
    start_offset: int | None = None
    end_offset: int | None = None


@dataclass(frozen=True)
class MoveWindow:
    start_ms: int
    end_ms: int
    segments: tuple[str, ...]  # the committed realtime segments overlapping the window
    total_docs: int  # their rows (the window's own rows are among them)

    @property
    def input_key(self) -> str:
        """The lineage entry's ``inputKey``: a rerun's replace reverts a dead run's entry for the same window."""
        return window_key(self.start_ms, self.end_ms)

    @property
    def name_prefix(self) -> str:
        return f"{OUTPUT_PREFIX}{self.start_ms}_{self.end_ms}_"


@dataclass(frozen=True)
class MovePlan:
    windows: tuple[MoveWindow, ...]
    watermark: int | None  # to store once the windows are in (None: nothing committed yet)
    skipped: int = 0  # due windows jumped over: empty, or moved by an earlier run
    waiting: str = ""  # why the window after the last one is not due yet


def window_key(start_ms: int, end_ms: int) -> str:
    return f"{REALTIME_TO_OFFLINE}:{start_ms}-{end_ms}"


def output_window(name: str) -> tuple[int, int] | None:
    """The window a segment this task built covers (from its name), else None."""
    found = _OUTPUT.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


def moved_windows(lineage: SegmentLineage | None, offline_segments: Iterable[str]) -> list[tuple[int, int]]:
    """Windows already in the offline half: those of COMPLETED entries this task made, and of served segments
    named by it (an entry may have been pruned)."""
    found = set()
    if lineage is not None:
        for entry in lineage.entries.values():
            key = entry.custom.get(INPUT_KEY, "")
            if entry.state is LineageState.COMPLETED and key.startswith(REALTIME_TO_OFFLINE + ":"):
                start, _, end = key.partition(":")[2].rpartition("-")
                try:
                    found.add((int(start), int(end)))
                except ValueError:
                    continue
    found.update(w for w in map(output_window, offline_segments) if w is not None)
    return sorted(found)


def realtime_segments(records: Mapping[str, SegmentRecord], ideal: Mapping[str, object],
                      step_ms: float, hidden: Set[str] = frozenset()) -> list[RealtimeSegment]:
    """The realtime half's segments in its ideal state, as the planner sees them (``step_ms``: milliseconds per
    unit of the time column, ``cluster.time_boundary.millis_per_value``). Segments lineage hides (a realtime
    merge's inputs after it, a dead run's outputs) are not the half's rows: leaving them in would read rows
    twice."""
    out = []
    for name in sorted(ideal):
        record = records.get(name)
        if record is None or name in hidden:
            continue
        partition, sequence = record.partition, record.sequence
        if partition is None or sequence is None:
            try:
                llc = LLCSegmentName.parse(name)
                partition, sequence = llc.partition, llc.sequence
            except InvalidSegmentNameError:
                partition, sequence = None, -1
        start = end = None
        if record.time_min is not None and record.time_max is not None:
            start, end = int(record.time_min * step_ms), int(record.time_max * step_ms)
        out.append(RealtimeSegment(name, partition, sequence, not record.is_consuming, start, end,
                                   record.total_docs, record.start_offset, record.end_offset))
    return out


def coverage_limit(segments: Sequence[RealtimeSegment], latest_offsets: Mapping[int, int | None], now_ms: int,
                   buffer_ms: int) -> tuple[int | None, str]:
    """The latest window end the committed segments cover (None: no limit) and, when limited, why.

    A partition still consuming covers up to ``bufferTimePeriod`` before the newest time its committed rows reach
    (never later than now): a row of its consuming segment later than that is later than ``bufferTimePeriod``
    behind a row committed before it — late data by the task's definition. Without the buffer, a row a few minutes
    late that lands just after a commit would be left out of its window and then hidden below the time boundary;
    without the clock's cap, one row from a producer whose clock is years ahead would let every window move."""
    limit: int | None = None
    reason = ""
    for partition in sorted({s.partition for s in segments if s.partition is not None}):
        own = [s for s in segments if s.partition == partition]
        done = sorted((s for s in own if s.committed), key=lambda s: s.sequence)
        if done:
            committed_to = done[-1].end_offset
        else:
            starts = [s.start_offset for s in own if s.start_offset is not None]
            committed_to = min(starts) if starts else None
        upstream = latest_offsets.get(partition)
        if upstream is not None and committed_to is not None and upstream <= committed_to:
            continue  # nothing upstream past the committed rows: this partition holds back no window
        reached = next((s.end_ms for s in reversed(done) if s.end_ms is not None), None)
        if reached is not None:
            reached = min(reached, now_ms) - buffer_ms
        if reached is None:
            return -(2**62), (f"partition {partition} has rows not committed yet and no committed segment"
                              if upstream is not None else f"partition {partition}'s latest offset is unknown")
        if limit is None or reached < limit:
            limit = reached
            reason = (f"partition {partition} has rows not committed yet; its committed rows reach "
                      f"{iso(reached + buffer_ms)} (less bufferTimePeriod)" if upstream is not None else
                      f"partition {partition}'s latest offset is unknown; its committed rows reach "
                      f"{iso(reached + buffer_ms)} (less bufferTimePeriod)")
    return limit, reason


def plan_moves(config: RealtimeToOfflineConfig, segments: Sequence[RealtimeSegment],
               latest_offsets: Mapping[int, int | None], offline: Sequence[SegmentSpan],
               moved: Sequence[tuple[int, int]], watermark: int | None, now_ms: int, *,
               max_windows: int = MAX_WINDOWS_PER_RUN, step_ms: float = 1.0) -> MovePlan:
    """``offline``: the offline half's served segments; ``moved``: windows already moved (``moved_windows``);
    ``watermark``: the stored one (None before the first run); ``step_ms``: milliseconds per unit of the time
    column (a window no value of it lies in, an hour of a DAYS column, is jumped over without reading rows)."""
    bucket = config.bucket_ms
    committed = sorted((s for s in segments if s.committed and s.start_ms is not None and s.end_ms is not None
                        and s.total_docs > 0), key=lambda s: (s.start_ms or 0, s.name))
    mark = watermark
    if mark is None:
        if not committed:
            return MovePlan((), None, waiting="no committed realtime segment yet")
        mark = _floor(min(s.start_ms or 0 for s in committed), bucket)
    elsewhere = [s.end_ms for s in offline if s.end_ms is not None and output_window(s.name) is None]
    if elsewhere:  # rows pushed by others: move only what lies after them (the first window may be a partial one)
        mark = max(mark, max(elsewhere) + 1)
    buffered = now_ms - config.buffer_ms
    covered, why = coverage_limit(segments, latest_offsets, now_ms, config.buffer_ms)
    limit = buffered if covered is None else min(buffered, covered)
    windows: list[MoveWindow] = []
    skipped = 0
    waiting = ""
    while True:
        end = _floor(mark, bucket) + bucket
        if end > limit:
            waiting = (f"window {iso(mark)} ends {iso(end)}: "
                       + (why if covered is not None and covered < end else
                          f"not before {iso(end + config.buffer_ms)} (bufferTimePeriod)"))
            break
        if len(windows) >= max_windows:
            waiting = f"at most {max_windows} windows a run"
            break
        done_before = [b for a, b in moved if a < end and b > mark]
        if done_before:
            mark, skipped = max(done_before), skipped + 1
            continue
        overlapping = [s for s in committed if (s.start_ms or 0) < end and (s.end_ms or 0) >= mark]
        low, high = window_bounds(mark, end, step_ms)
        if overlapping and low >= high:  # no value of the time column lies in it: nothing to read
            mark, skipped = end, skipped + 1
            continue
        if not overlapping:
            later = [max(s.start_ms or 0, end) for s in committed if (s.end_ms or 0) >= end]
            target = min(min(later), limit) if later else limit
            mark, skipped = max(end, _floor(target, bucket)), skipped + 1  # ≥ one bucket on
            continue
        windows.append(MoveWindow(mark, end, tuple(s.name for s in overlapping),
                                  sum(s.total_docs for s in overlapping)))
        mark = end
    return MovePlan(tuple(windows), mark, skipped, waiting)


def window_bounds(start_ms: int, end_ms: int, step_ms: float) -> tuple[int, int]:
    """``[lo, hi)`` in the time column's units holding exactly the integer values whose time lies in the window."""
    return _ceil_units(start_ms, step_ms), _ceil_units(end_ms, step_ms)


def _ceil_units(ms: int, step_ms: float) -> int:
    units = ms / step_ms
    nearest = round(units)
    return int(nearest) if abs(units - nearest) < 1e-6 else math.ceil(units)


def iso(ms: int) -> str:
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _floor(value: int, step: int) -> int:
    return value - value % step
