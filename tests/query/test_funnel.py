"""Pinot's windowed funnels: the algorithm on hand-worked event sequences (Pinot's rules and quirks), the planner's
arguments and errors, and the executed functions however the rows are split (the merge, the one-step answer and
the algorithm over each group's events agree). Bad arguments: ``test_pinot_aggregates.py``."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvee.query import funnel_window, plan_sql
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.execute import PastDeadlineError, run_sql
from cuvee.query.funnel_window import (
    KEEP_ALL,
    MODES,
    STRICT_DEDUPLICATION,
    STRICT_INCREASE,
    STRICT_ORDER,
    Funnel,
    PastDeadline,
)
from tests.query.helpers import SCHEMA, distributed, event_tables, one_step, partitions, resolve, within

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("funnel", "events", "expected"), [
    (Funnel(10, 3), [(0, 0), (1, 1), (2, 2)], 3),
    (Funnel(10, 3), [(2, 2), (1, 1), (0, 0)], 3),  # read in time order, whatever the order they come in
    (Funnel(10, 3), [(0, 0), (5, 1), (20, 2)], 2),  # the last step is past the window
    (Funnel(10, 3), [(0, 1), (1, 2)], 0),  # no first step
    (Funnel(10, 3, frozenset({STRICT_ORDER})), [(0, 0), (1, 1), (2, 0), (3, 2)], 2),
    (Funnel(10, 3), [(0, 0), (1, 1), (2, 0), (3, 2)], 3),
    (Funnel(10, 2, frozenset({STRICT_DEDUPLICATION})), [(0, 0), (1, 0), (2, 1)], 1),  # Pinot does not look at
    (Funnel(10, 2), [(0, 0), (1, 0), (2, 1)], 2),  # the window left once every event is taken
    (Funnel(10, 2, frozenset({STRICT_INCREASE})), [(0, 0), (0, 1)], 1),
    (Funnel(10, 2), [(0, 0), (0, 1)], 2),
    (Funnel(10, 2, frozenset({STRICT_ORDER, KEEP_ALL})), [(0, 0), (1, -1), (2, 1)], 1),
    (Funnel(10, 2, frozenset({STRICT_ORDER})), [(0, 0), (2, 1)], 2),
    (Funnel(100, 3, max_step_duration=10), [(0, 0), (5, 1), (20, 2)], 2),
    (Funnel(100, 3), [(0, 0), (5, 1), (20, 2)], 3),
    (Funnel(10, 2), [], 0),
])
def test_max_step_follows_pinots_windows(funnel: Funnel, events: list[tuple[int, int]], expected: int) -> None:
    assert funnel.max_step(events) == expected
    assert funnel.match_step(events) == [1] * expected + [0] * (funnel.steps - expected)


@pytest.mark.parametrize(("funnel", "events", "expected"), [
    (Funnel(100, 2), [(0, 0), (1, 1), (2, 0), (3, 1)], 2),
    (Funnel(100, 2), [(0, 0), (1, 1), (2, 1)], 1),
    (Funnel(100, 2, frozenset({STRICT_ORDER})), [(0, 0), (1, 0), (2, 1)], 1),  # the repeat restarts from itself
    (Funnel(5, 2), [(0, 0), (10, 1)], 0),
    (Funnel(10, 2), [], 0),
])
def test_complete_count_counts_each_completion_afresh(funnel: Funnel, events: list[tuple[int, int]],
                                                      expected: int) -> None:
    assert funnel.complete_count(events) == expected


def test_step_duration_stats_over_completed_windows() -> None:
    funnel = Funnel(100, 2, duration_functions=("AVG", "MEDIAN", "MIN", "MAX", "PERCENTILE0", "COUNT"))
    events = [(0, 0), (10, 1), (200, 0), (230, 1)]  # two completions: 10 ms, then 30 ms
    assert funnel.step_duration_stats(events) == [20.0, 30.0, 10.0, 30.0, 10.0, 1.0,
                                                  0.0, 0.0, 0.0, 0.0, 0.0, 1.0]  # the last step has no duration
    # a funnel never completed: nothing, unless COUNT is asked (then the steps reached)
    assert Funnel(100, 2, duration_functions=("AVG",)).step_duration_stats([(0, 0)]) == []
    assert Funnel(100, 2, duration_functions=("AVG", "COUNT")).step_duration_stats([(0, 0)]) == [0.0, 1.0, 0.0, 0.0]
    assert Funnel(100, 2, duration_functions=("COUNT",)).step_duration_stats([]) == []


def test_a_funnels_settings_travel_as_json() -> None:
    funnel = Funnel(60_000, 3, frozenset({STRICT_ORDER, KEEP_ALL}), 500, ("AVG", "PERCENTILE95"))
    assert Funnel.from_json(funnel.to_json()) == funnel


def _events(rows: list[dict], steps: list[int], keep_all: bool = False) -> list[tuple[int, int]]:
    """A group's events as Pinot collects them: each row's first matching step (v == steps[i])."""
    out = []
    for row in rows:
        if row["v"] in steps:
            out.append((int(row["ts"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000), steps.index(row["v"])))
        elif keep_all:
            out.append((int(row["ts"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000), -1))
    return out


CALLS = [
    ("FUNNELMAXSTEP(ts, 3600000, 3, v = 1, v = 2, v = 3)", lambda ev: Funnel(3_600_000, 3).max_step(ev), False),
    ("FUNNEL_MATCH_STEP(ts, 1800000, 2, v = 0, v = 1, 'STRICT_ORDER')",
     lambda ev: Funnel(1_800_000, 2, frozenset({STRICT_ORDER})).match_step(ev), False),
    ("funnelCompleteCount(ts, 7200000, 2, v = 1, v = -1, 'MODE=STRICT_INCREASE,KEEP_ALL')",
     lambda ev: Funnel(7_200_000, 2, frozenset({STRICT_INCREASE, KEEP_ALL})).complete_count(ev), True),
    ("FUNNELSTEPDURATIONSTATS(ts, 7200000, 2, v = 1, v = 2, 'DURATIONFUNCTIONS=AVG,MEDIAN,COUNT')",
     lambda ev: Funnel(7_200_000, 2, duration_functions=("AVG", "MEDIAN", "COUNT")).step_duration_stats(ev), False),
]
_STEPS = {0: [1, 2, 3], 1: [0, 1], 2: [1, -1], 3: [1, 2]}


@pytest.mark.parametrize("index", range(len(CALLS)), ids=[c for c, _, _ in CALLS])
@SETTINGS
@given(data=st.data())
def test_window_funnels_give_one_answer_however_rows_are_split(index: int, data: st.DataObject) -> None:
    call, model, keep_all = CALLS[index]
    table = data.draw(event_tables())
    parts = data.draw(partitions(table))
    sql = f"SELECT city, {call} FROM events GROUP BY city LIMIT 100"
    answer = distributed(sql, parts)
    got = dict(zip(answer.column(0).to_pylist(), answer.column(1).to_pylist()))
    rows = table.to_pylist()
    assert got == {city: model(_events([r for r in rows if r["city"] == city], _STEPS[index], keep_all))
                   for city in {r["city"] for r in rows}}
    whole, _ = one_step(plan_sql(sql, resolve), table)
    assert whole.schema == answer.schema
    assert dict(zip(whole.column(0).to_pylist(), whole.column(1).to_pylist())) == got


def test_no_rows_give_pinots_empty_answers() -> None:
    empty = [SCHEMA.empty_table()]
    sql = ("SELECT FUNNELMAXSTEP(ts, 10, 2, v = 1, v = 2), FUNNELMATCHSTEP(ts, 10, 2, v = 1, v = 2), "
           "FUNNELCOMPLETECOUNT(ts, 10, 2, v = 1, v = 2), "
           "FUNNELSTEPDURATIONSTATS(ts, 10, 2, v = 1, v = 2, 'DURATIONFUNCTIONS=COUNT') FROM events")
    assert list(distributed(sql, empty).to_pylist()[0].values()) == [0, [0, 0], 0, []]
    assert [str(f.type) for f in distributed(sql, empty).schema] == ["int32", "list<l: int32>", "int32",
                                                                     "list<l: double>"]


def test_a_timestamp_is_read_as_epoch_millis_and_a_long_time_as_it_is() -> None:
    """Durations are millis whether the time is a TIMESTAMP column or a LONG of millis."""
    base = dt.datetime(2026, 1, 1)
    rows = pa.table({"id": [1, 2], "city": ["a", "a"], "v": pa.array([1, 2], pa.int32()), "d": [0.0, 0.0],
                     "ts": pa.array([base, base + dt.timedelta(seconds=3)], pa.timestamp("ms"))}, schema=SCHEMA)
    by_ts = "FUNNELSTEPDURATIONSTATS(ts, 60000, 2, v = 1, v = 2, 'DURATIONFUNCTIONS=AVG')"
    by_id = "FUNNELSTEPDURATIONSTATS(id * 1000, 60000, 2, v = 1, v = 2, 'DURATIONFUNCTIONS=AVG')"
    answer = distributed(f"SELECT {by_ts}, {by_id} FROM events", [rows]).to_pylist()[0]
    assert list(answer.values()) == [[3000.0, 0.0], [1000.0, 0.0]]


@st.composite
def _funnels_and_events(draw: st.DrawFn) -> tuple[Funnel, list[tuple[int, int]]]:
    """A funnel with any modes, and events that crowd its windows (ties, gaps, times at the ends of a LONG)."""
    steps = draw(st.sampled_from([1, 2, 3, 5, 17, 64]))
    modes = frozenset(draw(st.lists(st.sampled_from(MODES), unique=True)))
    functions = tuple(draw(st.lists(st.sampled_from(["AVG", "MEDIAN", "MIN", "MAX", "COUNT", "PERCENTILE95"]),
                                    min_size=1, max_size=3)))
    funnel = Funnel(draw(st.sampled_from([1, 2, 5, 30, 2**63 - 1])), steps, modes,
                    draw(st.sampled_from([0, 0, 1, 3])), functions)
    base = draw(st.sampled_from([-3, 0, -2**63, 2**63 - 400]))
    span = draw(st.sampled_from([3, 20, 300]))
    top = min(steps - 1, draw(st.sampled_from([1, 3, 70])))
    events = draw(st.lists(st.tuples(st.integers(base, min(base + span, 2**63 - 1)),
                                     st.integers(-1 if KEEP_ALL in modes else 0, top)), max_size=150))
    return funnel, events


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=_funnels_and_events())
def test_the_jumps_answer_as_pinots_walk(case: tuple[Funnel, list[tuple[int, int]]],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group through the vectorised path (no small-group walk) equals Pinot's event-by-event walk."""
    funnel, events = case
    monkeypatch.setattr(funnel_window, "SMALL_GROUP", -1)
    assert funnel.max_step(events) == funnel_window._walk_max_step(funnel, events)
    assert funnel.complete_count(events) == funnel_window._walk_complete_count(funnel, events)
    got, want = funnel.step_duration_stats(events), funnel_window._walk_step_duration_stats(funnel, events)
    assert len(got) == len(want) and all(a == b or (a != a and b != b) for a, b in zip(got, want))


