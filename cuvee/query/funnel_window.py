"""Pinot's windowed funnel functions over one group's step events: pure, row by row as Pinot's own code is.

FUNNELMAXSTEP, FUNNELMATCHSTEP, FUNNELCOMPLETECOUNT and FUNNELSTEPDURATIONSTATS all read a group's events — each
row that matched a step, as (time in epoch millis, index of the first step it matched) — in time order (then step
order: Pinot's ``FunnelStepEvent`` ordering), and slide a window that starts at a step-0 event and spans
``window`` millis (``Funnel.fill``). What each function then does with a window follows Pinot's
``Funnel*AggregationFunction`` classes, quirks included: events left in the window once every event has been
taken are not looked at again, and the duration statistics take each step's time from the first event whose
step is at least the number of times already recorded.

The broker (and a server answering a query whole) calls them through DuckDB functions over a merged list of
events (``register``); the configuration of one call is a JSON text the planner writes (``Funnel.to_json``).
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

STRICT_DEDUPLICATION = "STRICT_DEDUPLICATION"
STRICT_ORDER = "STRICT_ORDER"
STRICT_INCREASE = "STRICT_INCREASE"
KEEP_ALL = "KEEP_ALL"
MODES = (STRICT_DEDUPLICATION, STRICT_ORDER, STRICT_INCREASE, KEEP_ALL)

Event = tuple[int, int]  # (time in epoch millis, step index; -1: no step, kept by KEEP_ALL)


@dataclass(frozen=True)
class Funnel:
    """One call's settings: its window in millis, its number of steps, its modes, the largest gap allowed between
    two events of a window (0: any), and FUNNELSTEPDURATIONSTATS' functions (AVG, MEDIAN, MIN, MAX, COUNT,
    PERCENTILE<p>)."""

    window: int
    steps: int
    modes: frozenset[str] = frozenset()
    max_step_duration: int = 0
    duration_functions: tuple[str, ...] = field(default=())

    def to_json(self) -> str:
        return json.dumps({"window": self.window, "steps": self.steps, "modes": sorted(self.modes),
                           "maxStepDuration": self.max_step_duration,
                           "durationFunctions": list(self.duration_functions)}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Funnel:
        doc = json.loads(text)
        return Funnel(int(doc["window"]), int(doc["steps"]), frozenset(doc["modes"]), int(doc["maxStepDuration"]),
                      tuple(doc["durationFunctions"]))

    def fill(self, events: deque[Event], window: deque[Event]) -> None:
        """Pinot's ``fillWindow``: drop the window's head until it is a step-0 event (else start from the next
        step-0 event), then take every event that starts before the window ends (and, with a max step duration,
        follows the window's last event closely enough)."""
        while window and window[0][1] != 0:
            window.popleft()
        if not window:
            while events and events[0][1] != 0:
                events.popleft()
            if not events:
                return
            window.append(events.popleft())
        end = window[0][0] + self.window
        while events and events[0][0] < end:
            if self.max_step_duration > 0 and events[0][0] - window[-1][0] > self.max_step_duration:
                break
            window.append(events.popleft())

    def reached(self, window: Sequence[Event]) -> int:
        """How many steps in order one window reaches (Pinot's ``processWindow``)."""
        step, previous = 0, -1
        for time, current in window:
            if STRICT_DEDUPLICATION in self.modes and current == step - 1:
                return step
            if STRICT_ORDER in self.modes and current != step:
                return step
            if STRICT_INCREASE in self.modes and previous == time:
                continue
            if step == current:
                step += 1
                previous = time
            if step == self.steps:
                break
        return step

    def max_step(self, events: Sequence[Event]) -> int:
        """FUNNELMAXSTEP: the most steps any window reaches."""
        pending, window, best = deque(sorted(events)), deque[Event](), 0
        while pending:
            self.fill(pending, window)
            if not window:
                break
            best = max(best, self.reached(window))
            if best == self.steps:
                break
            window.popleft()
        return best

    def match_step(self, events: Sequence[Event]) -> list[int]:
        """FUNNELMATCHSTEP: 1 for each step FUNNELMAXSTEP reaches, then 0s."""
        reached = self.max_step(events)
        return [1] * reached + [0] * (self.steps - reached)

    def complete_count(self, events: Sequence[Event]) -> int:
        """FUNNELCOMPLETECOUNT: how many times the whole funnel is completed, each completion starting afresh."""
        pending, window, total = deque(sorted(events)), deque[Event](), 0
        while pending:
            self.fill(pending, window)
            if not window:
                break
            start, step, previous = window[0][0], 0, -1
            for time, current in window:
                if STRICT_DEDUPLICATION in self.modes and current == step - 1:
                    step = 0
                if STRICT_ORDER in self.modes and current != step:
                    step = 0
                if STRICT_INCREASE in self.modes and previous == time:
                    continue
                previous = time
                if step == current:
                    step += 1
                if step == self.steps:
                    total, step, start = total + 1, 0, time
            window.popleft()
            while window and window[0][0] < start:
                window.popleft()
        return total

    def step_duration_stats(self, events: Sequence[Event]) -> list[float]:
        """FUNNELSTEPDURATIONSTATS: per step, each duration function over the times from that step to the next in
        every window that completes the funnel (COUNT: 1 if any window reached the step). No completed window
        gives an empty list unless COUNT is asked; a step without durations (the last, or none completed) gives
        0 for the others, Pinot's null placeholder."""
        if not events:
            return []
        pending, window = deque(sorted(events)), deque[Event]()
        reached = [0] * self.steps
        durations: list[list[int]] = [[] for _ in range(self.steps)]
        matched = False
        while pending:
            self.fill(pending, window)
            if not window:
                break
            steps = self.reached(window)
            if steps == self.steps:
                matched = True
                times: list[int] = []
                for time, step in window:
                    if len(times) <= step:
                        times.append(time)
                for i in range(len(times) - 1):
                    reached[i] = 1
                    durations[i].append(times[i + 1] - times[i])
                reached[self.steps - 1] = 1
            else:
                for i in range(steps):
                    reached[i] = 1
            window.popleft()
        if not matched and "COUNT" not in self.duration_functions:
            return []
        out: list[float] = []
        for step in range(self.steps):
            for function in self.duration_functions:
                if function == "COUNT":
                    out.append(float(reached[step]))
                elif not matched or step == self.steps - 1:
                    out.append(0.0)
                else:
                    out.append(_statistic(function, durations[step]))
        return out


def _statistic(function: str, values: list[int]) -> float:
    """AVG, or a quantile as Pinot's exact quantile digest answers it: the sorted values' element at
    floor(q * n), the largest for q = 1."""
    if not values:
        return math.nan if function == "AVG" else 0.0
    if function == "AVG":
        return sum(values) / len(values)
    quantile = {"MEDIAN": 0.5, "MIN": 0.0, "MAX": 1.0}.get(function)
    if quantile is None:
        quantile = float(function[len("PERCENTILE"):]) / 100
    ordered = sorted(values)
    return float(ordered[min(math.floor(quantile * len(ordered)), len(ordered) - 1)])


EVENTS_TYPE = "STRUCT(t BIGINT, s INTEGER)[]"  # a group's merged events, as the planner's partials build them


def _kernel(run: Callable[[Funnel, list[Event]], object], result: pa.DataType) -> Callable[..., pa.Array]:
    def kernel(events: pa.Array, configs: pa.Array) -> pa.Array:
        cache: dict[str, Funnel] = {}
        out = []
        for group, config in zip(events.to_pylist(), configs.to_pylist()):
            if config is None:
                out.append(None)
                continue
            funnel = cache.get(config) or cache.setdefault(config, Funnel.from_json(config))
            out.append(run(funnel, [(e["t"], e["s"]) for e in group or () if e is not None]))
        return pa.array(out, result)
    return kernel


# name -> (kernel, DuckDB result type); each takes (events, the call's configuration as JSON)
FUNCTIONS: dict[str, tuple[Callable[..., pa.Array], str]] = {
    "cuvee_funnel_max_step": (_kernel(Funnel.max_step, pa.int32()), "INTEGER"),
    "cuvee_funnel_match_step": (_kernel(Funnel.match_step, pa.list_(pa.int32())), "INTEGER[]"),
    "cuvee_funnel_complete_count": (_kernel(Funnel.complete_count, pa.int32()), "INTEGER"),
    "cuvee_funnel_step_duration_stats": (_kernel(Funnel.step_duration_stats, pa.list_(pa.float64())), "DOUBLE[]"),
}


def register(database: duckdb.DuckDBPyConnection) -> None:
    """Make the funnel functions callable in ``database`` (before its configuration is locked)."""
    for name, (kernel, result) in FUNCTIONS.items():
        database.create_function(name, kernel, [duckdb.sqltype(EVENTS_TYPE), duckdb.sqltype("VARCHAR")],
                                 duckdb.sqltype(result), type="arrow", null_handling="special", side_effects=False)
