"""Auto-tuned row thresholds (DESIGN.md section 8): learn bytes per row, aim each segment at a desired size.

When a table sets ``realtime.segment.flush.threshold.rows = 0``, the controller picks each new segment's row
threshold at commit time. It keeps R, the bytes per row of committed segments, as an exponential average
R(n+1) = a*R(n) + (1-a)*R(current) with a > 0.5 (old knowledge weighs more, so one odd segment cannot swing it;
0.75 by default: with 0.9 a cardinality shift took over 9 segments to come within 15% of the target, see
docs/controller.md),
learned from one partition only (partitions of a topic carry alike rows; one learner keeps the average from being
dragged around by whichever partition commits most often). The next threshold is desiredSize / R, with Pinot's
guards: a segment far below half the desired size grows the next one by 1.5x at most, one above 1.5x the desired
size halves it, and a segment that ended by time with fewer rows than its threshold pulls the next threshold down
to just above its row count (1.1x), since the stream is too slow to fill more before the time limit anyway.

Pure: the learner is a value; ``on_commit`` returns the new learner and the threshold.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

DEFAULT_ALPHA = 0.75
DEFAULT_INITIAL_ROWS = 100_000
TIME_LIMIT_MULTIPLIER = 1.1
MAX_ROWS = 2**31 - 1


@dataclass(frozen=True)
class SizePolicy:
    """The knobs: ``desired_size_bytes`` (``realtime.segment.flush.threshold.segment.size``), the threshold used
    before anything is learned, the weight ``alpha`` of the past, and the partition learned from (None: every
    partition's segments teach it — the default, measured better than the seed's one partition in
    bench/autotune_policies.py: a shift is followed in ~3 rounds instead of ~9, and a partition with wider rows
    than the learning one does not leave every other partition off target)."""

    desired_size_bytes: int
    initial_rows: int = DEFAULT_INITIAL_ROWS
    alpha: float = DEFAULT_ALPHA
    learning_partition: int | None = None
    max_rows: int = MAX_ROWS

    def __post_init__(self) -> None:
        if self.desired_size_bytes <= 0:
            raise ValueError(f"desired segment size must be positive, got {self.desired_size_bytes}")
        if not 0.5 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0.5, 1): the past must outweigh one segment; got {self.alpha}")
        if not 0 < self.initial_rows <= self.max_rows:
            raise ValueError(f"initial rows must be in 1..{self.max_rows}, got {self.initial_rows}")


@dataclass(frozen=True)
class CommittedSegment:
    """What a commit tells the learner: the segment's partition, its row count and size, the threshold it had,
    and whether it was forced (forceCommit, or a repair with no size), in which case nothing is learned."""

    partition: int
    rows: int
    size_bytes: int
    row_threshold: int
    forced: bool = False

    @property
    def ended_by_time(self) -> bool:
        return not self.forced and self.rows < self.row_threshold


@dataclass(frozen=True)
class SizeLearner:
    """The learned bytes per row of one table (None until the learning partition has committed once)."""

    policy: SizePolicy
    bytes_per_row: float | None = None

    def first_threshold(self) -> int:
        """Row threshold of a partition's first segment: the initial guess, or desiredSize / R once R is known
        (a stream partition added later)."""
        if self.bytes_per_row is None:
            return self.policy.initial_rows
        return self._clamp(self.policy.desired_size_bytes / self.bytes_per_row)

    def threshold_before_size(self, current_rows: int) -> int:
        """The next segment's threshold while the finishing one's size is not known yet (a pauseless commit
        creates the next segment at commit start): desiredSize / R once R is known, else ``current_rows``. The
        finishing segment is learned from when its commit ends, for the segments after."""
        if self.bytes_per_row is None:
            return max(1, current_rows)
        return self._clamp(self.policy.desired_size_bytes / self.bytes_per_row)

    def learn(self, segment: CommittedSegment) -> SizeLearner:
        """R updated from ``segment`` if it has a size and the policy learns from its partition; else unchanged."""
        learning = self.policy.learning_partition
        if (learning is not None and segment.partition != learning) or not _measurable(segment):
            return self
        current = segment.size_bytes / segment.rows
        if self.bytes_per_row is None:
            return dataclasses.replace(self, bytes_per_row=current)
        a = self.policy.alpha
        return dataclasses.replace(self, bytes_per_row=a * self.bytes_per_row + (1 - a) * current)

    def on_commit(self, segment: CommittedSegment) -> tuple[SizeLearner, int]:
        """Learn from a committed segment; return the new learner and the next segment's row threshold."""
        if not _measurable(segment):
            return self, max(1, segment.row_threshold)
        learner = self.learn(segment)
        desired = self.policy.desired_size_bytes
        ratio = learner.bytes_per_row or segment.size_bytes / segment.rows
        target = desired / ratio
        if segment.ended_by_time and segment.size_bytes < desired:
            return learner, self._clamp(min(target, segment.rows * TIME_LIMIT_MULTIPLIER))
        if segment.size_bytes < desired / 2:
            target = min(target, segment.rows * 1.5)
        elif segment.size_bytes > desired * 1.5:
            target = min(target, segment.rows / 2)
        return learner, self._clamp(target)

    def _clamp(self, rows: float) -> int:
        return max(1, min(self.policy.max_rows, math.floor(rows)))


def _measurable(segment: CommittedSegment) -> bool:
    return not segment.forced and segment.rows > 0 and segment.size_bytes > 0