def test_a_group_whose_windows_overlap_costs_n_log_n() -> None:
    """Every event a first step, each window half of them: Pinot's walk reads n^2 / 4 events (16,000 events took
    9 s, 20,000 rows tied the broker for 18 s); the jumps take well under a second for 200,000."""
    n = 200_000
    events = [(i, 0) for i in range(n)] + [(n + 5, 1)]
    funnel = Funnel(n // 2, 2, duration_functions=("AVG", "COUNT"))
    assert within(30, lambda: funnel.max_step(events)) == 2
    # the windows are read until one takes the last event: the one from n/2 + 6, which completes once
    assert within(30, lambda: funnel.complete_count(events)) == 1
    assert within(30, lambda: funnel.step_duration_stats(events)) == [n / 2 - 1, 1.0, 0.0, 1.0]
    ordered = Funnel(n, 3, frozenset({STRICT_ORDER, STRICT_INCREASE}))
    assert within(30, lambda: ordered.complete_count([(i, i % 3) for i in range(n - 2)])) == n // 3


def test_a_funnel_function_gives_up_at_its_deadline() -> None:
    """DuckDB cannot interrupt a Python function: the executor sets the deadline it reads, and past it the
    function raises, which the query answers as its timeout."""
    kernel = funnel_window.FUNCTIONS["cuvee_funnel_max_step"][0]
    events = pa.array([[{"t": i, "s": 0} for i in range(1000)]], pa.list_(pa.struct([("t", pa.int64()),
                                                                                     ("s", pa.int32())])))
    config = pa.array([Funnel(500, 2).to_json()])
    assert kernel(events, config, pa.array([None], pa.float64())).to_pylist() == [1]
    assert kernel(events, config, pa.array([time.monotonic() + 60])).to_pylist() == [1]
    with pytest.raises(PastDeadline):
        kernel(events, config, pa.array([time.monotonic() - 1]))
    sql = "SELECT FUNNELMAXSTEP(ts, 1000000, 2, v = 1, v = 2) FROM events"
    plan = plan_sql(sql, resolve)
    assert funnel_window.DEADLINE_SQL in plan.final_sql
    with pytest.raises(PastDeadlineError):
        run_sql(plan.final_sql, "cuvee_partials", pa.table({"__p0": pa.array([[]], pa.list_(
            pa.struct([("t", pa.int64()), ("s", pa.int32())])))}), deadline=time.monotonic() - 0.001)


def test_a_group_with_more_events_than_the_cap_is_refused_with_700(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group's merged events are held whole by the walk: beyond ``MAX_GROUP_EVENTS`` the query fails with 700
    (and a message that says why), on the broker's merge as on a server answering whole."""
    monkeypatch.setattr(funnel_window, "MAX_GROUP_EVENTS", 10)
    rows = pa.Table.from_pylist([{"id": i, "city": "a", "v": 1, "d": 0.0,
                                  "ts": dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i)} for i in range(12)],
                                schema=SCHEMA)
    sql = "SELECT FUNNELMAXSTEP(ts, 60000, 2, v = 1, v = 2) FROM events"
    for run in (lambda: distributed(sql, [rows.slice(0, 6), rows.slice(6)]), lambda: one_step(plan_sql(sql, resolve),
                                                                                               rows)):
        with pytest.raises(QueryError) as caught:
            run()
        assert caught.value.code == QueryErrorCode.QUERY_VALIDATION
        assert "a group has 12 events that match a step, more than 10" in caught.value.message
    assert list(distributed(sql, [rows.slice(0, 10)]).to_pylist()[0].values()) == [1]  # at the cap: answered


@pytest.mark.parametrize("sql", [
    "SELECT cuvee_funnel_max_step([{'t': id, 's': 0}], '{}') FROM events",
    "SELECT id FROM events WHERE CUVEE_FUNNEL_MATCH_STEP([{'t': id, 's': 0}], 'x') = [1]",
    "SELECT cuvee_sha512(CAST(city AS BLOB)) FROM events",
])
def test_cuvees_internal_functions_are_not_callable_from_a_query(sql: str) -> None:
    """They take configurations the planner writes and checks: a query naming one is refused (150) before it is
    planned; Pinot's names for them (SHA512, FUNNELMAXSTEP) still work."""
    with pytest.raises(QueryError) as caught:
        plan_sql(sql, resolve)
    assert caught.value.code == QueryErrorCode.SQL_PARSING and "unknown function" in caught.value.message
    plan_sql("SELECT SHA512(CAST(city AS BYTES)) FROM events", resolve)
    plan_sql("SELECT FUNNELMAXSTEP(ts, 10, 1, v = 1) FROM events", resolve)


def test_too_many_duration_functions_are_a_150_not_an_internal_error() -> None:
    functions = ",".join(["AVG"] * 65)
    with pytest.raises(QueryError) as caught:
        plan_sql(f"SELECT FUNNELSTEPDURATIONSTATS(ts, 10, 1, v = 1, 'DURATIONFUNCTIONS={functions}') FROM events",
                 resolve)
    assert caught.value.code == QueryErrorCode.SQL_PARSING and "duration functions" in caught.value.message


@pytest.mark.parametrize("text", [
    '{"window": 1, "steps": 20000000, "modes": [], "maxStepDuration": 0, "durationFunctions": []}',
    '{"window": 0, "steps": 2, "modes": [], "maxStepDuration": 0, "durationFunctions": []}',
    '{"window": 1, "steps": 2, "modes": ["X"], "maxStepDuration": 0, "durationFunctions": []}',
    '{"window": 1.5, "steps": 2, "modes": [], "maxStepDuration": 0, "durationFunctions": []}',
    '{"window": 1, "steps": 2, "modes": [], "maxStepDuration": -1, "durationFunctions": ["AVG"]}',
    '{"window": 1, "steps": 2}', "not json", "[]",
])
def test_a_funnel_configuration_is_bounded_when_read(text: str) -> None:
    with pytest.raises(ValueError, match="not a funnel configuration"):
        Funnel.from_json(text)


def test_a_kernels_own_failure_reaches_no_client_as_python_text() -> None:
    kernel = funnel_window.FUNCTIONS["cuvee_funnel_max_step"][0]
    events = pa.array([[{"t": 1, "s": 0}]], pa.list_(pa.struct([("t", pa.int64()), ("s", pa.int32())])))
    with pytest.raises(RuntimeError) as caught:
        kernel(events, pa.array(["not json"]), pa.array([None], pa.float64()))
    assert "JSONDecodeError" not in str(caught.value) and "internal error" in str(caught.value)
