"""Whether a segment may hold a row passing a pruning filter, from what its metadata says. Pure (a bloom filter is
asked through the facts' callback).

A segment is skipped only when its metadata *proves* no row can pass (``may_match`` is False); any doubt keeps it:

- **min/max** (Pinot's ColumnValueSegmentPruner): a comparison or IN value outside ``[min, max]`` of the column's
  non-null values cannot match. Numbers compare exactly when both sides are integers; a literal with a fraction
  widens the bounds by ``_WIDEN_ULPS`` ulps of the column's precision (DuckDB's DECIMAL casts are not correctly
  rounded, and it may compare an integer column in doubles); a NaN min or max is unsure;
- **partitions** (Pinot's PartitionSegmentPruner): an ``=``/``IN`` on the column the segment records its
  partitions for (``SegmentPartitions``) cannot match unless one value falls in one of them, by the same function;
- **bloom filter** (``bloomFilterColumns``): an ``=``/``IN`` whose every value the filter rules out cannot match.

Left alone (kept): consuming segments (the caller never asks: their rows are still coming, they have no stats
yet), columns the segment does not store (added to the schema later: read as their default value), multi-value
columns, columns stored under another type than the table serves them as (a forced schema update), columns holding
NULLs (a NULL reads as its column's default null value unless the query enables null handling, and that value is
not in the stats), column types other than INT, LONG, FLOAT, DOUBLE and STRING, and a
literal whose kind differs from the column's (a string against a number: DuckDB would cast it). An empty segment
matches nothing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from cuvee.pruning.predicate import And, Compare, In, Or, Predicate, Value
from cuvee.segment.metadata import ColumnMetadata
from cuvee.segment.indexes import value_hashes
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions, partitions

_INTEGERS = {"INT": pa.int32(), "LONG": pa.int64()}
_FLOATS = {"FLOAT": pa.float32(), "DOUBLE": pa.float64()}
_STRING = "STRING"
_NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf}

# (column, the values' ``indexes.value_hashes``) -> False when the segment certainly holds none of the values
Bloom = Callable[[str, np.ndarray], bool]

# checks one query's pruning may make over all its segments: a value checked against min/max (and partitions)
# costs 1, a segment's bloom probe (all its values at once) BLOOM_COST more; past the budget, segments are kept.
# Measured (tests/pruning, a shared 2-core machine): ~1 µs a value, 50-80 µs a bloom probe, so the budget is
# ~0.1 s of work at most, however many IN values and segments a query brings
MAX_CHECKS = 100_000
BLOOM_COST = 50


class Work:
    """One query's pruning work: each IN list hashed once (not once per segment), and a budget of value checks
    (``MAX_CHECKS``) past which every segment is kept, so pruning stays a small part of a query's time.
    ``served``: ``{column: (data type, single-value)}`` as the table is served (None: as stored); a column a
    segment stores under another type (a forced schema update changed it: the scan casts) is unknown."""

    def __init__(self, checks: int = MAX_CHECKS, served: Mapping[str, tuple[str, bool]] | None = None) -> None:
        self.left = checks
        self.served = served
        self._hashes: dict[tuple[int, str], tuple[Compare | In, dict[Value, int]]] = {}
        self._sorted: dict[tuple[int, str], tuple[In, list[Value] | None]] = {}
        self._partitions: dict[tuple[int, str, str, int], tuple[Compare | In, dict[Value, int]]] = {}

    def spend(self, count: int) -> bool:
        """Whether ``count`` more checks fit the budget (they are taken from it)."""
        self.left -= count
        return self.left >= 0

    def ordered(self, node: In, kind: str | None) -> list[Value] | None:
        """``node``'s values sorted, when all are exactly of ``kind`` ("int" or "str": compared with the column's
        stats as they are, without DuckDB's casts); else None. Sorted once per node (kept with the node)."""
        if kind not in ("int", "str"):
            return None
        key = (id(node), "sorted-" + kind)
        held = self._sorted.get(key)
        if held is None:
            same = all(isinstance(v, str) for v in node.values) if kind == "str" else \
                all(isinstance(v, int) for v in node.values)
            held = self._sorted[key] = (node, sorted(node.values) if same else None)
        return held[1]

    def partitions(self, node: Compare | In, kind: str, held: SegmentPartitions) -> dict[Value, int]:
        """Each of ``node``'s values of ``kind`` -> its partition under ``held``'s function and count, computed once
        per node and function (an IN list holds at most ``MAX_IN_VALUES`` distinct values: a bounded cost, paid
        once per query however many segments are checked)."""
        key = (id(node), kind, held.function, held.num_partitions)
        found = self._partitions.get(key)
        if found is None:
            listed = node.values if isinstance(node, In) else (node.value,)
            same = [v for v in dict.fromkeys(listed) if (isinstance(v, str) if kind == "str" else isinstance(v, int))]
            try:
                of = partitions(pa.array(same, pa.string() if kind == "str" else pa.int64()),
                                PartitionSpec(node.column, held.function, held.num_partitions)).tolist()
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
                of, same = [], []  # values the function cannot take (Modulo of a string): unsure, none known
            found = self._partitions[key] = (node, dict(zip(same, of)))
        return found[1]

    def hashes(self, node: Compare | In, kind: str, wanted: list[Value]) -> np.ndarray:
        """The ``value_hashes`` of ``wanted`` (values of ``node``, all of ``kind``), from a table built once per node
        (kept with the node, so its id is never taken by another's)."""
        key = (id(node), kind)
        held = self._hashes.get(key)
        if held is None:
            listed = node.values if isinstance(node, In) else (node.value,)
            same = [v for v in dict.fromkeys(listed) if (isinstance(v, str) if kind == "str" else isinstance(v, int))]
            hashed = value_hashes(pa.array(same, pa.string() if kind == "str" else pa.int64()))
            held = self._hashes[key] = (node, dict(zip(same, hashed.tolist())))
        table = held[1]
        return np.fromiter((table[v] for v in wanted), np.uint64, len(wanted))


