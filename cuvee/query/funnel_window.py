"""Pinot's windowed funnel functions over one group's step events, in time that grows as n log n.

FUNNELMAXSTEP, FUNNELMATCHSTEP, FUNNELCOMPLETECOUNT and FUNNELSTEPDURATIONSTATS all read a group's events — each
row that matched a step, as (time in epoch millis, index of the first step it matched) — in time order (then step
order: Pinot's ``FunnelStepEvent`` ordering), and slide a window that starts at a step-0 event and spans
``window`` millis. What each function then does with a window follows Pinot's ``Funnel*AggregationFunction``
classes, quirks included: events left in the window once every event has been taken are not looked at again, and
the duration statistics take each step's time from the first event whose step is at least the number of times
already recorded.

Pinot walks every window event by event, so a group whose windows overlap costs the square of its events (16,000
events under one window: 9 s here, holding the GIL). The same answers are computed here without the walk:

- the windows: each step-0 event starts one, which ends at the first event ``window`` millis later or after a gap
  longer than the max step duration (binary searches); Pinot looks at the windows in order until one has taken
  the last event;
- FUNNELMAXSTEP (and MATCHSTEP, and which windows complete for STEPDURATIONSTATS): a window's walk changes state
  only at its next match or at an event a mode stops on, and each is the first position of some step past a
  point: every window jumps to it at once (``numpy.searchsorted``), all windows together, one step at a time;
- FUNNELCOMPLETECOUNT: its walk restarts instead of stopping, so it is a small automaton (state: the steps
  reached) read over the window. Each block of events maps every state to a state, a count of completions and
  the last one; a segment tree composes the blocks, so one window costs a logarithm of blocks. Windows follow
  one another (the next starts after the last completion): a chain summed by pointer doubling.

Groups of up to ``SMALL_GROUP`` events are walked event by event (``_walk_*``, Pinot's own loops), where the
fixed cost of the vectorised path would dominate; the tests check both ways agree on random events and modes.

The broker (and a server answering a query whole) calls them through DuckDB functions over a merged list of
events (``register``); the configuration of one call is a JSON text the planner writes (``Funnel.to_json``),
checked when read. The last argument is the time (``time.monotonic()``) past which a function gives up (raises
``PastDeadline``): the query's executor sets it (``DEADLINE_SQL``), as DuckDB cannot interrupt a Python function.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

STRICT_DEDUPLICATION = "STRICT_DEDUPLICATION"
STRICT_ORDER = "STRICT_ORDER"
STRICT_INCREASE = "STRICT_INCREASE"
KEEP_ALL = "KEEP_ALL"
MODES = (STRICT_DEDUPLICATION, STRICT_ORDER, STRICT_INCREASE, KEEP_ALL)
MAX_STEPS = 64  # steps of one funnel (each is a CASE branch; the tables below hold a row per step)
MAX_MILLIS = 2**63 - 1  # a window or a max step duration is a Java long
MAX_GROUP_EVENTS = 1_000_000  # step events of one group a windowed funnel reads; more: the query fails with 700
TOO_MANY_EVENTS = "too many funnel events"  # how that failure is told apart in DuckDB's error text
SMALL_GROUP = 64  # groups of up to this many events are walked event by event (cheaper than numpy below it)
DEADLINE_VARIABLE = "cuvee_deadline"  # a DuckDB variable: the executor's deadline, in time.monotonic() seconds
DEADLINE_SQL = f"getvariable('{DEADLINE_VARIABLE}')"
_DURATION_FUNCTIONS = ("AVG", "MEDIAN", "MIN", "MAX", "COUNT")

Event = tuple[int, int]  # (time in epoch millis, step index; -1: no step, kept by KEEP_ALL)
Check = Callable[[], None]


class PastDeadline(Exception):
    """A funnel function ran past the deadline its query's executor set."""


class TooManyEvents(Exception):
    """A group holds more step events than ``MAX_GROUP_EVENTS``: its merged list alone is that many rows of
    memory, so the query is refused (700, ``cuvee.query.execute.duckdb_failure``) rather than walked."""

    def __init__(self, events: int) -> None:
        super().__init__(f"{TOO_MANY_EVENTS}: a group has {events} events that match a step, more than "
                         f"{MAX_GROUP_EVENTS}; narrow the query (WHERE, a finer GROUP BY)")


