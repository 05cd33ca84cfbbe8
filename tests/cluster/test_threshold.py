from __future__ import annotations

import math

import pytest

from cuvee.cluster.threshold import CommittedSegment, SizeLearner, SizePolicy

MB = 1_000_000
POLICY = SizePolicy(desired_size_bytes=100 * MB, initial_rows=100_000, alpha=0.9, learning=0)


def test_before_learning_the_initial_rows_are_used() -> None:
    assert SizeLearner(POLICY).first_threshold() == 100_000


def test_learns_bytes_per_row_as_an_exponential_average() -> None:
    learner, rows = SizeLearner(POLICY).on_commit(CommittedSegment(0, 100_000, 50 * MB, 100_000))
    assert learner.bytes_per_row == 500
    assert rows == 200_000  # 100 MB / 500 B
    learner, rows = learner.on_commit(CommittedSegment(0, 200_000, 120 * MB, 200_000))
    assert learner.bytes_per_row == pytest.approx(0.9 * 500 + 0.1 * 600)
    assert rows == 196_078  # floor(100 MB / 510 B)
    assert learner.first_threshold() == 196_078  # a partition added now starts at the learned size


def test_only_the_learning_partition_moves_the_ratio() -> None:
    learner = SizeLearner(POLICY, bytes_per_row=510.0)
    after, rows = learner.on_commit(CommittedSegment(3, 100, 1000, 100))
    assert after.bytes_per_row == 510.0
    assert rows == 150  # far below half the desired size: grow 1.5x, not straight to 196,078


def test_a_segment_ending_by_time_pulls_the_threshold_to_its_row_count() -> None:
    learner = SizeLearner(POLICY, bytes_per_row=510.0)
    after, rows = learner.on_commit(CommittedSegment(0, 50_000, 25_500_000, 196_078))
    assert after.bytes_per_row == pytest.approx(510.0)
    assert rows == 55_000  # 1.1 x 50,000 rows


def test_an_oversized_segment_halves_the_next() -> None:
    learner = SizeLearner(POLICY, bytes_per_row=510.0)
    _, rows = learner.on_commit(CommittedSegment(1, 200_000, 200 * MB, 200_000))
    assert rows == 100_000


def test_before_learning_other_partitions_use_their_own_ratio_without_storing_it() -> None:
    after, rows = SizeLearner(POLICY).on_commit(CommittedSegment(2, 100_000, 100 * MB, 100_000))
    assert after.bytes_per_row is None
    assert rows == 100_000  # 100 MB / 1000 B


@pytest.mark.parametrize(
    "segment", [CommittedSegment(0, 10, 100, 77, forced=True), CommittedSegment(0, 10, 0, 77), CommittedSegment(0, 0, 5, 77)]
)
def test_forced_or_sizeless_commits_keep_the_threshold_and_learn_nothing(segment: CommittedSegment) -> None:
    learner = SizeLearner(POLICY, bytes_per_row=5.0)
    assert learner.on_commit(segment) == (learner, 77)


def test_converges_to_the_desired_size() -> None:
    learner, rows = SizeLearner(POLICY), POLICY.initial_rows
    for _ in range(80):
        learner, rows = learner.on_commit(CommittedSegment(0, rows, rows * 400, rows))
    assert learner.bytes_per_row == pytest.approx(400)
    assert rows == pytest.approx(250_000, rel=0.01)


def test_thresholds_stay_within_bounds() -> None:
    policy = SizePolicy(desired_size_bytes=10**15, initial_rows=10, max_rows=1_000_000)
    _, rows = SizeLearner(policy, bytes_per_row=1.0).on_commit(CommittedSegment(0, 800_000, 500_000_000_000_000, 800_000))
    assert rows == 1_000_000
    _, rows = SizeLearner(POLICY, bytes_per_row=1e12).on_commit(CommittedSegment(0, 1, 10**12, 1))
    assert rows == 1


@pytest.mark.parametrize("alpha", [0.5, 0.3, 1.0])
def test_alpha_must_weigh_the_past_more(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        SizePolicy(desired_size_bytes=1, alpha=alpha)
    with pytest.raises(ValueError, match="desired"):
        SizePolicy(desired_size_bytes=0)


def test_before_the_size_is_known_the_learned_ratio_or_the_current_threshold_is_used() -> None:
    assert SizeLearner(POLICY).threshold_before_size(70_000) == 70_000
    learner, _ = SizeLearner(POLICY).on_commit(CommittedSegment(0, 100_000, 50 * MB, 100_000))
    assert learner.threshold_before_size(70_000) == 200_000  # 100 MB / 500 B


def test_by_default_each_partition_learns_its_width_and_a_shared_shift_moves_every_partition_at_once() -> None:
    learner = SizeLearner(SizePolicy(desired_size_bytes=100 * MB, initial_rows=100_000, alpha=0.75))
    widths = {0: 500.0, 1: 1600.0}  # partition 1's rows 3.2x wider than partition 0's
    thresholds = {0: 100_000, 1: 100_000}

    def rounds(n: int) -> None:
        nonlocal learner
        for _ in range(n):
            for p, width in widths.items():
                rows = thresholds[p]
                learner, thresholds[p] = learner.on_commit(CommittedSegment(p, rows, int(rows * width), rows))

    rounds(20)
    assert learner.rate(0) == pytest.approx(500, rel=0.05) and learner.rate(1) == pytest.approx(1600, rel=0.05)
    assert thresholds[0] == pytest.approx(200_000, rel=0.05) and thresholds[1] == pytest.approx(62_500, rel=0.05)
    widths = {0: 1000.0, 1: 3200.0}  # a shift both partitions see: rows twice as wide
    rounds(5)
    assert learner.rate(0) == pytest.approx(1000, rel=0.15) and learner.rate(1) == pytest.approx(3200, rel=0.15)
    assert learner.first_threshold(7) == math.floor(100 * MB / learner.bytes_per_row)  # a newcomer: the table's R
    moved = learner.with_rates(1000.0, {0: 1000.0, 1: 3200.0})  # a new leader's, from segment metadata
    assert moved.rate(1) == pytest.approx(3200) and moved.rate(5) == pytest.approx(1000)


def test_all_keeps_one_rate_learned_from_every_partition() -> None:
    learner = SizeLearner(SizePolicy(desired_size_bytes=100 * MB, initial_rows=100_000, alpha=0.75, learning="all"),
                          bytes_per_row=500.0)
    after, _ = learner.on_commit(CommittedSegment(3, 100_000, 60 * MB, 100_000))
    assert after.bytes_per_row == pytest.approx(0.75 * 500 + 0.25 * 600) and after.rate(3) == after.bytes_per_row
    with pytest.raises(ValueError):
        SizePolicy(desired_size_bytes=1, learning="some")
