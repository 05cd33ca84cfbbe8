"""One aggregation of a query, as the planner splits it: its kind, its arguments and how it merges.

The aggregations that have been here from the start (COUNT, SUM, MIN, MAX, AVG, the distinct counts,
PERCENTILE) are merged by tables in ``cuvee.query.rewrite`` keyed by their kind. Pinot's aggregations with several
arguments and typed answers (``cuvee.query.pinot_aggregates``, ``cuvee.query.funnel``) carry their own
``MergeSpec`` instead: the SQL of each step, written for that call's arguments. Kept apart from
``cuvee.query.functions`` so that the modules which build specs can import these types without a cycle.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp

DIALECT = "duckdb"  # what the servers run, and how translated trees are written


class AggKind(enum.Enum):
    """How an aggregation is split into partial and final steps."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    MIN_MAX_RANGE = "minmaxrange"
    DISTINCT_COUNT = "distinctcount"
    DISTINCT_COUNT_HLL = "distinctcounthll"
    DISTINCT_SUM = "distinctsum"
    DISTINCT_AVG = "distinctavg"
    PERCENTILE = "percentile"
    # merged by their own MergeSpec
    FIRST_WITH_TIME = "firstwithtime"
    LAST_WITH_TIME = "lastwithtime"
    EXPR_MIN = "exprmin"
    EXPR_MAX = "exprmax"
    MODE = "mode"
    HISTOGRAM = "histogram"
    ARRAY_AGG = "arrayagg"
    FUNNEL_COUNT = "funnelcount"
    FUNNEL_WINDOW = "funnelwindow"  # FUNNELMAXSTEP, FUNNELMATCHSTEP, FUNNELCOMPLETECOUNT, FUNNELSTEPDURATIONSTATS
    SKETCH = "sketch"  # DISTINCTCOUNTHLL(PLUS), DISTINCTCOUNTTHETASKETCH, PERCENTILETDIGEST, PERCENTILEKLL


@dataclass(frozen=True)
class MergeSpec:
    """An aggregation's steps as SQL for one call's arguments (no ``{x}`` left to fill):

    - ``partials``: what each server computes per group over its rows (one column each);
    - ``final``: the broker's aggregate over the servers' partial columns, written over ``{p0}``, ``{p1}``...;
    - ``scalar``: the expression over that aggregate's value ``{a}`` that gives the answer (one level up, so that a
      merged value is built once per group);
    - ``whole``: the aggregate computed in one step over the rows, whose value ``scalar`` turns into the same
      answer with the same type (``QueryPlan.whole_sql``, for a query one server answers);
    - ``on_partial``: the aggregation's value on one server's partial row (``{p0}``...) for the server's ranking
      of its groups (``cuvee.query.group_trim``), or None when it has none that means anything.
    """

    partials: tuple[str, ...]
    final: str
    whole: str
    scalar: str = "{a}"
    on_partial: str | None = None


@dataclass(frozen=True)
class AggregateCall:
    """One aggregation in a query: its kind, its argument (None for ``COUNT(*)``) and its percentile, if any.

    ``name`` is Pinot's lower-case function name, used for the result column name (``count(*)``, ``sum(x)``).
    ``spec`` is set for the aggregations that carry their own steps (see ``MergeSpec``).
    """

    kind: AggKind
    name: str
    arg: exp.Expression | None
    percentile: float | None = None
    multi_value: bool = False  # a ...MV aggregation: over every value of a multi-value column, not per row
    spec: MergeSpec | None = None


_SLOT = re.compile(r"\{(p\d+|P\d+|a)\}")


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with its ``{p0}``/``{P0}``/``{a}`` slots replaced: unlike ``str.format`` it leaves every other
    brace alone, so DuckDB's struct literals (``{'t': t, 'v': v}``) can be written in the templates."""
    return _SLOT.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)
