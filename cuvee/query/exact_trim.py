"""Exact answers to a GROUP BY … ORDER BY <aggregation> LIMIT n [OFFSET m] whose servers trimmed their groups.

A server keeps only its top groups by the query's ORDER BY on its own partials (``cuvee.query.group_trim``, Pinot's
server trim). With a group's rows spread over servers, that cut can drop a group that belongs in the answer, or send
it from some servers only, so that it comes back short. Pinot answers so and says nothing; Cuvee makes the answer
exact at the broker, and pays for it only when a server did cut (most queries: no server has more groups than its
trim size, and the answer is exact in one round as before).

Design: a second round over bounds, chosen over TPUT (Cao & Wang 2004: three rounds, the second one asking every
server for each group above τ/N) because one extra round and the groups' keys suffice here. The first round gives,
for each server that cut, the ranking value ``b`` of the last group it kept: any group it did not send has at most
``b`` there (it ranks below, the server's order being the query's) — or no rows there at all. So every group seen
has a **lower bound** (what the servers sent, when what they may have cut cannot lower it: a COUNT, or every
cutting server sent the group) and an **upper bound** (plus ``b`` of each cutting server that did not send it:
summed for COUNT/SUM, the larger for MAX), and a group no server sent has at most the sum (or the largest) of the
``b``. Let τ be the ``n + m``-th largest lower bound: ``n + m`` groups are worth at least τ, so a group whose upper
bound is below τ can never be in the answer, and
- if a group no server sent could reach τ (strictly above it when the ORDER BY has that one term: a group tied
  with the last one answered may answer in its place), the bounds prove nothing: the servers that cut are asked
  again **untrimmed** (bounded by numGroupsLimit, which then says so);
- otherwise the **candidates** (upper bound >= τ) are every group that can answer; each server that cut is asked
  for the exact partials of the candidates it did not send (their keys, as JSON text: ``cuvee.query.wanted_keys``),
  and the broker merges them with the first round's. A candidate is then whole; a group that is not merges to at
  most its upper bound, below τ, so it never displaces one. When no candidate lacks a server's partials the first
  round was exact as it came and nothing more is asked.

Directions are handled by ranking on ``v`` (the value, negated for ASC: MIN ASC ranks as MAX DESC does; MAX ASC
as MIN DESC, whose lower bounds need every cutting server's partial). Ranking values that are not numbers (a MAX or
MIN of a TIMESTAMP or date ranks by its count of units), NULLs, NaN or infinities (a NaN bound compares false to
everything, so it would prove anything), fewer groups seen than answered, or more candidates than ``MAX_WANTED`` go
untrimmed: exact, at a bounded cost; so does a server whose candidates' keys are longer than ``MAX_WANTED_BYTES`` as
text (a request its request limit would refuse). Floating-point values, and integers whose sums may pass 2 ** 53 as
doubles, compare with a relative slack of 1e-9 (towards asking more); other integers exactly.

Pure: DuckDB over the servers' partials on a private cursor, no I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from cuvee.query.execute import PastDeadlineError, run_sql
from cuvee.query.group_trim import RankBound
from cuvee.query.wanted_keys import MAX_WANTED_BYTES, MAX_WANTED_ROWS, WantedKeys, WantedKeysError, encode

MAX_WANTED = MAX_WANTED_ROWS  # candidate groups asked for in a second round; more: the cutting servers go untrimmed
_RELATION = "cuvee_trimmed"
_SERVER = "__server"
_FLOAT_SLACK = 1e-9


@dataclass(frozen=True)
class Decision:
    """What the broker does after a first round in which some server cut its groups: nothing (``wanted`` and
    ``untrimmed`` empty: the answer is exact already); ask server ``i`` (an index into the replies) for the
    partials of the groups ``wanted[i]`` (key columns ``__g<j>``); or ask the servers ``untrimmed`` again without
    the trim."""

    wanted: Mapping[int, WantedKeys] = field(default_factory=dict)
    untrimmed: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.wanted and not self.untrimmed


def decide(bound: RankBound | None, rows: int, partials: Sequence[pa.Table | None],
           cut: Sequence[bool], deadline: float | None = None) -> Decision:
    """The second round, if any, that makes the answer exact. ``partials``: each server's first answer (None: it
    failed, and its errors are reported anyway); ``cut``: whether it kept fewer groups than it had, ranked by the
    query's ORDER BY; ``rows``: LIMIT + OFFSET. Past ``deadline`` (``time.monotonic()``: the grouping is
    interrupted then), ``PastDeadlineError``."""
    cutting = tuple(i for i, c in enumerate(cut) if c and partials[i] is not None)
    if not cutting or rows <= 0:
        return Decision()
    if bound is None:
        return Decision(untrimmed=cutting)
    tables = [(i, t) for i, t in enumerate(partials) if t is not None]
    if any(partials[i].num_rows == 0 for i in cutting):  # type: ignore[union-attr]  # (a cut keeps one at least)
        return Decision(untrimmed=cutting)
    if any(bound.column not in t.column_names or not _numeric(t.schema.field(bound.column).type)
           or t.column(bound.column).null_count for _, t in tables):
        return Decision(untrimmed=cutting)
    kinds = {t.schema.field(bound.column).type for _, t in tables}
    if any(_temporal(kind) for kind in kinds) and (len(kinds) > 1 or bound.combine == "sum"):
        return Decision(untrimmed=cutting)  # instants of one type only: their counts of units compare as numbers
    keys = [name for name in tables[0][1].column_names if name.startswith("__g") and name[3:].isdigit()]
    try:
        union = pa.concat_tables([_tagged(i, t, keys, bound.column) for i, t in tables], promote_options="permissive")
    except pa.ArrowException:
        return Decision(untrimmed=cutting)
    integral = all(_integral(kind) for kind in kinds)
    sign = 1.0 if bound.descending else -1.0
    combine = bound.combine if bound.descending else {"sum": "sum", "max": "min", "min": "max"}[bound.combine]
    server = union.column(_SERVER).to_numpy()
    ranked = union.column("__v").to_numpy().astype(np.float64) * sign
    if not np.isfinite(ranked).all():  # NaN compares false to every bound, and inf + -inf is NaN: prove nothing
        return Decision(untrimmed=cutting)
    # integers compare exactly while their sums over the servers stay exact as doubles (below 2 ** 53)
    integral = integral and float(np.abs(ranked).max(initial=0.0)) * len(tables) < 2.0 ** 53
    seen, values, has = _groups(union, keys, combine, sign, cutting, deadline)
    if seen.num_rows < rows or not np.isfinite(values).all():  # (a sum of finite values may overflow)
        return Decision(untrimmed=cutting)
    last = {i: float(np.min(ranked[server == i])) for i in cutting}  # v of the last group each kept
    lower, upper, unseen = _bounds(values, has, last, combine, floor_known=bound.non_negative and bound.descending)
    tau = float(np.partition(lower, len(lower) - rows)[len(lower) - rows])  # the rows-th largest lower bound
    if math.isinf(tau):
        return Decision(untrimmed=cutting)
    slack = 0.0 if integral else _FLOAT_SLACK * max(1.0, abs(tau))
    if (unseen > tau) if (bound.single_term and slack == 0.0) else (unseen >= tau - slack):
        return Decision(untrimmed=cutting)  # a group no server sent could answer
    candidate = upper >= tau - slack
    lacking = {i: candidate & ~has[i] for i in cutting}
    if sum(int(np.count_nonzero(rows_of)) for rows_of in lacking.values()) > MAX_WANTED:
        return Decision(untrimmed=cutting)
    if deadline is not None and time.monotonic() >= deadline:
        raise PastDeadlineError()
    wanted: dict[int, WantedKeys] = {}
    untrimmed: list[int] = []
    for i, rows_of in lacking.items():
        if rows_of.any():
            try:
                asked = encode(seen.select(keys).filter(pa.array(rows_of)))
            except WantedKeysError:  # a key type with no exact text form
                return Decision(untrimmed=cutting)
            if asked.encoded_bytes() > MAX_WANTED_BYTES:  # long keys: a request the server would refuse (413)
                untrimmed.append(i)
            else:
                wanted[i] = asked
    return Decision(wanted=wanted, untrimmed=tuple(untrimmed))


def _numeric(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind) or _temporal(kind)


def _temporal(kind: pa.DataType) -> bool:
    """A MAX/MIN of a TIMESTAMP or a date: ranked by its count of units (``_tagged``)."""
    return pa.types.is_timestamp(kind) or pa.types.is_date(kind)


def _integral(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or (pa.types.is_decimal(kind) and kind.scale == 0) or _temporal(kind)


def _tagged(index: int, table: pa.Table, keys: list[str], column: str) -> pa.Table:
    """One server's keys, its ranking partial (as ``__v``) and its index."""
    values = table.column(column)
    if pa.types.is_timestamp(values.type) or pa.types.is_date64(values.type):
        values = values.cast(pa.int64())
    elif pa.types.is_date32(values.type):
        values = values.cast(pa.int32())
    if not pa.types.is_floating(values.type):  # a DuckDB SUM of integers is a DECIMAL(38, 0)
        values = values.cast(pa.float64())
    return pa.table([*(table.column(k) for k in keys), values, pa.array(np.full(table.num_rows, index, np.int32))],
                    names=[*keys, "__v", _SERVER])


