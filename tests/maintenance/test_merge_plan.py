"""MergeRollupTask planning with a fake clock: windows, buffers, watermarks, levels, task sizes."""

from __future__ import annotations

from cuvee.maintenance.config import MergeLevel, MergeRollupConfig, MergeType
from cuvee.maintenance.merge_plan import MergeTask, SegmentSpan, merged_level, plan_merges

H, D = 3_600_000, 86_400_000


def hourly(**overrides: object) -> MergeLevel:
    return MergeLevel(**{"name": "1hour", "bucket_ms": H, "buffer_ms": H, **overrides})  # type: ignore[arg-type]


def seg(name: str, start: int, docs: int = 10, end: int | None = None) -> SegmentSpan:
    return SegmentSpan(name, start, start + 1000 if end is None else end, docs)


def test_due_windows_in_order_with_buffer_and_watermark() -> None:
    config = MergeRollupConfig((hourly(max_parallel_buckets=5),))
    segments = [seg("a", 0), seg("b", 10), seg("c", H + 5), seg("d", H + 6), seg("e", 5 * H)]
    plan = plan_merges(config, segments, {}, now_ms=3 * H)  # windows end ≤ now - buffer = 2h
    assert [(t.window_start_ms, t.segments) for t in plan.tasks] == [(0, ("a", "b")), (H, ("c", "d"))]
    assert plan.watermarks == {"1hour": 2 * H}
    merged = [seg(MergeTask("1hour", w, w + H, (), 0).name_prefix + f"t_{w}", w) for w in (0, H)]
    again = plan_merges(config, merged + segments[-1:], {"1hour": 2 * H}, now_ms=3 * H)  # once swapped in
    assert again.tasks == () and again.watermarks == {}  # nothing due, the watermark stays
    later = plan_merges(config, merged + segments[-1:], {"1hour": 2 * H}, now_ms=100 * H)
    # empty windows 2h..5h are jumped over at once; 5h holds one segment: concat leaves it alone
    assert later.tasks == () and later.watermarks == {"1hour": 99 * H}


def test_parallel_bucket_limit_and_task_size() -> None:
    config = MergeRollupConfig((hourly(max_records_per_task=25),))
    segments = [seg("a", 0), seg("b", 1), seg("c", 2), seg("d", H), seg("e", H + 1)]
    plan = plan_merges(config, segments, {}, now_ms=50 * H)
    assert [t.segments for t in plan.tasks] == [("a", "b"), ("c",)]  # one bucket a run; ≤ 25 rows a task
    assert plan.watermarks == {"1hour": H}


def test_a_single_segment_is_rolled_up_but_not_concatenated() -> None:
    rollup = MergeRollupConfig((hourly(merge_type=MergeType.ROLLUP),))
    plan = plan_merges(rollup, [seg("a", 0)], {}, now_ms=10 * H)
    assert [t.segments for t in plan.tasks] == [("a",)]


def test_higher_levels_wait_for_the_level_below_and_skip_merged_segments() -> None:
    day = MergeLevel("1day", D, H, max_parallel_buckets=3)
    config = MergeRollupConfig((hourly(max_parallel_buckets=100), day))
    first = MergeTask("1hour", 0, H, ("a", "b"), 20)
    names = [first.name_prefix + "sales_0_1_0_x", first.name_prefix + "sales_2_3_0_x"]
    assert all(merged_level(n, config.levels) == 0 for n in names) and merged_level("sales_0_1_0_x", config.levels) == -1
    segments = [seg(names[0], 0), seg(names[1], 2), seg("late", 30 * H), seg("big", D + 1)]
    no_lower = plan_merges(config, segments, {}, now_ms=10 * D)
    # the day level waits for a first hour watermark; the hours hold one unmerged segment each (concat: left)
    assert no_lower.tasks == () and "1day" not in no_lower.watermarks and no_lower.watermarks["1hour"] > 30 * H
    plan = plan_merges(config, segments, {"1hour": D + H}, now_ms=10 * D)
    days = [t for t in plan.tasks if t.level == "1day"]
    assert [t.segments for t in days] == [tuple(names)]  # day 1 (window ends at 2d) is not passed by 1hour yet
    assert plan.watermarks["1day"] == D
    hours = [t for t in plan.tasks if t.level == "1hour"]
    assert hours == []  # from 1d+1h on: "late" alone in its hour (concat), "big" is before the watermark


def test_input_digest_names_are_stable() -> None:
    a = MergeTask("1hour", 0, H, ("x", "y"), 2)
    assert a.name_prefix == MergeTask("1hour", 0, H, ("y", "x"), 2).name_prefix
    assert a.name_prefix != MergeTask("1hour", 0, H, ("x", "z"), 2).name_prefix
    assert a.name_prefix.startswith("merged_1hour_")


def test_segments_reaching_a_window_the_watermark_passed_are_merged_without_moving_it() -> None:
    """A backfill pushed over several runs: the first run saw one segment of the 0h window (concat: no merge) and
    moved on; the segments that arrive later are merged with it, and the watermark stays."""
    config = MergeRollupConfig((hourly(max_parallel_buckets=2),))
    first = plan_merges(config, [seg("a", 0)], {}, now_ms=10 * H)
    assert first.tasks == () and first.watermarks == {"1hour": 9 * H}
    late = [seg("a", 0), seg("b", 5), seg("c", 2 * H), seg("d", 3 * H), seg("e", 3 * H + 1), seg("f", 4 * H),
            seg("g", 4 * H + 9)]
    plan = plan_merges(config, late, {"1hour": 9 * H}, now_ms=10 * H)
    # oldest first, two windows a run (the bucket budget): 0h and 3h; c is alone in 2h (concat leaves it)
    assert [(t.window_start_ms, t.segments) for t in plan.tasks] == [(0, ("a", "b")), (3 * H, ("d", "e"))]
    assert plan.watermarks == {}
    merged = MergeTask("1hour", 0, H, ("a", "b"), 20).name_prefix + "t_0_5_0_x"
    rest = plan_merges(config, [seg(merged, 0), seg("c", 2 * H), seg(MergeTask("1hour", 3 * H, 4 * H, ("d", "e"), 20)
                                                                     .name_prefix + "t_3_3_0_x", 3 * H),
                                seg("f", 4 * H), seg("g", 4 * H + 9)], {"1hour": 9 * H}, now_ms=10 * H)
    assert [t.segments for t in rest.tasks] == [("f", "g")]  # merged outputs are never merged again at their level
    rollup = MergeRollupConfig((hourly(merge_type=MergeType.ROLLUP),))
    assert [t.segments for t in plan_merges(rollup, [seg("c", 2 * H)], {"1hour": 9 * H}, now_ms=10 * H).tasks] == \
        [("c",)]  # a rollup rolls a late segment up alone, as it would have on time


def test_a_segment_a_lower_level_merges_in_a_run_is_not_merged_by_a_higher_one_too() -> None:
    """A backfill into an hour the hour level passed but the day level did not: the hour level takes it late, the
    day level leaves it to the next run (a swap naming a segment twice is refused: the task would stay stuck)."""
    config = MergeRollupConfig((hourly(max_parallel_buckets=5), MergeLevel("1day", D, H, max_parallel_buckets=5)))
    for marks in ({"1hour": D + H}, {"1hour": 3 * D, "1day": 2 * D}):
        plan = plan_merges(config, [seg("x", 5), seg("y", 6)], marks, now_ms=10 * D)
        assert [(t.level, t.segments) for t in plan.tasks] == [("1hour", ("x", "y"))]
        assert len(plan.segments) == len(set(plan.segments))
