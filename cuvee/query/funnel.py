"""Pinot's funnel aggregations, split into server partials and a broker merge.

- ``FUNNEL_COUNT(STEPS(p1, p2, ...), CORRELATE_BY(c1[, c2 ...])[, SETTINGS('set', ...)])``: per step, how many
  distinct correlation values (a composite key with several columns) matched that step and every step before it,
  in any order and at any time (the sets of each step intersected with those before): a LONG array. Partials: each
  step's distinct correlation values on a server; the broker marks each value with the steps it matched and
  counts, per step, the values marked for it and every step before.
  Pinot's SETTINGS choose a counting strategy (``bitmap``, the default, exact for INT columns and hashed
  otherwise; ``set``; ``theta_sketch`` with ``nominalEntries=N``; ``partitioned``, which sums per-segment counts
  and is only right when segments are partitioned by the correlation column; ``sorted``): they are checked as
  Pinot checks them and every strategy is answered exactly, as the sketch-based distinct counts are here.
- ``FUNNELMAXSTEP``, ``FUNNELMATCHSTEP``, ``FUNNELCOMPLETECOUNT``, ``FUNNELSTEPDURATIONSTATS`` ``(timestamp,
  windowMillis, numberOfSteps, step1, ..., stepN[, 'MODE' | 'KEY=VALUE' ...])``: a group's events in time order
  (``cuvee.query.funnel_window``). Partials: each server's events of the group (time, index of the first step the
  row matches); the broker concatenates them and runs Pinot's window algorithm in a DuckDB function. Extra
  arguments: the modes STRICT_DEDUPLICATION, STRICT_ORDER, STRICT_INCREASE, KEEP_ALL (alone or as
  ``'MODE=A,B'``), ``'MAXSTEPDURATION=ms'``, and for FUNNELSTEPDURATIONSTATS ``'DURATIONFUNCTIONS=AVG,MEDIAN,
  MIN,MAX,COUNT,PERCENTILE95'`` (required). Pinot keeps any other ``KEY=VALUE`` unread; here it is refused (150).
"""

from __future__ import annotations

from sqlglot import exp

from cuvee.query.aggregate_call import AggKind, AggregateCall, MergeSpec
from cuvee.query.funnel_window import DEADLINE_SQL, KEEP_ALL, MAX_MILLIS, MODES, Funnel, valid_duration_function
from cuvee.query.pinot_aggregates import bad, int_literal, normalised, sql, string_literal

MAX_FUNNEL_STEPS = 64  # steps of one funnel (each is a partial column or a CASE branch)
_SETTINGS = ("set", "bitmap", "partitioned", "sorted", "theta_sketch", "nominalentries")
_WINDOW_FUNCTIONS = {"FUNNELMAXSTEP": ("funnelmaxstep", "cuvee_funnel_max_step"),
                     "FUNNELMATCHSTEP": ("funnelmatchstep", "cuvee_funnel_match_step"),
                     "FUNNELCOMPLETECOUNT": ("funnelcompletecount", "cuvee_funnel_complete_count"),
                     "FUNNELSTEPDURATIONSTATS": ("funnelstepdurationstats", "cuvee_funnel_step_duration_stats")}
_DURATION_FUNCTIONS = ("AVG", "MEDIAN", "MIN", "MAX", "COUNT")


FUNNEL_NAMES = frozenset({"FUNNELCOUNT", *_WINDOW_FUNCTIONS})  # normalised: those ``classify_funnel`` reads


def classify_funnel(node: exp.Expression) -> AggregateCall | None:
    """The funnel aggregation ``node`` calls, or None; bad arguments are 150."""
    if not isinstance(node, exp.Anonymous):
        return None
    key = normalised(node.name)
    if key == "FUNNELCOUNT":
        return _funnel_count(node)
    if key in _WINDOW_FUNCTIONS:
        return _window_funnel(node, key)
    return None


