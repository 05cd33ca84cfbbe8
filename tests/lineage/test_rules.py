"""The pure lineage rules: visibility before, during and after a replace; stale entries of a dead pusher cleaned
up by the next start; end/revert idempotent; invalid requests refused without a change."""

from __future__ import annotations

import pytest

from cuvee.lineage import LineageError, LineageState, SegmentLineage, hidden_segments
from cuvee.lineage.rules import INPUT_KEY, end_replace, previous_run, prune, revert_replace, start_replace

T = "t_OFFLINE"


def visible(all_segments: set[str], lineage: SegmentLineage) -> set[str]:
    return all_segments - hidden_segments(lineage)


def test_a_replace_switches_the_visible_set_at_once() -> None:
    old = {"a", "b"}
    started = start_replace(SegmentLineage(T), "e1", ["a", "b"], ["c"], old, 1).lineage
    assert visible(old | {"c"}, started) == {"a", "b"}  # pushed but not yet served
    done = end_replace(started, "e1", old | {"c"}, 2)
    assert done.entries["e1"].state is LineageState.COMPLETED
    assert visible(old | {"c"}, done) == {"c"}
    assert end_replace(done, "e1", old | {"c"}, 3) == done  # a retried end changes nothing


def test_end_needs_every_target_pushed() -> None:
    started = start_replace(SegmentLineage(T), "e1", [], ["c", "d"], set(), 1).lineage
    with pytest.raises(LineageError, match="not pushed"):
        end_replace(started, "e1", {"c"}, 2)


def test_a_dead_pushers_entry_is_reverted_by_the_next_start_and_its_orphans_returned() -> None:
    old = {"a"}
    dead = start_replace(SegmentLineage(T), "e1", ["a"], ["x1", "x2"], old, 1).lineage
    # x1 and x2 were pushed, then the job died; the re-run pushes x1 again (same input) and y
    result = start_replace(dead, "e2", ["a"], ["x1", "y"], old | {"x1", "x2"}, 5)
    assert result.lineage.entries["e1"].state is LineageState.REVERTED
    assert result.lineage.entries["e1"].segments_to == ("x2",)  # x1 now belongs to e2
    assert result.to_delete == ("x2",)
    assert visible(old | {"x1", "x2", "y"}, result.lineage) == {"a"}


def test_same_input_key_marks_an_entry_stale_even_without_overlap() -> None:
    first = start_replace(SegmentLineage(T), "e1", [], ["x"], set(), 1, custom={INPUT_KEY: "k"}).lineage
    result = start_replace(first, "e2", [], ["y"], {"x"}, 2, custom={INPUT_KEY: "k"})
    assert result.lineage.entries["e1"].state is LineageState.REVERTED
    assert result.to_delete == ("x",)


def test_without_force_cleanup_a_running_replace_is_a_conflict() -> None:
    first = start_replace(SegmentLineage(T), "e1", ["a"], ["x"], {"a"}, 1).lineage
    with pytest.raises(LineageError) as caught:
        start_replace(first, "e2", ["a"], ["y"], {"a", "x"}, 2, force_cleanup=False)
    assert caught.value.conflict


@pytest.mark.parametrize(("sources", "targets", "existing", "message"), [
    (["a"], ["a"], {"a"}, "both"),
    (["zz"], ["b"], {"a"}, "does not have"),
    ([], ["a"], {"a"}, "already has"),
    ([], [], set(), "both empty"),
    (["a", "a"], ["b"], {"a"}, "twice"),
])
def test_invalid_starts_are_refused(sources: list[str], targets: list[str], existing: set[str], message: str) -> None:
    with pytest.raises(LineageError, match=message):
        start_replace(SegmentLineage(T), "e", sources, targets, existing, 1)


def test_revert_restores_the_old_set_and_refuses_when_sources_are_gone() -> None:
    done = end_replace(start_replace(SegmentLineage(T), "e1", ["a"], ["b"], {"a"}, 1).lineage, "e1", {"a", "b"}, 2)
    reverted = revert_replace(done, "e1", {"a", "b"}, 3)
    assert visible({"a", "b"}, reverted) == {"a"}
    with pytest.raises(LineageError, match="already deleted"):
        revert_replace(done, "e1", {"b"}, 3)


def test_prune_and_previous_run() -> None:
    lineage = start_replace(SegmentLineage(T), "e1", [], ["x"], set(), 1, custom={INPUT_KEY: "k"}).lineage
    lineage = end_replace(lineage, "e1", {"x"}, 2)
    assert previous_run(lineage, "k", {"x"}) == ("x",)
    assert previous_run(lineage, "other", {"x"}) == ()
    assert prune(lineage, {"x"}) == lineage
    assert prune(lineage, set()).entries == {}