@dataclass(frozen=True)
class SegmentFacts:
    """What pruning reads about one committed segment."""

    total_docs: int
    columns: Mapping[str, ColumnMetadata]
    partitions: SegmentPartitions | None = None
    bloom: Bloom | None = None


def may_match(predicate: Predicate, facts: SegmentFacts, work: Work | None = None) -> bool:
    """False only when no row of the segment can pass ``predicate`` (see the module docstring). ``work``: the
    query's (shared by its segments); without one, this call's own."""
    if facts.total_docs == 0:
        return False
    return _may_match(predicate, facts, Work() if work is None else work)


def _may_match(predicate: Predicate, facts: SegmentFacts, work: Work) -> bool:
    if isinstance(predicate, And):
        return all(_may_match(p, facts, work) for p in predicate.parts)
    if isinstance(predicate, Or):
        return any(_may_match(p, facts, work) for p in predicate.parts)
    meta = facts.columns.get(predicate.column)
    if meta is None or not meta.single_value or meta.null_count or _kind(meta) is None:
        return True
    if work.served is not None and work.served.get(predicate.column, (meta.data_type, True)) != (meta.data_type, True):
        return True  # stored under another type than it is served as: its stats are not of the values compared
    if not work.spend(1 if isinstance(predicate, Compare) else len(predicate.values).bit_length()):
        return True  # past the query's budget: kept (an IN's values are charged as they are looked at)
    if isinstance(predicate, Compare):
        if not _in_range(meta, predicate.op, predicate.value):
            return False
        return predicate.op != "=" or _may_hold(meta, predicate, [predicate.value], facts, work)
    ordered = work.ordered(predicate, _kind(meta))
    if ordered is not None:  # values all of the column's kind: those in [min, max] found by bisection
        low, high = _bound(meta.min), _bound(meta.max)
        if isinstance(low, str) == isinstance(high, str) == (_kind(meta) == "str") and low is not None \
                and high is not None:
            candidates = ordered[bisect.bisect_left(ordered, low):bisect.bisect_right(ordered, high)]
            return bool(candidates) and _may_hold(meta, predicate, candidates, facts, work)
    if not work.spend(len(predicate.values)):
        return True
    candidates = [v for v in predicate.values if _in_range(meta, "=", v)]
    return bool(candidates) and _may_hold(meta, predicate, candidates, facts, work)


def pruned(predicate: Predicate | None, segments: Iterable[tuple[Any, SegmentFacts | None]]) -> list[Any]:
    """The segments (``(segment, facts)`` pairs; facts None: nothing known, kept) ``predicate`` rules out."""
    if predicate is None:
        return []
    work = Work()
    return [segment for segment, facts in segments if facts is not None and not may_match(predicate, facts, work)]


def _kind(meta: ColumnMetadata) -> str | None:
    if meta.data_type in _INTEGERS:
        return "int"
    if meta.data_type in _FLOATS:
        return "float"
    return "str" if meta.data_type == _STRING else None


def _agrees(meta: ColumnMetadata, value: Value) -> bool:
    """Whether ``value``'s kind may be compared with the column's values as they are (no cast by DuckDB)."""
    return isinstance(value, str) if _kind(meta) == "str" else not isinstance(value, str)


