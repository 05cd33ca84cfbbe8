"""Auto-tuned row thresholds (DESIGN.md section 8): learn bytes per row, aim each segment at a desired size.

When a table sets ``realtime.segment.flush.threshold.rows = 0``, the controller picks each new segment's row
threshold at commit time. It keeps R, the bytes per row of committed segments, as an exponential average
R(n+1) = a*R(n) + (1-a)*R(current) with a > 0.5 (old knowledge weighs more, so one odd segment cannot swing it;
0.75 by default: with 0.9 a cardinality shift took over 9 segments to come within 15% of the target, see
docs/controller.md). By default each partition learns its own R from its own segments (``learning`` "each": a
partition whose rows are wider than the others' neither misses its target nor pulls theirs), and a table-wide R
learned from every partition starts partitions that have none yet; "all" keeps only the table-wide R, a partition
number learns from that partition alone (the seed's rule). bench/autotune_policies.py measures the three. The
next threshold is desiredSize / R, with Pinot's
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
SHARED = 0.5  # under "each": the share of a segment's correction that moves the table's R (see SizeLearner.learn)
MAX_ROWS = 2**31 - 1


EACH = "each"  # every partition its own R (the default)
ALL = "all"  # one R for the table, learned from every partition


@dataclass(frozen=True)
class SizePolicy:
    """The knobs: ``desired_size_bytes`` (``realtime.segment.flush.threshold.segment.size``), the threshold used
    before anything is learned, the weight ``alpha`` of the past, and who learns (``learning``: "each", "all" or
    one partition's number; see the module docstring)."""

    desired_size_bytes: int
    initial_rows: int = DEFAULT_INITIAL_ROWS
    alpha: float = DEFAULT_ALPHA
    learning: str | int = EACH
    max_rows: int = MAX_ROWS

    def __post_init__(self) -> None:
        if self.desired_size_bytes <= 0:
            raise ValueError(f"desired segment size must be positive, got {self.desired_size_bytes}")
        if not 0.5 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0.5, 1): the past must outweigh one segment; got {self.alpha}")
        if not 0 < self.initial_rows <= self.max_rows:
            raise ValueError(f"initial rows must be in 1..{self.max_rows}, got {self.initial_rows}")
        if self.learning not in (EACH, ALL) and not (isinstance(self.learning, int) and self.learning >= 0):
            raise ValueError(f"learning must be 'each', 'all' or a partition number, got {self.learning!r}")


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
    """The learned bytes per row of one table: ``bytes_per_row`` table-wide (None until a segment taught it) and,
    with the "each" policy, every partition's width relative to it (``by_partition``: partition → factor, as
    sorted pairs: the learner is a value). A partition's R is the table's times its factor: a shift every
    partition sees moves the table's R at every commit (fast, as "all"), while a partition wider than the others
    keeps its own factor (learned as slowly, from its own segments only)."""

    policy: SizePolicy
    bytes_per_row: float | None = None
    by_partition: tuple[tuple[int, float], ...] = ()

    def rate(self, partition: int | None) -> float | None:
        """The R a segment of ``partition`` is sized by: its own under "each" (the table's until it has one)."""
        if self.bytes_per_row is None:
            return None
        if self.policy.learning == EACH and partition is not None:
            return self.bytes_per_row * dict(self.by_partition).get(partition, 1.0)
        return self.bytes_per_row

    def first_threshold(self, partition: int | None = None) -> int:
        """Row threshold of a segment that follows no commit (a new partition's first, one repair re-creates):
        the initial guess, or desiredSize / R once R is known."""
        rate = self.rate(partition)
        if rate is None:
            return self.policy.initial_rows
        return self._clamp(self.policy.desired_size_bytes / rate)

    def threshold_before_size(self, current_rows: int, partition: int | None = None) -> int:
        """The next segment's threshold while the finishing one's size is not known yet (a pauseless commit
        creates the next segment at commit start): desiredSize / R once R is known, else ``current_rows``. The
        finishing segment is learned from when its commit ends, for the segments after."""
        rate = self.rate(partition)
        if rate is None:
            return max(1, current_rows)
        return self._clamp(self.policy.desired_size_bytes / rate)

    def learn(self, segment: CommittedSegment) -> SizeLearner:
        """R updated from ``segment`` if it has a size and the policy learns from its partition; else unchanged."""
        learning = self.policy.learning
        if not _measurable(segment) or (isinstance(learning, int) and segment.partition != learning):
            return self
        current = segment.size_bytes / segment.rows
        if learning != EACH:
            return dataclasses.replace(self, bytes_per_row=self._average(self.bytes_per_row, current))
        factors = dict(self.by_partition)
        factor = factors.get(segment.partition, 1.0)
        if self.bytes_per_row is None:
            return dataclasses.replace(self, bytes_per_row=current / factor)
        # In log space R_p = g + f_p. This segment's error e = log(current / R_p) is corrected by (1 - alpha) * e in
        # all, as one exponential average would, split between the table (SHARED: every partition moves with it,
        # so a shift all partitions see is followed at every commit) and this partition's width (the rest: a
        # partition wider than the others keeps its own). Nothing is counted twice.
        step = (1 - self.policy.alpha) * math.log(current / (self.bytes_per_row * factor))
        table = self.bytes_per_row * math.exp(SHARED * step)
        factors[segment.partition] = factor * math.exp((1 - SHARED) * step)
        return dataclasses.replace(self, bytes_per_row=table, by_partition=tuple(sorted(factors.items())))

    def with_rates(self, table: float | None, by_partition: dict[int, float]) -> SizeLearner:
        """This learner holding the given R's (a new leader's, read from segment metadata: each partition's R
        becomes its factor over ``table``)."""
        if table is None or table <= 0:
            return dataclasses.replace(self, bytes_per_row=table, by_partition=())
        factors = {p: rate / table for p, rate in by_partition.items() if rate > 0}
        return dataclasses.replace(self, bytes_per_row=table, by_partition=tuple(sorted(factors.items())))

    def on_commit(self, segment: CommittedSegment) -> tuple[SizeLearner, int]:
        """Learn from a committed segment; return the new learner and the next segment's row threshold."""
        if not _measurable(segment):
            return self, max(1, segment.row_threshold)
        learner = self.learn(segment)
        desired = self.policy.desired_size_bytes
        ratio = learner.rate(segment.partition) or segment.size_bytes / segment.rows
        target = desired / ratio
        if segment.ended_by_time and segment.size_bytes < desired:
            return learner, self._clamp(min(target, segment.rows * TIME_LIMIT_MULTIPLIER))
        if segment.size_bytes < desired / 2:
            target = min(target, segment.rows * 1.5)
        elif segment.size_bytes > desired * 1.5:
            target = min(target, segment.rows / 2)
        return learner, self._clamp(target)

    def _average(self, past: float | None, current: float) -> float:
        if past is None:
            return current
        a = self.policy.alpha
        return a * past + (1 - a) * current

    def _clamp(self, rows: float) -> int:
        return max(1, min(self.policy.max_rows, math.floor(rows)))


def _measurable(segment: CommittedSegment) -> bool:
    return not segment.forced and segment.rows > 0 and segment.size_bytes > 0