def _options(node: exp.Anonymous) -> dict[str, list[exp.Expression]]:
    """FUNNEL_COUNT's arguments by option name (STEPS, CORRELATEBY, SETTINGS); anything else is refused."""
    options: dict[str, list[exp.Expression]] = {}
    for arg in node.expressions:
        name = normalised(arg.name) if isinstance(arg, exp.Anonymous) else ""
        if name not in ("STEPS", "CORRELATEBY", "SETTINGS"):
            raise bad(f"invalid FUNNEL_COUNT option {arg.sql()[:80]}: expected STEPS(...), CORRELATE_BY(...) and "
                      "optionally SETTINGS(...)")
        options.setdefault(name, list(arg.expressions))  # the first of each, as Pinot reads them
    for required in ("STEPS", "CORRELATEBY"):
        if not options.get(required):
            raise bad(f"FUNNEL_COUNT requires {'CORRELATE_BY' if required == 'CORRELATEBY' else required}(...) with "
                      "at least one argument")
    return options


def _check_settings(settings: list[exp.Expression]) -> None:
    for setting in settings:
        text = "".join(string_literal(setting, "a FUNNEL_COUNT setting").split()).lower()
        key, _, value = text.partition("=")
        if key not in _SETTINGS or (key == "nominalentries" and not value):
            raise bad(f"invalid FUNNEL_COUNT setting {text[:60]!r}; known: {', '.join(_SETTINGS)}")
        if key == "nominalentries" and not value.isdigit():
            raise bad(f"FUNNEL_COUNT's nominalEntries must be an integer, got {value[:40]!r}")


def _funnel_count(node: exp.Anonymous) -> AggregateCall:
    options = _options(node)
    _check_settings(options.get("SETTINGS", []))
    steps, keys = options["STEPS"], options["CORRELATEBY"]
    if len(steps) > MAX_FUNNEL_STEPS:
        raise bad(f"FUNNEL_COUNT takes at most {MAX_FUNNEL_STEPS} steps, got {len(steps)}")
    columns = [sql(k) for k in keys]
    key = columns[0] if len(columns) == 1 else "{" + ", ".join(f"'k{i}': {c}" for i, c in enumerate(columns)) + "}"
    present = " AND ".join(f"{c} IS NOT NULL" for c in columns)
    partials = tuple(f"list(DISTINCT {key}) FILTER (WHERE ({sql(step)}) AND {present})" for step in steps)
    spec = MergeSpec(partials, "[" + ", ".join(f"flatten(list({{p{i}}}))" for i in range(len(steps))) + "]",
                     "[" + ", ".join(partials) + "]", _funnel_counts(len(steps)))
    return AggregateCall(AggKind.FUNNEL_COUNT, "funnelcount", keys[0], spec=spec)


def _funnel_counts(steps: int) -> str:
    """FUNNEL_COUNT's answer from ``{a}``, each step's correlation values (a list per step, repeats allowed): a
    grouped pass over every value marks the steps it matched (a bit each), and step k counts the values whose
    steps 0..k are all marked. A subquery of the group's row, which DuckDB runs as one join and aggregation for
    every group at once: linear, where intersecting the steps' lists one after another took 21 s for 800,000
    values."""
    masks = [f"CAST('{(1 << (k + 1)) - 1}' AS UBIGINT)" for k in range(steps)]
    counts = ", ".join(f"count(*) FILTER (WHERE (__m & {mask}) = {mask})" for mask in masks)
    marked = ("SELECT unnest(__l.s) AS __v, __l.b AS __b FROM (SELECT unnest(list_transform({a}, "
              "lambda __s, __i: {'s': __s, 'b': CAST(1 AS UBIGINT) << (__i - 1)})) AS __l)")
    return f"(SELECT [{counts}] FROM (SELECT __v, bit_or(__b) AS __m FROM ({marked}) GROUP BY __v))"


