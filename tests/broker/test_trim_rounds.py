"""The broker's second round over servers that trimmed (``cuvee.broker.trim_rounds``), with servers modelled by
``run_server_step`` over their rows: what is asked again, and how the answers combine."""

from __future__ import annotations

import asyncio
from collections import Counter

import pyarrow as pa
import pytest

from cuvee.broker.scatter import ServerCall, ServerReply
from cuvee.broker.trim_rounds import exact_groups
from cuvee.protocol.query import GroupLimits, ServerQueryRequest, ServerQueryStats
from cuvee.query import plan_sql, run_server_step
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


@pytest.mark.parametrize("upsert", [False, True])
def test_a_row_that_changes_group_between_the_rounds_is_counted_once(upsert: bool) -> None:
    """Server 1 cuts g1 in the first round; before the second, one of its k0 rows is upserted into g1. Asked for g1
    alone it would count that row in g1 (second round) and in k0 (first round); on an upsert table it is asked
    untrimmed and its second answer replaces its first (review M1)."""
    plan = plan_sql(SQL, resolve)
    assert plan.group_trim is not None
    trim = plan.group_trim
    zero = _rows({"g1": 50, **{f"h{i}": 1 for i in range(10)}})
    before = _rows({"g1": 30, **{f"k{i}": 40 for i in range(10)}})
    after = _rows({"g1": 31, "k0": 39, **{f"k{i}": 40 for i in range(1, 10)}})
    limits = GroupLimits(trim.order_sql, trim.rows, trim.exact)
    calls = [ServerCall(f"s{i}", f"http://s{i}", ServerQueryRequest("1", "events_REALTIME", plan.server_sql, ("x",),
                                                                    1000, groups=limits)) for i in range(2)]
    first = [_served(plan, zero, limits), _served(plan, before, limits)]
    assert all(r.stats is not None and r.stats.groupsTrimmed for r in first)
    asked: list[ServerCall] = []

    async def ask(more: list[ServerCall]) -> list[ServerReply]:
        asked.extend(more)
        assert more and all(call.request.groups is not None for call in more)
        return [_served(plan, zero if call.instance == "s0" else after, call.request.groups)  # type: ignore[arg-type]
                for call in more]

    replies, again = asyncio.run(exact_groups(trim, calls, first, 500, ask, upsert=upsert))
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
