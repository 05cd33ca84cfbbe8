from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cuvee.cluster.assignment import (
    assign_partition,
    complete_in_ideal_state,
    eligible_instances,
    mark_committing,
    mark_done,
    next_segment_name,
    next_segment_record,
    plan_consuming_segments,
    rows_per_segment,
    server_tag,
    start_successor_in_ideal_state,
)
from cuvee.cluster.errors import AssignmentError, RequirementFailedError
from cuvee.cluster.records import IdealState, InstanceInfo, SegmentState, SegmentStatus
from cuvee.protocol.segment_name import LLCSegmentName

T = "events_REALTIME"
NOW = int(datetime(2026, 11, 21, 16, 47, 30, tzinfo=UTC).timestamp() * 1000)
C, O = SegmentState.CONSUMING, SegmentState.ONLINE


def test_eligible_instances_are_live_tagged_and_sorted() -> None:
    tag = server_tag("DefaultTenant")
    assert tag == "DefaultTenant_REALTIME"
    infos = [
        InstanceInfo("s3", "h", tags=(tag,)),
        InstanceInfo("s1", "h", tags=(tag, "other")),
        InstanceInfo("s2", "h", tags=("other",)),
        InstanceInfo("s4", "h", tags=(tag,)),
    ]
    assert eligible_instances(infos, {"s1", "s2", "s3"}, tag) == ["s1", "s3"]


def test_round_robin_like_pinot() -> None:
    servers = ["s0", "s1", "s2"]
    assert [assign_partition(p, 2, servers) for p in range(4)] == [
        ("s0", "s1"),
        ("s2", "s0"),
        ("s1", "s2"),
        ("s0", "s1"),
    ]


def test_fewer_servers_than_replicas_is_a_clear_error() -> None:
    with pytest.raises(AssignmentError, match=r"cannot place 3 replicas on 2 tagged live server\(s\) \(s0, s1\)"):
        assign_partition(0, 3, ["s0", "s1"])
    with pytest.raises(AssignmentError, match="none"):
        plan_consuming_segments(T, {0: 0}, 1, [], NOW, flush_rows=100)


