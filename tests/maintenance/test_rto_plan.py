"""RealtimeToOfflineSegmentsTask planning with a fake clock: buffers, the committed segments' coverage per
partition, empty windows, windows an earlier run moved, offline rows from elsewhere, time units."""

from __future__ import annotations

from cuvee.cluster.records import SegmentRecord, SegmentStatus
from cuvee.lineage.model import LineageEntry, LineageState, SegmentLineage
from cuvee.maintenance.config import RealtimeToOfflineConfig
from cuvee.maintenance.merge_plan import SegmentSpan
from cuvee.maintenance.rto_plan import (MoveWindow, coverage_limit, moved_windows, output_window, plan_moves,
                                        realtime_segments, window_bounds, window_key)
from cuvee.maintenance.rto_plan import RealtimeSegment as Seg

H, D = 3_600_000, 86_400_000
DAILY = RealtimeToOfflineConfig(bucket_ms=D, buffer_ms=H)
NOW = 100 * D


def done(name: str, partition: int, sequence: int, start: int, end: int, offsets: tuple[int, int],
         docs: int = 10) -> Seg:
    return Seg(name, partition, sequence, True, start, end, docs, offsets[0], offsets[1])


def consuming(name: str, partition: int, sequence: int, start_offset: int) -> Seg:
    return Seg(name, partition, sequence, False, None, None, 0, start_offset, None)


def two_partitions() -> list[Seg]:
    """Partition 0 has committed rows of days 0..3 (the last segment reaches into day 3 past the buffer),
    partition 1 of days 0..2; both consume on."""
    return [done("a0", 0, 0, 5, D + 5, (0, 100)), done("a1", 0, 1, D + 6, 3 * D + H + 7, (100, 200)),
            consuming("a2", 0, 2, 200),
            done("b0", 1, 0, 7, 2 * D + H + 9, (0, 100)), consuming("b1", 1, 1, 100)]


def test_windows_wait_for_the_buffer_and_for_every_partitions_committed_rows() -> None:
    segments = two_partitions()
    busy = {0: 250, 1: 150}  # rows upstream past the committed ones in both partitions
    plan = plan_moves(DAILY, segments, busy, [], [], None, NOW)
    # the first run starts at the oldest committed row's day; partition 1's rows reach 2d+1h+9, less the buffer
    # 2d+9: days 0 and 1 only
    assert [(w.start_ms, w.end_ms) for w in plan.windows] == [(0, D), (D, 2 * D)]
    assert plan.windows[0].segments == ("a0", "b0") and plan.windows[1].segments == ("a0", "b0", "a1")
    assert plan.watermark == 2 * D and "partition 1 has rows not committed yet" in plan.waiting

    # the buffer: day 1 ends at 2d, due only from 2d + 1h
    early = plan_moves(DAILY, segments, busy, [], [], None, 2 * D + H - 1)
    assert [w.start_ms for w in early.windows] == [0] and "bufferTimePeriod" in early.waiting
    # from the stored watermark on
    again = plan_moves(DAILY, segments, busy, [], [], 2 * D, NOW)
    assert again.windows == () and again.watermark == 2 * D


def test_an_idle_partition_does_not_hold_windows_back_but_an_unknown_one_does() -> None:
    segments = two_partitions()
    idle = plan_moves(DAILY, segments, {0: 250, 1: 100}, [], [], None, NOW)  # partition 1: nothing past b0
    assert [w.start_ms for w in idle.windows] == [0, D, 2 * D]  # partition 0's rows reach 3d+1h+7
    unknown = plan_moves(DAILY, segments, {0: 200}, [], [], None, NOW)  # partition 1's offset is not known
    assert [w.start_ms for w in unknown.windows] == [0, D] and "unknown" in unknown.waiting
    every = plan_moves(DAILY, segments, {0: 200, 1: 100}, [], [], None, NOW)  # nothing uncommitted anywhere
    assert [w.start_ms for w in every.windows] == [0, D, 2 * D, 3 * D]
    assert every.watermark == 99 * D  # the empty days after them are jumped over up to the buffer


def test_a_partition_whose_rows_are_all_still_consuming_blocks_every_window() -> None:
    segments = [*two_partitions(), consuming("c0", 2, 0, 0)]
    plan = plan_moves(DAILY, segments, {0: 200, 1: 100, 2: 5}, [], [], None, NOW)
    assert plan.windows == () and plan.watermark == 0 and "partition 2" in plan.waiting


