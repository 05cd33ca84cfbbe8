"""When one server answers a query whole (the broker merging nothing): the same rule for the query and for its
EXPLAIN PLAN FOR, which showed ``merge:none`` and the whole-query SQL for a query that bounds its groups (and so
runs as partials)."""

from __future__ import annotations

from cuvee.broker.handler import _Asked, answered_whole
from cuvee.query import plan_sql
from tests.query.helpers import resolve

GROUPED = "SELECT city, COUNT(*) FROM events GROUP BY city"


def test_one_server_answers_whole_unless_the_query_bounds_its_groups() -> None:
    plan = plan_sql(GROUPED, resolve)
    assert plan.whole_sql is not None
    assert answered_whole(plan, [1], _Asked.of({}))
    assert not answered_whole(plan, [2], _Asked.of({})) and not answered_whole(plan, [1, 1], _Asked.of({}))
    for option in ("numGroupsLimit", "minServerGroupTrimSize"):
        assert not answered_whole(plan, [1], _Asked.of({option: "5"}))


def test_explain_reads_the_bound_from_the_querys_own_options() -> None:
    """EXPLAIN has only the query's text: its SET statements and OPTION(...) are in the plan's options."""
    for sql in (f"SET numGroupsLimit = 5; {GROUPED}", f"{GROUPED} OPTION(minServerGroupTrimSize=3)"):
        plan = plan_sql(sql, resolve)
        assert not answered_whole(plan, [1], _Asked.of(plan.options))
