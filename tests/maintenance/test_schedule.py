"""The scheduler's choice: nothing twice, bounded, longest-waiting first."""

from cuvee.maintenance.schedule import Candidate, pick_launches


def test_bounded_and_longest_waiting_first() -> None:
    due = [Candidate("a", "MergeRollupTask", 500), Candidate("b", "MergeRollupTask", None),
           Candidate("c", "MergeRollupTask", 100), Candidate("d", "UpsertCompactionTask", 50)]
    assert [c.table for c in pick_launches(due, set(), 2)] == ["b", "d"]
    assert [c.table for c in pick_launches(due, {("b", "MergeRollupTask")}, 2)] == ["d"]
    assert pick_launches(due, {("x", "MergeRollupTask"), ("y", "MergeRollupTask")}, 2) == []
    assert [c.table for c in pick_launches(due, set(), 10)] == ["b", "d", "c", "a"]