def test_a_consuming_segment_that_may_hold_the_windows_rows_blocks_it_unlike_pinot() -> None:
    """Pinot checks only partitions whose last completed segment overlaps the window: partition 1's consuming
    segment may hold day-5 rows although its last completed segment ended on day 2."""
    segments = [done("a0", 0, 0, 5 * D, 6 * D + H + 1, (0, 10)), consuming("a1", 0, 1, 10),
                done("b0", 1, 0, 2 * D, 2 * D + 5, (0, 10)), consuming("b1", 1, 1, 10)]
    plan = plan_moves(DAILY, segments, {0: 11, 1: 11}, [], [], 5 * D, NOW)
    assert plan.windows == () and "partition 1" in plan.waiting
    ready = plan_moves(DAILY, segments, {0: 11, 1: 10}, [], [], 5 * D, NOW)
    assert [w.start_ms for w in ready.windows] == [5 * D]


def test_empty_windows_are_jumped_over_at_once() -> None:
    hourly = RealtimeToOfflineConfig(bucket_ms=1000, buffer_ms=1000)  # one-second buckets over 10 years
    years = 3650 * D
    segments = [done("old", 0, 0, 0, 10, (0, 1)), done("new", 0, 1, years + 500, years + 2500, (1, 2))]
    plan = plan_moves(hourly, segments, {0: 2}, [], [], None, years + 10 * D)
    assert [(w.start_ms, w.segments) for w in plan.windows] == [(0, ("old",)), (years, ("new",)),
                                                               (years + 1000, ("new",)),
                                                               (years + 2000, ("new",))]
    assert plan.skipped == 2 and plan.watermark == years + 10 * D - 1000  # the last empty run up to the buffer
    nothing = plan_moves(hourly, [], {}, [], [], None, NOW)
    assert nothing.windows == () and nothing.watermark is None and "no committed" in nothing.waiting


def test_windows_an_earlier_run_moved_and_offline_rows_from_elsewhere_are_skipped() -> None:
    segments = two_partitions()
    quiet = {0: 200, 1: 100}
    lineage = SegmentLineage("t_OFFLINE", {
        "e1": LineageEntry((), ("rto_0_86400000_t_1_2_0_x",), LineageState.COMPLETED, 1,
                           {"inputKey": window_key(0, D), "taskType": "RealtimeToOfflineSegmentsTask"}),
        "e2": LineageEntry((), ("rto_86400000_172800000_t_1_2_0_y",), LineageState.IN_PROGRESS, 2,
                           {"inputKey": window_key(D, 2 * D)}),
        "e3": LineageEntry(("x",), ("y",), LineageState.COMPLETED, 3, {"inputKey": "/data/*.parquet"})})
    assert moved_windows(lineage, ["rto_172800000_259200000_t_5_6_0_z", "sales_1_2_0"]) == [(0, D), (2 * D, 3 * D)]
    plan = plan_moves(DAILY, segments, quiet, [], [(0, D), (2 * D, 3 * D)], None, NOW)
    assert [w.start_ms for w in plan.windows] == [D, 3 * D]  # the dead run's day 1 again
    assert plan.skipped == 3  # days 0 and 2 moved, days 4..98 empty
    # a batch push holds rows up to day 1 + 100 ms: the task moves the rest of day 1 (a shorter first window),
    # so no realtime row between them and day 2 is left below the time boundary; then whole days
    pushed = [SegmentSpan("sales_batch", 0, D + 100, 50), SegmentSpan("rto_0_86400000_t_x", 0, 5, 5)]
    after = plan_moves(DAILY, segments, quiet, pushed, [], None, NOW)
    assert [(w.start_ms, w.end_ms) for w in after.windows] == [(D + 101, 2 * D), (2 * D, 3 * D), (3 * D, 4 * D)]
    assert plan_moves(DAILY, segments, quiet, pushed, [], D + 101, NOW).windows == after.windows  # stored so


def test_a_run_moves_at_most_max_windows() -> None:
    plan = plan_moves(DAILY, two_partitions(), {0: 200, 1: 100}, [], [], None, NOW, max_windows=2)
    assert [w.start_ms for w in plan.windows] == [0, D] and plan.watermark == 2 * D and "at most" in plan.waiting


def test_window_bounds_in_the_time_columns_units() -> None:
    assert window_bounds(D, 2 * D, 1.0) == (D, 2 * D)
    assert window_bounds(D, 2 * D, 1000.0) == (86_400, 172_800)  # seconds
    assert window_bounds(D, 2 * D, float(D)) == (1, 2)  # days
    assert window_bounds(H, 2 * H, float(D)) == (1, 1)  # no whole day starts inside an hour: empty
    assert window_bounds(1500, 2500, 1000.0) == (2, 3)  # the value 2 (2000 ms) only