def _no_check() -> None:
    return None


def valid_duration_function(name: str) -> bool:
    """AVG, MEDIAN, MIN, MAX, COUNT or PERCENTILE<p> with p from 0 to 100."""
    if name in _DURATION_FUNCTIONS:
        return True
    if not name.startswith("PERCENTILE"):
        return False
    try:
        value = float(name[len("PERCENTILE"):])
    except ValueError:
        return False
    return 0 <= value <= 100


@dataclass(frozen=True)
class Funnel:
    """One call's settings: its window in millis, its number of steps, its modes, the largest gap allowed between
    two events of a window (0: any), and FUNNELSTEPDURATIONSTATS' functions (AVG, MEDIAN, MIN, MAX, COUNT,
    PERCENTILE<p>). Checked when made (ValueError): whatever reads a configuration gets a bounded one."""

    window: int
    steps: int
    modes: frozenset[str] = frozenset()
    max_step_duration: int = 0
    duration_functions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not (isinstance(self.window, int) and 0 < self.window <= MAX_MILLIS):
            raise ValueError(f"a funnel's window must be from 1 to {MAX_MILLIS} ms")
        if not (isinstance(self.steps, int) and 1 <= self.steps <= MAX_STEPS):
            raise ValueError(f"a funnel has 1 to {MAX_STEPS} steps")
        if not (isinstance(self.max_step_duration, int) and 0 <= self.max_step_duration <= MAX_MILLIS):
            raise ValueError(f"a funnel's max step duration must be from 0 to {MAX_MILLIS} ms")
        if not self.modes <= frozenset(MODES):
            raise ValueError(f"a funnel's modes are among {', '.join(MODES)}")
        if len(self.duration_functions) > MAX_STEPS or \
                not all(isinstance(f, str) and valid_duration_function(f) for f in self.duration_functions):
            raise ValueError(f"a funnel has at most {MAX_STEPS} duration functions, each valid")

    def to_json(self) -> str:
        return json.dumps({"window": self.window, "steps": self.steps, "modes": sorted(self.modes),
                           "maxStepDuration": self.max_step_duration,
                           "durationFunctions": list(self.duration_functions)}, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Funnel:
        """The settings ``to_json`` wrote; ValueError for anything else (a malformed or out-of-range one)."""
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or set(doc) != {"window", "steps", "modes", "maxStepDuration",
                                                         "durationFunctions"}:
                raise ValueError("unexpected keys")
            modes, functions = doc["modes"], doc["durationFunctions"]
            if not (isinstance(modes, list) and isinstance(functions, list) and len(modes) <= len(MODES)):
                raise ValueError("modes and durationFunctions are lists")
            numbers = [doc["window"], doc["steps"], doc["maxStepDuration"]]
            if not all(type(n) is int for n in numbers):
                raise ValueError("window, steps and maxStepDuration are integers")
            return Funnel(numbers[0], numbers[1], frozenset(modes), numbers[2], tuple(functions))
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(f"not a funnel configuration: {str(exc)[:80]}") from None

    def max_step(self, events: Sequence[Event], check: Check = _no_check) -> int:
        """FUNNELMAXSTEP: the most steps any window reaches."""
        if len(events) <= SMALL_GROUP:
            return _walk_max_step(self, events)
        return _max_step(self, _Group(self, events), check)

    def match_step(self, events: Sequence[Event], check: Check = _no_check) -> list[int]:
        """FUNNELMATCHSTEP: 1 for each step FUNNELMAXSTEP reaches, then 0s."""
        reached = self.max_step(events, check)
        return [1] * reached + [0] * (self.steps - reached)

    def complete_count(self, events: Sequence[Event], check: Check = _no_check) -> int:
        """FUNNELCOMPLETECOUNT: how many times the whole funnel is completed, each completion starting afresh."""
        if len(events) <= SMALL_GROUP:
            return _walk_complete_count(self, events)
        return _complete_count(self, _Group(self, events), check)

    def step_duration_stats(self, events: Sequence[Event], check: Check = _no_check) -> list[float]:
        """FUNNELSTEPDURATIONSTATS: per step, each duration function over the times from that step to the next in
        every window that completes the funnel (COUNT: 1 if any window reached the step). No completed window
        gives an empty list unless COUNT is asked; a step without durations (the last, or none completed) gives
        0 for the others, Pinot's null placeholder."""
        if len(events) <= SMALL_GROUP:
            return _walk_step_duration_stats(self, events)
        if not len(events):
            return []
        return _step_duration_stats(self, _Group(self, events), check)


# --- Pinot's loops, event by event: for small groups ------------------------------------------------------------

def _fill(funnel: Funnel, events: deque[Event], window: deque[Event]) -> None:
    """Pinot's ``fillWindow``: drop the window's head until it is a step-0 event (else start from the next step-0
    event), then take every event that starts before the window ends (and, with a max step duration, follows the
    window's last event closely enough)."""
    while window and window[0][1] != 0:
        window.popleft()
    if not window:
        while events and events[0][1] != 0:
            events.popleft()
        if not events:
            return
        window.append(events.popleft())
    end = window[0][0] + funnel.window
    while events and events[0][0] < end:
        if funnel.max_step_duration > 0 and events[0][0] - window[-1][0] > funnel.max_step_duration:
            break
        window.append(events.popleft())


def _walk_reached(funnel: Funnel, window: Sequence[Event]) -> int:
    """How many steps in order one window reaches (Pinot's ``processWindow``)."""
    step, previous = 0, -1
    for time_, current in window:
        if STRICT_DEDUPLICATION in funnel.modes and current == step - 1:
            return step
        if STRICT_ORDER in funnel.modes and current != step:
            return step
        if STRICT_INCREASE in funnel.modes and previous == time_:
            continue
        if step == current:
            step += 1
            previous = time_
        if step == funnel.steps:
            break
    return step


def _walk_max_step(funnel: Funnel, events: Sequence[Event]) -> int:
    pending, window, best = deque(sorted(events)), deque[Event](), 0
    while pending:
        _fill(funnel, pending, window)
        if not window:
            break
        best = max(best, _walk_reached(funnel, window))
        if best == funnel.steps:
            break
        window.popleft()
    return best


def _walk_complete_count(funnel: Funnel, events: Sequence[Event]) -> int:
    pending, window, total = deque(sorted(events)), deque[Event](), 0
    while pending:
        _fill(funnel, pending, window)
        if not window:
            break
        start, step, previous = window[0][0], 0, -1
        for time_, current in window:
            if STRICT_DEDUPLICATION in funnel.modes and current == step - 1:
                step = 0
            if STRICT_ORDER in funnel.modes and current != step:
                step = 0
            if STRICT_INCREASE in funnel.modes and previous == time_:
                continue
            previous = time_
            if step == current:
                step += 1
            if step == funnel.steps:
                total, step, start = total + 1, 0, time_
        window.popleft()
        while window and window[0][0] < start:
            window.popleft()
    return total


def _walk_step_duration_stats(funnel: Funnel, events: Sequence[Event]) -> list[float]:
    if not events:
        return []
    pending, window = deque(sorted(events)), deque[Event]()
    hit = [0] * funnel.steps
    durations: list[list[int]] = [[] for _ in range(funnel.steps)]
    matched = False
    while pending:
        _fill(funnel, pending, window)
        if not window:
            break
        steps = _walk_reached(funnel, window)
        if steps == funnel.steps:
            matched = True
            times: list[int] = []
            for time_, step in window:
                if len(times) <= step:
                    times.append(time_)
            for i in range(len(times) - 1):
                hit[i] = 1
                durations[i].append(times[i + 1] - times[i])
            hit[funnel.steps - 1] = 1
        else:
            for i in range(steps):
                hit[i] = 1
        window.popleft()
    return _duration_answer(funnel, matched, hit, [np.array(d, np.int64) for d in durations])


def _duration_answer(funnel: Funnel, matched: bool, hit: Sequence[int], durations: Sequence[np.ndarray]
                     ) -> list[float]:
    if not matched and "COUNT" not in funnel.duration_functions:
        return []
    out: list[float] = []
    for step in range(funnel.steps):
        for function in funnel.duration_functions:
            if function == "COUNT":
                out.append(float(hit[step]))
            elif not matched or step == funnel.steps - 1:
                out.append(0.0)
            else:
                out.append(_statistic(function, durations[step]))
    return out


def _statistic(function: str, values: np.ndarray) -> float:
    """AVG, or a quantile as Pinot's exact quantile digest answers it: the sorted values' element at
    floor(q * n), the largest for q = 1."""
    if not len(values):
        return math.nan if function == "AVG" else 0.0
    if function == "AVG":
        largest = int(np.abs(values).max())
        total = int(values.sum()) if largest < 2**63 // len(values) else sum(int(v) for v in values)  # exact
        return total / len(values)
    quantile = {"MEDIAN": 0.5, "MIN": 0.0, "MAX": 1.0}.get(function)
    if quantile is None:
        quantile = float(function[len("PERCENTILE"):]) / 100
    index = min(math.floor(quantile * len(values)), len(values) - 1)
    return float(np.partition(values, index)[index])


# --- the same answers without the walk -------------------------------------------------------------------------

_SIGN = np.uint64(1 << 63)


class _Group:
    """A group's events in Pinot's order (time, then step), with what the windows jump through."""

    def __init__(self, funnel: Funnel, events: Sequence[Event]) -> None:
        pairs = np.array(events, dtype=np.int64).reshape(-1, 2)
        order = np.lexsort((pairs[:, 1], pairs[:, 0]))
        self.funnel = funnel
        self.t = pairs[order, 0]
        self.s = pairs[order, 1]
        self.n = n = len(self.t)
        self.u = self.t.view(np.uint64) ^ _SIGN  # the times as unsigned, in the same order: no overflow below
        self.zeros = np.flatnonzero(self.s == 0)  # every step-0 event starts a window
        self._positions: dict[int, np.ndarray] = {}
        self._runs: np.ndarray | None = None
        # each start's window: events up to the window's end, and not past a gap longer than the max step duration
        starts = self.u[self.zeros]
        width = np.uint64(funnel.window)
        beyond = starts > np.uint64(2**64 - 1) - width  # the end is past every time
        ends = np.searchsorted(self.u, np.where(beyond, 0, starts + width), "left")
        ends[beyond] = n
        if funnel.max_step_duration > 0 and n > 1:
            gaps = np.flatnonzero(np.diff(self.u) > np.uint64(funnel.max_step_duration)) + 1
            gaps = np.append(gaps, n)
            ends = np.minimum(ends, gaps[np.searchsorted(gaps, self.zeros, "right")])
        self.ends = ends

    def walked(self) -> tuple[np.ndarray, np.ndarray]:
        """The starts and ends of the windows Pinot looks at: in order, until one has taken the last event."""
        full = np.flatnonzero(self.ends == self.n)
        count = int(full[0]) + 1 if len(full) else len(self.zeros)
        return self.zeros[:count], self.ends[:count]

    def positions(self, step: int) -> np.ndarray:
        found = self._positions.get(step)
        if found is None:
            found = self._positions[step] = np.flatnonzero(self.s == step)
        return found

    def first(self, positions: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The first of ``positions`` at or after each of ``at`` (n when there is none)."""
        index = np.searchsorted(positions, at, "left")
        found = np.full(len(at), self.n, np.int64)
        inside = index < len(positions)
        found[inside] = positions[index[inside]]
        return found

    def first_other(self, at: np.ndarray, step: int) -> np.ndarray:
        """The first position at or after each of ``at`` whose step is not ``step`` (n when there is none)."""
        if self._runs is None:  # where each run of one step ends
            self._runs = np.append(np.flatnonzero(self.s[1:] != self.s[:-1]) + 1, self.n)
        changes = self._runs
        here = np.minimum(at, self.n - 1)
        run_end = changes[np.searchsorted(changes, here, "right")]
        return np.where(at >= self.n, self.n, np.where(self.s[here] != step, at, run_end))


def _reached(group: _Group, starts: np.ndarray, ends: np.ndarray, check: Check) -> np.ndarray:
    """How many steps in order each window ``[start, end)`` reaches (Pinot's ``processWindow``): between two
    matches the walk's state is fixed, so each window jumps to its next match, or to the first event a mode stops
    on, whichever comes first."""
    funnel, t, n = group.funnel, group.t, group.n
    at = starts.copy()  # where each window's walk goes on
    step = np.zeros(len(starts), np.int64)
    previous = np.full(len(starts), -1, np.int64)  # the last match's time (Pinot's initial -1 included)
    alive = np.arange(len(starts))
    for k in range(funnel.steps):
        check()
        if not len(alive):
            break
        here, end, prev = at[alive], ends[alive], previous[alive]
        match = group.first(group.positions(k), here)
        if STRICT_INCREASE in funnel.modes:  # a step event at the last match's time is skipped
            same = (match < n) & (t[np.minimum(match, n - 1)] == prev)
            if same.any():
                match[same] = group.first(group.positions(k), np.searchsorted(t, prev[same], "right"))
        stop = np.full(len(alive), n, np.int64)
        if STRICT_DEDUPLICATION in funnel.modes:  # a repeat of the step just reached
            stop = np.minimum(stop, group.first(group.positions(k - 1), here))
        if STRICT_ORDER in funnel.modes:  # any other step
            stop = np.minimum(stop, group.first_other(here, k))
        moved = (match < end) & (match < stop)
        alive, match = alive[moved], match[moved]
        step[alive] = k + 1
        previous[alive] = t[match]
        at[alive] = match + 1
    return step



def _max_step(funnel: Funnel, group: _Group, check: Check) -> int:
    starts, ends = group.walked()
    if not len(starts):
        return 0
    return int(_reached(group, starts, ends, check).max())


def _step_duration_stats(funnel: Funnel, group: _Group, check: Check) -> list[float]:
    starts, ends = group.walked()
    hit = np.zeros(funnel.steps, np.int64)
    durations = [np.zeros(0, np.int64)] * funnel.steps
    steps = _reached(group, starts, ends, check) if len(starts) else np.zeros(0, np.int64)
    done = steps == funnel.steps
    matched = bool(done.any())
    if len(steps[~done]):
        hit[:int(steps[~done].max())] = 1
    if matched:
        hit[:] = 1
        # each step's time: the first event after the last step's whose step is at least the times recorded
        at = starts[done]
        for k in range(1, funnel.steps):
            check()
            following = group.first(np.flatnonzero(group.s >= k), at + 1)
            durations[k - 1] = group.t[following] - group.t[at]
            at = following
    return _duration_answer(funnel, matched, hit.tolist(), durations)


def _complete_count(funnel: Funnel, group: _Group, check: Check) -> int:
    zeros, ends, t, n = group.zeros, group.ends, group.t, group.n
    if not len(zeros):
        return 0
    increase = STRICT_INCREASE in funnel.modes
    skip = np.zeros(n, bool)
    if increase:  # an event at the time of the one before it is skipped (the walk's `previous`)
        skip[1:] = t[1:] == t[:-1]
    # each window's first event, a step-0 one: skipped only at Pinot's initial previous time, -1
    first_skipped = (t[zeros] == -1) if increase else np.zeros(len(zeros), bool)
    state = np.where(first_skipped, 0, 1)
    count = np.zeros(len(zeros), np.int64)
    last = np.full(len(zeros), -1, np.int64)
    if funnel.steps == 1:
        done = ~first_skipped
        state[done], count[done], last[done] = 0, 1, zeros[done]
    automaton = _Automaton(funnel, group.s, skip, check)
    state, count, last = automaton.run(zeros + 1, ends, state, count, last)
    # the next window starts at the first step-0 event after this one, not before the last completion; none
    # after a window that took the last event
    since = np.where(last >= 0, t[np.maximum(last, 0)], t[zeros])
    following = np.searchsorted(zeros, np.maximum(zeros + 1, np.searchsorted(t, since, "left")), "left")
    following[ends == n] = len(zeros)
    # the windows looked at are a chain from the first: its completions summed by pointer doubling
    total = np.append(count, 0)
    jump = np.append(following, len(zeros))
    while (jump[:-1] != len(zeros)).any():
        check()
        total = total + total[jump]
        jump = jump[jump]
    return int(total[0])


class _Automaton:
    """FUNNELCOMPLETECOUNT's walk as an automaton: the state is the number of steps reached, each event maps
    every state to a state (and maybe a completion). Blocks of events are tabled for every state, and a segment
    tree over the blocks composes them, so a window's walk costs its two partial blocks and a logarithm of
    tree nodes, for every window at once."""

    def __init__(self, funnel: Funnel, steps: np.ndarray, skip: np.ndarray, check: Check) -> None:
        self.funnel, self.s, self.skip, self.n, self.check = funnel, steps, skip, len(steps), check
        self.block = block = max(16, funnel.steps)
        blocks = -(-self.n // block)
        size = 1
        while size < blocks:
            size *= 2
        self.size = size
        width = funnel.steps
        # every node: for each state, the state after its events, the completions, and the last completion
        self.out = np.tile(np.arange(width, dtype=np.int64), (2 * size, 1))
        self.count = np.zeros((2 * size, width), np.int64)
        self.last = np.full((2 * size, width), -1, np.int64)
        leaves = slice(size, size + blocks)
        state, count, last = self.out[leaves].copy(), self.count[leaves].copy(), self.last[leaves].copy()
        first = np.arange(blocks) * block
        for i in range(block):
            check()
            events = first + i
            inside = events < self.n
            state, count, last = self._apply(np.minimum(events, self.n - 1)[:, None], inside[:, None],
                                             state, count, last)
        self.out[leaves], self.count[leaves], self.last[leaves] = state, count, last
        level = size
        while level > 1:
            check()
            parents = np.arange(level // 2, level)
            self.out[parents], self.count[parents], self.last[parents] = self._compose(2 * parents,
                                                                                       2 * parents + 1)
            level //= 2

    def _apply(self, events: np.ndarray, inside: np.ndarray, state: np.ndarray, count: np.ndarray,
               last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One event (per row) read in each state: Pinot's complete-count loop body."""
        modes, step = self.funnel.modes, self.s[events]
        current = state
        if STRICT_DEDUPLICATION in modes:
            current = np.where(step == current - 1, 0, current)
        if STRICT_ORDER in modes:
            current = np.where(step != current, 0, current)
        after = np.where(~self.skip[events] & (current == step), current + 1, current)
        done = (after == self.funnel.steps) & inside
        after = np.where(done, 0, after)
        return (np.where(inside, after, state), count + done,
                np.where(done, np.broadcast_to(events, done.shape), last))

    def _compose(self, left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The nodes ``left`` then ``right`` as one."""
        middle = self.out[left]
        rows = right[:, None]
        later = self.last[rows, middle]
        return (self.out[rows, middle], self.count[left] + self.count[rows, middle],
                np.where(later >= 0, later, self.last[left]))

    def _node(self, nodes: np.ndarray, state: np.ndarray, count: np.ndarray, last: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        later = self.last[nodes, state]
        return self.out[nodes, state], count + self.count[nodes, state], np.where(later >= 0, later, last)

    def run(self, begin: np.ndarray, end: np.ndarray, state: np.ndarray, count: np.ndarray, last: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each walk's state, completions and last completion after the events ``[begin, end)`` from ``state``."""
        block, n = self.block, self.n
        begin = np.minimum(begin, end)
        first_block = -(-begin // block)
        last_block = end // block
        head_end = np.minimum(end, first_block * block)
        tail_begin = np.maximum(head_end, last_block * block)

        def events(lo: np.ndarray, hi: np.ndarray, state: np.ndarray, count: np.ndarray, last: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            for i in range(block):
                at = lo + i
                inside = at < hi
                if not inside.any():
                    break
                state, count, last = self._apply(np.minimum(at, n - 1), inside, state, count, last)
            return state, count, last

        state, count, last = events(begin, head_end, state, count, last)
        self.check()
        low = np.where(first_block < last_block, first_block, 0) + self.size
        high = np.where(first_block < last_block, last_block, 0) + self.size
        rights: list[tuple[np.ndarray, np.ndarray]] = []
        while (low < high).any():
            self.check()
            take = (low < high) & (low % 2 == 1)
            if take.any():
                rows = np.flatnonzero(take)
                state[rows], count[rows], last[rows] = self._node(low[rows], state[rows], count[rows], last[rows])
                low = low + take
            take = (low < high) & (high % 2 == 1)
            high = high - take
            if take.any():
                rights.append((np.flatnonzero(take), high[take]))
            low, high = low // 2, high // 2
        for rows, nodes in reversed(rights):
            state[rows], count[rows], last[rows] = self._node(nodes, state[rows], count[rows], last[rows])
        return events(tail_begin, end, state, count, last)


EVENTS_TYPE = "STRUCT(t BIGINT, s INTEGER)[]"  # a group's merged events, as the planner's partials build them


def _kernel(run: Callable[[Funnel, list[Event], Check], object], result: pa.DataType) -> Callable[..., pa.Array]:
    def kernel(events: pa.Array, configs: pa.Array, deadlines: pa.Array) -> pa.Array:
        try:
            return _each_group(run, result, events, configs, deadlines)
        except PastDeadline:
            raise PastDeadline("the query ran out of its time") from None
        except TooManyEvents:
            raise
        except Exception:  # a bug: the role's log has it, the caller a short message
            log.exception("a windowed funnel function failed")
            raise RuntimeError("the windowed funnel failed on an internal error (the log has the details)") from None
    return kernel


def _each_group(run: Callable[[Funnel, list[Event], Check], object], result: pa.DataType, events: pa.Array,
                configs: pa.Array, deadlines: pa.Array) -> pa.Array:
    if isinstance(events, pa.ChunkedArray):
        events = events.combine_chunks()
    flat = pc.list_flatten(events)
    owners = pc.list_parent_indices(events).to_numpy()
    times, steps = (column for column in flat.flatten())
    present = pc.and_(pc.is_valid(flat), pc.and_(pc.is_valid(times), pc.is_valid(steps))).to_numpy(
        zero_copy_only=False)
    owners = owners[present]
    times = times.fill_null(0).to_numpy(zero_copy_only=False)[present]
    steps = steps.fill_null(0).to_numpy(zero_copy_only=False)[present].astype(np.int64)
    bounds = np.searchsorted(owners, np.arange(len(events) + 1), "left")
    cache: dict[str, Funnel] = {}
    out: list[object] = []
    for row, (config, deadline) in enumerate(zip(configs.to_pylist(), deadlines.to_pylist())):
        if config is None:
            out.append(None)
            continue
        check = _no_check if deadline is None else _checker(float(deadline))
        check()
        funnel = cache.get(config)
        if funnel is None:
            funnel = cache[config] = Funnel.from_json(config)
        lo, hi = bounds[row], bounds[row + 1]
        if hi - lo > MAX_GROUP_EVENTS:
            raise TooManyEvents(int(hi - lo))
        group = list(zip(times[lo:hi].tolist(), steps[lo:hi].tolist())) if hi - lo <= SMALL_GROUP else \
            _Pairs(times[lo:hi], steps[lo:hi])
        out.append(run(funnel, group, check))  # type: ignore[arg-type]
    return pa.array(out, result)


class _Pairs(Sequence[Event]):
    """A large group's events as two arrays, read as pairs only by ``_Group``."""

    def __init__(self, times: np.ndarray, steps: np.ndarray) -> None:
        self.times, self.steps = times, steps

    def __len__(self) -> int:
        return len(self.times)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        return (int(self.times[index]), int(self.steps[index]))

    def __array__(self, dtype=None, copy=None):  # type: ignore[no-untyped-def]
        return np.stack([self.times.astype(np.int64), self.steps], axis=1)


def _checker(deadline: float) -> Check:
    def check() -> None:
        if time.monotonic() > deadline:
            raise PastDeadline
    return check


# name -> (kernel, DuckDB result type); each takes (events, the call's configuration as JSON, the deadline)
FUNCTIONS: dict[str, tuple[Callable[..., pa.Array], str]] = {
    "cuvee_funnel_max_step": (_kernel(Funnel.max_step, pa.int32()), "INTEGER"),
    "cuvee_funnel_match_step": (_kernel(Funnel.match_step, pa.list_(pa.int32())), "INTEGER[]"),
    "cuvee_funnel_complete_count": (_kernel(Funnel.complete_count, pa.int32()), "INTEGER"),
    "cuvee_funnel_step_duration_stats": (_kernel(Funnel.step_duration_stats, pa.list_(pa.float64())), "DOUBLE[]"),
}


def register(database: duckdb.DuckDBPyConnection) -> None:
    """Make the funnel functions callable in ``database`` (before its configuration is locked)."""
    for name, (kernel, result) in FUNCTIONS.items():
        database.create_function(name, kernel, [duckdb.sqltype(EVENTS_TYPE), duckdb.sqltype("VARCHAR"),
                                                duckdb.sqltype("DOUBLE")],
                                 duckdb.sqltype(result), type="arrow", null_handling="special", side_effects=False)