@given(
    partitions=st.integers(min_value=1, max_value=40),
    replicas=st.integers(min_value=1, max_value=5),
    extra=st.integers(min_value=0, max_value=6),
    data=st.data(),
)
def test_spread_is_even_distinct_and_order_independent(partitions: int, replicas: int, extra: int, data: st.DataObject) -> None:
    servers = [f"server_{i:02d}" for i in range(replicas + extra)]
    shuffled = data.draw(st.permutations(servers))
    plan = plan_consuming_segments(T, {p: 0 for p in range(partitions)}, replicas, shuffled, NOW, flush_rows=1_000_000)
    again = plan_consuming_segments(T, {p: 0 for p in range(partitions)}, replicas, servers, NOW, flush_rows=1_000_000)
    assert plan == again
    for replicas_of in plan.ideal_state.segments.values():
        assert len(replicas_of) == replicas  # a dict: distinct instances by construction, and none lost
    counts = plan.ideal_state.consuming_counts()
    used = [counts.get(s, 0) for s in servers]
    assert sum(used) == partitions * replicas
    assert max(used) - min(used) <= 1
    assert {r.row_threshold for r in plan.segments} == {1_000_000 // max(used)}


def test_table_creation_plan() -> None:
    plan = plan_consuming_segments(
        T, {0: 10, 1: 20, 2: 30, 3: 40}, 2, ["s2", "s0", "s1"], NOW, flush_rows=600_000, time_threshold_ms=3_600_000
    )
    assert [r.segment_name for r in plan.segments] == [f"events__{p}__0__20261121T1647Z" for p in range(4)]
    assert plan.ideal_state.segments["events__1__0__20261121T1647Z"] == {"s2": C, "s0": C}
    assert plan.ideal_state.consuming_counts() == {"s0": 3, "s1": 3, "s2": 2}
    first = plan.segments[1]
    assert (first.status, first.partition, first.sequence, first.start_offset) == (SegmentStatus.IN_PROGRESS, 1, 0, 20)
    assert (first.row_threshold, first.time_threshold_ms, first.creation_time_ms) == (200_000, 3_600_000, NOW)


def test_existing_partitions_are_kept_and_new_ones_added() -> None:
    created = plan_consuming_segments(T, {0: 0, 1: 0}, 1, ["s0", "s1"], NOW, flush_rows=100)
    grown = plan_consuming_segments(
        T, {0: 0, 1: 0, 2: 7}, 1, ["s0", "s1"], NOW + 120_000, existing=created.ideal_state, flush_rows=100
    )
    assert [r.segment_name for r in grown.segments] == ["events__2__0__20261121T1649Z"]
    assert grown.segments[0].start_offset == 7
    assert grown.segments[0].row_threshold == 50  # s0 now holds two consuming segments
    assert grown.ideal_state.segments["events__0__0__20261121T1647Z"] == {"s0": C}
    rerun = plan_consuming_segments(T, {0: 0, 1: 0, 2: 7}, 1, ["s0", "s1"], NOW, existing=grown.ideal_state, flush_rows=100)
    assert rerun.segments == () and rerun.ideal_state == grown.ideal_state


def test_autotuned_tables_take_the_learned_threshold_undivided() -> None:
    plan = plan_consuming_segments(T, {0: 0, 1: 0}, 1, ["s0"], NOW, autotuned_rows=100_000)
    assert {r.row_threshold for r in plan.segments} == {100_000}
    with pytest.raises(ValueError, match="autotuned_rows"):
        plan_consuming_segments(T, {0: 0}, 1, ["s0"], NOW)


def test_rows_per_segment_divides_by_the_busiest_instance() -> None:
    ideal = IdealState(T, {"a": {"s0": C, "s1": C}, "b": {"s0": C}, "c": {"s0": O}})
    assert rows_per_segment(1000, ideal) == 500
    assert rows_per_segment(1000, IdealState(T)) == 1000
    assert rows_per_segment(1, ideal) == 1


def _consuming() -> tuple[IdealState, LLCSegmentName]:
    plan = plan_consuming_segments(T, {0: 100, 1: 0}, 2, ["s0", "s1", "s2"], NOW, flush_rows=1000)
    return plan.ideal_state, LLCSegmentName.parse(plan.segments[0].segment_name)


def _done(end: int = 150):  # type: ignore[no-untyped-def]
    plan = plan_consuming_segments(T, {0: 100}, 1, ["s0"], NOW, flush_rows=1000)
    step1 = mark_done(end_offset=end, total_docs=end - 100, size_bytes=10, crc=5, download_uri="file:///x", now_ms=NOW + 1)
    return step1(plan.segments[0])


def test_mark_done_is_idempotent_and_guards_the_end_offset() -> None:
    done = _done()
    assert done.status is SegmentStatus.DONE and done.end_offset == 150 and done.commit_time_ms == NOW + 1
    again = mark_done(end_offset=150, total_docs=50, size_bytes=10, crc=5, download_uri="file:///x", now_ms=NOW + 9)
    assert again(done) is done
    other = mark_done(end_offset=160, total_docs=60, size_bytes=10, crc=5, download_uri="", now_ms=NOW)
    with pytest.raises(RequirementFailedError, match="already DONE at end offset 150, not 160"):
        other(done)
    backwards = mark_done(end_offset=99, total_docs=0, size_bytes=0, crc=0, download_uri="", now_ms=NOW)
    with pytest.raises(RequirementFailedError, match="before start offset 100"):
        backwards(plan_consuming_segments(T, {0: 100}, 1, ["s0"], NOW, flush_rows=9).segments[0])


def test_next_segment_starts_where_the_last_ended() -> None:
    done = _done()
    later = NOW + 3_600_000
    name = next_segment_name(done, [done.segment_name], later)
    assert name == "events__0__1__20261121T1747Z"
    nxt = next_segment_record(done, name, 400, later)
    assert (nxt.partition, nxt.sequence, nxt.start_offset, nxt.row_threshold) == (0, 1, 150, 400)
    assert nxt.status is SegmentStatus.IN_PROGRESS and nxt.creation_time_ms == later
    # a re-run a few minutes later finds the segment it created instead of naming a second one
    assert next_segment_name(done, [done.segment_name, name, "events__1__1__20261118T1200Z"], later + 600_000) == name
    with pytest.raises(RequirementFailedError, match="not DONE"):
        next_segment_record(plan_consuming_segments(T, {0: 1}, 1, ["s0"], NOW, flush_rows=9).segments[0], name, 1, NOW)
    with pytest.raises(ValueError, match="does not follow"):
        next_segment_record(done, "events__0__2__20261121T1747Z", 1, NOW)


def test_ideal_state_after_commit_moves_the_partition_on_the_same_instances() -> None:
    ideal, seg = _consuming()
    nxt = seg.next(NOW + 60_000).name
    step3 = complete_in_ideal_state(seg.name, nxt)
    after = step3(ideal)
    assert after.segments[seg.name] == {"s0": O, "s1": O}
    assert after.segments[nxt] == {"s0": C, "s1": C}
    assert after.segments["events__1__0__20261121T1647Z"] == ideal.segments["events__1__0__20261121T1647Z"]
    assert step3(after) == after
    assert complete_in_ideal_state(seg.name, None)(ideal).segments.keys() == ideal.segments.keys()
    with pytest.raises(RequirementFailedError, match="not in the ideal state"):
        complete_in_ideal_state("events__7__0__20261121T1647Z", nxt)(ideal)


def test_rows_per_segment_counts_a_partition_with_two_consuming_segments_once() -> None:
    # partition 0 mid pauseless commit (sequences 3 and 4 both CONSUMING), partition 1 consuming
    ideal = IdealState(T, {"events__0__3__20261121T1647Z": {"s0": C}, "events__0__4__20261121T1650Z": {"s0": C},
                           "events__1__2__20261121T1647Z": {"s0": C}})
    assert rows_per_segment(1000, ideal) == 500


def test_mark_committing_fixes_the_end_offset_once() -> None:
    consuming = plan_consuming_segments(T, {0: 100}, 1, ["s0"], NOW, flush_rows=1000).segments[0]
    committing = mark_committing(150, NOW + 5)(consuming)
    assert (committing.status, committing.end_offset, committing.commit_time_ms) == (SegmentStatus.COMMITTING, 150,
                                                                                      NOW + 5)
    assert committing.is_consuming  # replicas still hold it CONSUMING
    assert mark_committing(150, NOW + 9)(committing) is committing
    with pytest.raises(RequirementFailedError, match="COMMITTING at end offset 150, not 160"):
        mark_committing(160, NOW)(committing)
    with pytest.raises(RequirementFailedError, match="before start offset 100"):
        mark_committing(99, NOW)(consuming)
    # step 1 takes it to DONE at that offset only, and a late commit start changes nothing any more
    other = mark_done(end_offset=160, total_docs=60, size_bytes=1, crc=1, download_uri="", now_ms=NOW)
    with pytest.raises(RequirementFailedError, match="not 160"):
        other(committing)
    done = mark_done(end_offset=150, total_docs=50, size_bytes=1, crc=1, download_uri="", now_ms=NOW + 7)(committing)
    assert done.status is SegmentStatus.DONE and done.commit_time_ms == NOW + 7
    assert mark_committing(150, NOW + 9)(done) is done
    with pytest.raises(RequirementFailedError, match="DONE, not IN_PROGRESS"):
        mark_committing(151, NOW + 9)(done)
    # the next segment can be made from the COMMITTING record
    name = next_segment_name(committing, [committing.segment_name], NOW)
    assert next_segment_record(committing, name, 10, NOW).start_offset == 150


def test_commit_start_places_the_successor_and_leaves_the_committing_segment_consuming() -> None:
    ideal, seg = _consuming()
    nxt = seg.next(NOW + 60_000).name
    started = start_successor_in_ideal_state(seg.name, nxt)(ideal)
    assert started.segments[seg.name] == {"s0": C, "s1": C}
    assert started.segments[nxt] == {"s0": C, "s1": C}
    assert start_successor_in_ideal_state(seg.name, seg.next(NOW + 120_000).name)(started) is started  # no second
    after = complete_in_ideal_state(seg.name, nxt)(started)  # commitEnd's step 3 then only flips it ONLINE
    assert after.segments[seg.name] == {"s0": O, "s1": O} and after.segments[nxt] == started.segments[nxt]
    with pytest.raises(RequirementFailedError, match="not in the ideal state"):
        start_successor_in_ideal_state("events__7__0__20261121T1647Z", nxt)(ideal)


def test_next_consuming_segments_go_to_the_servers_tagged_now() -> None:
    from cuvee.cluster.assignment import place_on_tagged

    # The same servers: where creation put the partition (round-robin over the sorted ids).
    assert place_on_tagged(1, 2, {"a", "b", "c"}, {"a", "b", "c"})(("c", "a")) == ("c", "a")
    # A server tagged since takes its share.
    assert place_on_tagged(1, 2, {"a", "b", "c", "d"}, {"a", "b", "c", "d"})(("c", "a")) == ("c", "d")
    # A replica that is down but still tagged keeps its place; one that lost the tag does not.
    assert place_on_tagged(0, 2, {"a"}, {"a", "b"})(("a", "b")) == ("a", "b")
    assert place_on_tagged(0, 1, {"a", "c"}, {"a", "c"})(("b",)) == ("a",)
    # Too few servers: where the previous segment is.
    assert place_on_tagged(0, 3, {"a"}, {"a"})(("a", "b", "c")) == ("a", "b", "c")


def test_a_server_down_for_a_while_reshuffles_nothing_and_a_gone_one_holding_nothing_drops_out() -> None:
    from cuvee.cluster.assignment import place_on_tagged, placement_pool

    tagged = {"a", "b", "c", "d"}
    everyone = placement_pool(tagged, live={"a", "b", "c", "d"}, holding={"a", "b", "c", "d"})
    d_down = placement_pool(tagged, live={"a", "b", "c"}, holding={"a", "b", "c", "d"})
    assert d_down == everyone  # d holds segments: still in, so no partition moves while it restarts
    for partition in range(8):
        before = place_on_tagged(partition, 2, everyone, tagged)(())
        assert place_on_tagged(partition, 2, d_down, tagged)(before) == before
    assert placement_pool(tagged, live={"a", "b", "c"}, holding={"a", "b"}) == ["a", "b", "c"]  # d: gone, empty