def test_names_and_keys() -> None:
    window = MoveWindow(D, 2 * D, ("a",), 1)
    assert window.name_prefix == "rto_86400000_172800000_"
    assert output_window(window.name_prefix + "t_1_2_0") == (D, 2 * D)
    assert output_window("merged_1hour_abc_t_1_2") is None
    assert window.input_key == "RealtimeToOfflineSegmentsTask:86400000-172800000"


def test_realtime_segments_from_records() -> None:
    records = {
        "t__0__0__20260101T0000Z": SegmentRecord("t__0__0__20260101T0000Z", SegmentStatus.DONE, 0, 0, 0, 0, 10,
                                                 total_docs=10, time_min=5, time_max=9),
        "t__0__1__20260101T0100Z": SegmentRecord("t__0__1__20260101T0100Z", SegmentStatus.IN_PROGRESS, 0, 0, 1, 10),
    }
    found = realtime_segments(records, {**records, "gone": {}}, 1000.0)
    assert found == [Seg("t__0__0__20260101T0000Z", 0, 0, True, 5000, 9000, 10, 0, 10),
                     Seg("t__0__1__20260101T0100Z", 0, 1, False, None, None, 0, 10, None)]
    assert coverage_limit(found, {0: 10}, NOW, 0) == (None, "")
    assert coverage_limit(found, {0: 12}, NOW, 0)[0] == 9000
    assert coverage_limit(found, {0: 12}, NOW, 1000)[0] == 8000  # less bufferTimePeriod
    assert coverage_limit(found, {0: 12}, 7000, 1000)[0] == 6000  # never past now
    hidden = realtime_segments(records, records, 1000.0, frozenset({"t__0__0__20260101T0000Z"}))
    assert [s.name for s in hidden] == ["t__0__1__20260101T0100Z"]  # lineage hides it: not the half's rows


def test_a_row_late_by_less_than_the_buffer_is_never_left_in_a_consuming_segment() -> None:
    """A review found a partition counted as covering a window once its committed rows reached the window's end:
    a row 6 minutes late landing just after a commit stayed in the consuming segment while its window moved, and
    was then hidden below the time boundary for good. Now a consuming partition covers only up to its committed
    rows' newest time less bufferTimePeriod."""
    minute = 60_000
    segments = [done("a0", 0, 0, 0, D + 30 * minute, (0, 10)), consuming("a1", 0, 1, 10)]  # a1: a row of D - 6 min
    plan = plan_moves(DAILY, segments, {0: 11}, [], [], None, NOW)
    assert plan.windows == () and "partition 0" in plan.waiting  # day 0 waits: 1d+30min - 1h < 1d
    later = [done("a0", 0, 0, 0, D + 30 * minute, (0, 10)), done("a1", 0, 1, D - 6 * minute, D + H, (10, 20)),
             consuming("a2", 0, 2, 20)]
    assert [w.segments for w in plan_moves(DAILY, later, {0: 21}, [], [], None, NOW).windows] == [("a0", "a1")]


def test_a_row_from_a_clock_years_ahead_does_not_let_every_window_move() -> None:
    segments = [done("a0", 0, 0, 0, 40_000 * D, (0, 10)), consuming("a1", 0, 1, 10)]  # one row in the far future
    plan = plan_moves(DAILY, segments, {0: 11}, [], [], None, 10 * D)
    assert plan.watermark is not None and plan.watermark <= 10 * D - H  # not past now less the buffer


def test_windows_no_value_of_a_coarse_time_column_lies_in_are_jumped_over() -> None:
    """Hourly windows over a DAYS column: only the first hour of a day holds a value (the day itself); a review
    found the other 23 ran Spark tasks that read whole segments for nothing."""
    hourly = RealtimeToOfflineConfig(bucket_ms=H, buffer_ms=H)
    segments = [done("a0", 0, 0, 0, 2 * D, (0, 10))]  # day values 0, 1, 2 (in ms: 0, D, 2D)
    plan = plan_moves(hourly, segments, {0: 10}, [], [], None, 10 * D, step_ms=float(D))
    assert [w.start_ms for w in plan.windows] == [0, D, 2 * D]
    assert plan_moves(hourly, segments, {0: 10}, [], [], None, 10 * D).windows[1].start_ms == H  # in ms: every hour