def test_a_name_an_older_entry_let_go_of_can_be_pushed_anew_and_is_visible() -> None:
    # a replace A→B reverted (B deleted), then the same deterministic names pushed again
    lineage = start_replace(SegmentLineage("t"), "e1", ["A"], ["B"], {"A"}, 1).lineage
    lineage = revert_replace(lineage, "e1", {"A", "B"}, 2)
    lineage = start_replace(lineage, "e2", ["A"], ["B"], {"A"}, 3).lineage
    lineage = end_replace(lineage, "e2", {"A", "B"}, 4)
    assert visible({"A", "B"}, lineage) == {"B"}  # e1 no longer hides B
    # retention expired B; an unchanged re-run pushes B again: the completed e2 lets go of the missing name
    lineage = start_replace(lineage, "e3", [], ["B"], {"A"}, 5).lineage
    lineage = end_replace(lineage, "e3", {"A", "B"}, 6)
    assert visible({"A", "B"}, lineage) == {"B"}
    assert "B" not in lineage.entries["e2"].segments_to
    with pytest.raises(LineageError, match="already owns"):  # but a name that still exists stays its owner's
        start_replace(lineage, "e4", [], ["B"], {"A", "B"}, 7)


def test_segments_lineage_already_hides_cannot_be_replaced_again() -> None:
    """Two jobs planned over the same segments: the second to start after the first completed would add the
    rows a second time; it is refused (and so is replacing abandoned segments)."""
    old = {"a", "b"}
    first = end_replace(start_replace(SegmentLineage(T), "e1", ["a", "b"], ["m1"], old, 1).lineage, "e1",
                        old | {"m1"}, 2)
    with pytest.raises(LineageError, match="already hides: a, b") as raised:
        start_replace(first, "e2", ["a", "b"], ["m2"], old | {"m1"}, 3)
    assert raised.value.conflict
    abandoned = revert_replace(start_replace(first, "e3", ["m1"], ["n1"], old | {"m1"}, 4).lineage, "e3",
                               old | {"m1", "n1"}, 5)
    with pytest.raises(LineageError, match="already hides: n1"):
        start_replace(abandoned, "e4", ["n1"], ["n2"], old | {"m1", "n1"}, 6)


def test_a_maintenance_run_cleans_up_after_its_own_kind_only() -> None:
    """A merge job must not revert a user's push in progress over the same segments (409); a dead merge run's
    entry is its rerun's to revert."""
    old = {"a", "b"}
    user = start_replace(SegmentLineage(T), "u", ["a", "b"], ["r1"], old, 1).lineage
    with pytest.raises(LineageError, match="not MergeRollupTask runs") as raised:
        start_replace(user, "m", ["a"], ["m1"], old | {"r1"}, 2, custom={"taskType": "MergeRollupTask"})
    assert raised.value.conflict
    dead = start_replace(SegmentLineage(T), "m1", ["a", "b"], ["x"], old, 1,
                         custom={"taskType": "MergeRollupTask"}).lineage
    rerun = start_replace(dead, "m2", ["a", "b"], ["y"], old | {"x"}, 2, custom={"taskType": "MergeRollupTask"})
    assert rerun.lineage.entries["m1"].state is LineageState.REVERTED and rerun.to_delete == ("x",)


def test_a_batch_run_merged_away_stays_known_through_every_merge() -> None:
    """An APPEND re-run over input K after a merge took K's segments: ``merged_runs`` says so (the re-run is
    refused instead of adding K's rows twice), also once the replaced segments are deleted and the merged ones
    merged again."""
    from cuvee.lineage.rules import merged_runs

    k = {INPUT_KEY: "K"}
    run = end_replace(start_replace(SegmentLineage(T), "i", [], ["s1", "s2"], set(), 1, custom=k).lineage, "i",
                      {"s1", "s2"}, 2)
    assert merged_runs(run, "K") == ()
    merge = {"taskType": "MergeRollupTask"}
    hour = end_replace(start_replace(run, "m1", ["s1", "s2", "o"], ["h1"], {"s1", "s2", "o"}, 3,
                                     custom=merge).lineage, "m1", {"s1", "s2", "o", "h1"}, 4)
    assert merged_runs(hour, "K") == ("s1", "s2")
    day = end_replace(start_replace(hour, "m2", ["h1", "h2"], ["d1"], {"h1", "h2"}, 5, custom=merge).lineage, "m2",
                      {"h1", "h2", "d1"}, 6)
    pruned = prune(day, {"d1"})  # retention deleted everything replaced: s1, s2, o, h1, h2
    assert set(pruned.entries) == {"i", "m1", "m2"} and merged_runs(pruned, "K") == ("s1", "s2")
    assert set(prune(day, set()).entries) == set()  # the merged rows are gone too: nothing left to protect