def _in_range(meta: ColumnMetadata, op: str, value: Value) -> bool:
    """Whether some value in ``[min, max]`` may satisfy ``column <op> value`` (True when unsure)."""
    if not _agrees(meta, value):
        return True
    low, high = _bound(meta.min), _bound(meta.max)
    if low is None or high is None:
        return True
    kind = _kind(meta)
    if isinstance(value, float) and kind != "str":
        if not isinstance(low, (int, float)) or not isinstance(high, (int, float)):
            return True  # stats of an unexpected kind: unsure
        # a decimal literal: DuckDB casts it DECIMAL -> DOUBLE (or FLOAT) without correct rounding (0.514397298150616225
        # is not the double Python reads), and may compare an integer column in doubles: the bounds are widened
        # outward by a few ulps of the precision the comparison may be made in
        low, high = _widened(low, -math.inf, meta.data_type == "FLOAT"), _widened(high, math.inf,
                                                                                  meta.data_type == "FLOAT")
    elif kind == "float" and isinstance(value, int) and abs(value) > 2**53:
        # DuckDB may compare in doubles, rounding the integer: the bounds are widened by one ulp outward
        low, high, value = math.nextafter(float(low), -math.inf), math.nextafter(float(high), math.inf), float(value)
    if meta.data_type == "FLOAT":
        # DuckDB may round the literal to the column's float32 instead: either comparison may be the one it makes
        rounded = float(np.float32(value))
        return _compares(low, op, rounded, high) or _compares(low, op, value, high)
    return _compares(low, op, value, high)


_WIDEN_ULPS = 2  # DuckDB's DECIMAL casts were seen off by one ulp; one more for margin


def _widened(bound: float, toward: float, single: bool) -> float:
    """``bound`` moved ``_WIDEN_ULPS`` ulps ``toward`` an infinity, in float32 ulps when ``single`` (a FLOAT column:
    its stats are float32 values; one step more covers the rounding of one that is not)."""
    if single:
        with np.errstate(over="ignore"):
            wide = np.float32(bound)
        for _ in range(_WIDEN_ULPS + 1):
            wide = np.nextafter(wide, np.float32(toward))
        return float(wide)
    wide = float(bound)
    for _ in range(_WIDEN_ULPS):
        wide = math.nextafter(wide, toward)
    return wide


def _compares(low: Any, op: str, value: Any, high: Any) -> bool:
    try:
        if op == "=":
            return bool(low <= value <= high)  # type: ignore[operator]
        if op == "<":
            return bool(low < value)  # type: ignore[operator]
        if op == "<=":
            return bool(low <= value)  # type: ignore[operator]
        if op == ">":
            return bool(high > value)  # type: ignore[operator]
        return bool(high >= value)  # type: ignore[operator]
    except TypeError:  # stats of an unexpected kind: unsure
        return True


def _bound(stat: Any) -> Any:
    """A stat as a comparable bound; None (unsure) when it is not one. A NaN stat, either side, is unsure: a NaN
    with its sign bit set (``inf * 0`` in a transform makes one) is stored as the *min* "NaN", though DuckDB sorts
    every NaN above +inf, so neither end says where the column's other values lie."""
    if isinstance(stat, bool):
        return None
    if isinstance(stat, float) and math.isnan(stat):
        return None
    if isinstance(stat, (int, float)):
        return stat
    if isinstance(stat, str):
        return None if stat == "NaN" else _NON_FINITE.get(stat, stat)
    return None


def _may_hold(meta: ColumnMetadata, node: Compare | In, values: list[Value], facts: SegmentFacts, work: Work) -> bool:
    """Whether the segment may hold one of ``values`` (of ``node``, an ``=``/``IN``), by its partitions and its bloom
    filter."""
    column = node.column
    exact = [v for v in values if (isinstance(v, int) and _kind(meta) == "int")
             or (isinstance(v, str) and _kind(meta) == "str")]
    if len(exact) < len(values):
        return True  # a float against an integer column (or the like): neither partitions nor blooms can say
    held = facts.partitions
    if held is not None and held.column == column and work.spend(len(exact)):
        of = work.partitions(node, "str" if _kind(meta) == "str" else "int", held)
        exact = [v for v in exact if v not in of or of[v] in held.partitions]  # not in it: unsure, kept
        if not exact:
            return False
    if meta.has_bloom_filter and facts.bloom is not None:
        if not work.spend(BLOOM_COST):
            return True
        return facts.bloom(column, work.hashes(node, "str" if _kind(meta) == "str" else "int", exact))
    return True