def _extras(args: list[exp.Expression], name: str) -> tuple[frozenset[str], int, tuple[str, ...]]:
    """The modes, max step duration and duration functions given after the steps."""
    modes: set[str] = set()
    max_step_duration = 0
    functions: tuple[str, ...] = ()
    for arg in args:
        text = string_literal(arg, f"{name}'s extra argument").upper()
        key, sep, value = text.partition("=")
        if not sep:
            if text not in MODES:
                raise bad(f"{name}: unknown mode {text[:40]!r}; one of {', '.join(MODES)}")
            modes.add(text)
        elif key == "MODE":
            for mode in (m.strip() for m in value.split(",")):
                if mode not in MODES:
                    raise bad(f"{name}: unknown mode {mode[:40]!r}; one of {', '.join(MODES)}")
                modes.add(mode)
        elif key == "MAXSTEPDURATION":
            if not value.strip().isdigit() or not 0 < int(value) <= MAX_MILLIS:
                raise bad(f"{name}: MAXSTEPDURATION must be a positive integer of millis, got {value[:40]!r}")
            max_step_duration = int(value)
        elif key == "DURATIONFUNCTIONS" and name == "FUNNELSTEPDURATIONSTATS":
            functions = tuple(_duration_function(f.strip()) for f in value.split(","))
        else:
            raise bad(f"{name}: unknown argument {key[:40]!r}")
    if name == "FUNNELSTEPDURATIONSTATS" and not functions:
        raise bad("FUNNELSTEPDURATIONSTATS needs its duration functions: 'DURATIONFUNCTIONS=AVG,MEDIAN,...'")
    return frozenset(modes), max_step_duration, functions


def _duration_function(name: str) -> str:
    if valid_duration_function(name):
        return name
    raise bad(f"FUNNELSTEPDURATIONSTATS: unsupported duration function {name[:40]!r}; one of "
              f"{', '.join(_DURATION_FUNCTIONS)} or PERCENTILE<0-100>")


def _window_funnel(node: exp.Anonymous, key: str) -> AggregateCall:
    name, function = _WINDOW_FUNCTIONS[key]
    args = list(node.expressions)
    if len(args) < 4:
        raise bad(f"{key} takes (timestampExpression, windowSize, numberOfSteps, stepExpression, ...), got "
                  f"{len(args)} argument(s)")
    window = int_literal(args[1], f"{key}'s window size")
    steps = int_literal(args[2], f"{key}'s number of steps")
    if not 0 < window <= MAX_MILLIS:
        raise bad(f"{key}'s window size must be from 1 to {MAX_MILLIS} (millis), got {window}")
    if not 1 <= steps <= MAX_FUNNEL_STEPS:
        raise bad(f"{key}'s number of steps must be from 1 to {MAX_FUNNEL_STEPS}, got {steps}")
    if len(args) < 3 + steps:
        raise bad(f"{key} with {steps} steps takes at least {3 + steps} arguments, got {len(args)}")
    modes, max_step_duration, functions = _extras(args[3 + steps:], key)
    try:  # the configuration's own bounds (65 duration functions were a ValueError: 450 and a stack trace)
        funnel = Funnel(window, steps, modes, max_step_duration, functions)
    except ValueError as exc:
        raise bad(f"{key}: {str(exc)[:200]}") from None
    ts = sql(args[0])
    branches = " ".join(f"WHEN {sql(step)} THEN {i}" for i, step in enumerate(args[3:3 + steps]))
    index = f"CASE {branches} ELSE {-1 if KEEP_ALL in modes else 'NULL'} END"
    event = f"{{'t': CAST(trunc({ts}) AS BIGINT), 's': CAST({index} AS INTEGER)}}"
    partial = f"list({event}) FILTER (WHERE {ts} IS NOT NULL AND ({index}) IS NOT NULL)"
    scalar = f"{function}({{a}}, '{funnel.to_json()}', {DEADLINE_SQL})"
    spec = MergeSpec((partial,), "flatten(list({p0}))", partial, scalar)
    return AggregateCall(AggKind.FUNNEL_WINDOW, name, args[0], spec=spec)
