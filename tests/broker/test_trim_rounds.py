"""The broker's second round over servers that trimmed (``cuvee.broker.trim_rounds``), with servers modelled by
``run_server_step`` over their rows: what is asked again, and how the answers combine."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import replace

import pyarrow as pa
import pytest

from cuvee.broker.scatter import ServerCall, ServerReply
from cuvee.broker.trim_rounds import exact_groups
from cuvee.protocol.query import GroupLimits, ServerQueryRequest, ServerQueryStats
from cuvee.query import QueryPlan, plan_sql, run_server_step
from cuvee.query.exact_trim import decide
from cuvee.query.execute import PastDeadlineError
from tests.query.helpers import SCHEMA, resolve

SQL = "SELECT city, COUNT(*) AS c FROM events GROUP BY city ORDER BY c DESC LIMIT 1"


def _rows(counts: dict[str, int]) -> pa.Table:
    rows = [{"id": 0, "city": city, "v": 1, "d": 0.0, "ts": None} for city, n in counts.items() for _ in range(n)]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _served(plan, rows: pa.Table, limits: GroupLimits) -> ServerReply:  # type: ignore[no-untyped-def]
    """A server's answer to a request with ``limits``: trimmed to 5 × LIMIT unless asked otherwise."""
    trim = 1 if limits.min_trim_size is None else limits.min_trim_size
    table = run_server_step(plan, [rows], min_trim_size=trim, wanted=limits.wanted)
    whole = run_server_step(plan, [rows], min_trim_size=0)
    return ServerReply("s", table, ServerQueryStats(groupsTrimmed=limits.wanted is None and
                                                    table.num_rows < whole.num_rows))


def _first_round() -> tuple[QueryPlan, list[ServerCall], list[ServerReply], pa.Table, pa.Table]:
    plan = plan_sql(SQL, resolve)
    assert plan.group_trim is not None
    trim = plan.group_trim
    zero = _rows({"g1": 50, **{f"h{i}": 1 for i in range(10)}})
    one = _rows({"g1": 30, **{f"k{i}": 40 for i in range(10)}})
    limits = GroupLimits(trim.order_sql, trim.rows, trim.exact)
    calls = [ServerCall(f"s{i}", f"http://s{i}", ServerQueryRequest("1", "events_REALTIME", plan.server_sql, ("x",),
                                                                    1000, groups=limits)) for i in range(2)]
    first = [_served(plan, zero, limits), _served(plan, one, limits)]
    assert all(r.stats is not None and r.stats.groupsTrimmed for r in first)
    return plan, calls, first, zero, one


def test_the_bounding_stops_at_the_deadline_and_the_first_round_stands() -> None:
    """Bounding millions of groups takes seconds: it runs within the query's time left, and past it the first
    round's answer stands, reported as trimmed (review L4); what time is left is read after it ran."""
    plan, calls, first, _, _ = _first_round()
    assert plan.group_trim is not None and plan.group_trim.rows is not None
    with pytest.raises(PastDeadlineError):
        decide(plan.group_trim.bound, plan.group_trim.rows, [r.table for r in first], [True, True],
               time.monotonic() - 0.001)

    async def never(more: list[ServerCall]) -> list[ServerReply]:
        raise AssertionError("asked again past the deadline")

    replies, again = asyncio.run(exact_groups(plan.group_trim, calls, first, lambda: 0, never))
    assert again == 0 and replies == first
    left = iter([5_000, 1_234])  # before the bounding, then after it
    asked: list[ServerCall] = []

    async def record(more: list[ServerCall]) -> list[ServerReply]:
        asked.extend(more)
        return [ServerReply(call.instance) for call in more]

    asyncio.run(exact_groups(plan.group_trim, calls, first, lambda: next(left), record))
    assert [call.request.timeout_ms for call in asked] == [1_234]


@pytest.mark.parametrize("upsert", [False, True])
def test_a_row_that_changes_group_between_the_rounds_is_counted_once(upsert: bool) -> None:
    """Server 1 cuts g1 in the first round; before the second, one of its k0 rows is upserted into g1. Asked for g1
    alone it would count that row in g1 (second round) and in k0 (first round); on an upsert table it is asked
    untrimmed and its second answer replaces its first (review M1)."""
    plan, calls, first, zero, _ = _first_round()
    trim = plan.group_trim
    after = _rows({"g1": 31, "k0": 39, **{f"k{i}": 40 for i in range(1, 10)}})
    asked: list[ServerCall] = []

    async def ask(more: list[ServerCall]) -> list[ServerReply]:
        asked.extend(more)
        assert more and all(call.request.groups is not None for call in more)
        return [_served(plan, zero if call.instance == "s0" else after, call.request.groups)  # type: ignore[arg-type]
                for call in more]

    replies, again = asyncio.run(exact_groups(trim, calls, first, lambda: 500, ask, upsert=upsert))
    assert again == len(asked) == 1 and asked[0].instance == "s1"
    groups = asked[0].request.groups
    assert groups is not None
    assert (groups.wanted is None and groups.min_trim_size == 0) if upsert else groups.wanted is not None
    counted: Counter[str] = Counter()
    for reply in replies:
        assert reply.table is not None
        for row in reply.table.to_pylist():
            counted[row["__g0"]] += row["__p0"]
    truth = Counter(zero.column("city").to_pylist()) + Counter(after.column("city").to_pylist())
    if upsert:
        assert not counted - truth  # no group counted above its rows
        assert counted["g1"] == 81 and counted["k0"] == 39
    else:  # an append-only table's rows never change group: the wanted keys are enough (and cheaper)
        assert counted["g1"] + counted["k0"] == 81 + 40


def test_segments_another_replica_answered_are_not_asked_again() -> None:
    """Server s1 no longer held segment b (another replica, s2, answered it): its second-round call lists only the
    segments it answered, so it does not report b missing again (review L5)."""
    plan, calls, first, _, _ = _first_round()
    assert plan.group_trim is not None
    calls = [replace(calls[0], request=replace(calls[0].request, segments=("a",))),
             replace(calls[1], request=replace(calls[1].request, segments=("b", "c"))),
             replace(calls[1], instance="s2", request=replace(calls[1].request, segments=("b",), groups=None))]
    replies = [*first, ServerReply("s2", first[1].table, ServerQueryStats())]
    asked: list[ServerCall] = []

    async def record(more: list[ServerCall]) -> list[ServerReply]:
        asked.extend(more)
        return [ServerReply(call.instance, pa.table({}), ServerQueryStats()) for call in more]

    asyncio.run(exact_groups(plan.group_trim, calls, replies, lambda: 500, record))
    segments = {call.instance: call.request.segments for call in asked}
    assert segments["s1"] == ("c",) and "s2" not in segments