def _groups(union: pa.Table, keys: list[str], combine: str, sign: float, cutting: tuple[int, ...],
            deadline: float | None) -> tuple[pa.Table, np.ndarray, dict[int, np.ndarray]]:
    """Every group seen (its keys), the ``v`` of what the servers sent combined, and per cutting server whether it
    sent the group. Grouped by DuckDB: keys of any type, NULL keys one group as in the merge."""
    aggregate = {"sum": "sum", "max": "max", "min": "min"}[combine]
    sent = [f"bool_or({_SERVER} = {i}) AS __h{i}" for i in cutting]
    by = ", ".join(str(n + 1) for n in range(len(keys)))
    sql = (f"SELECT {', '.join([*keys, f'{aggregate}(CAST(__v AS DOUBLE) * {sign!r}) AS __known', *sent])} "
           f"FROM {_RELATION}" + (f" GROUP BY {by}" if keys else ""))
    seen = run_sql(sql, _RELATION, union, deadline=deadline)
    values = seen.column("__known").to_numpy().astype(np.float64)
    has = {i: seen.column(f"__h{i}").to_numpy(zero_copy_only=False).astype(bool) for i in cutting}
    return seen, values, has


def _bounds(known: np.ndarray, has: Mapping[int, np.ndarray], last: Mapping[int, float], combine: str,
            floor_known: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """Each seen group's lower and upper bound of its merged ``v``, and the upper bound of a group no server sent.
    ``last``: each cutting server's ``v`` of the last group it kept; ``floor_known``: a group it cut is worth at
    least 0 there (a COUNT ranked DESC), so what was sent is a lower bound."""
    lower, upper = known.copy(), known.copy()
    for i, sent in has.items():
        b = last[i]
        if combine == "sum":
            upper = np.where(sent, upper, upper + max(b, 0.0))
            if not floor_known:
                lower = np.where(sent, lower, -np.inf)
        elif combine == "max":
            upper = np.where(sent, upper, np.maximum(upper, b))
        else:  # min: a cut partial can only lower the merged value, by an amount the first round does not show
            lower = np.where(sent, lower, -np.inf)
    if combine == "sum":
        unseen = sum(max(b, 0.0) for b in last.values())
    else:
        unseen = max(last.values())
    return lower, upper, float(unseen)
