"""Pinot's sketch aggregations, as mergeable sketches of Apache DataSketches that servers build and brokers merge.

Each call becomes an ``AggregateCall`` carrying a ``MergeSpec`` (``cuvee.query.aggregate_call``): every server
builds one sketch per group over its rows and ships it serialised (a BLOB cell of its Arrow answer: a few hundred
bytes to a few kilobytes, whatever the rows), and the broker unions the servers' sketches and reads the answer
off the union. The one-step form (``QueryPlan.whole_sql``, one server) builds the same sketch and reads it through
the same union, so both routes give one answer. Answers are estimates within the sketches' documented error:

- ``DISTINCTCOUNTHLL(x[, log2m])``: an HLL sketch of ``lg_k = log2m`` (Pinot's default 8; 4 to 21), LONG. Relative
  standard error about 1.04 / sqrt(2^log2m) (6.5% at 8, 1.6% at 12); nearly exact while the sketch is in its
  sparse modes (few distinct values: DataSketches keeps 26-bit coupons then). Pinot uses clearspring's
  HyperLogLog: its estimates differ, within the same bounds.
- ``DISTINCTCOUNTHLLPLUS(x[, p])``: the same with ``lg_k = p`` (Pinot's default 14). Pinot's third argument, the
  sparse precision ``sp``, is refused (DataSketches' sparse modes have no such setting).
- ``DISTINCTCOUNTTHETASKETCH(x[, 'nominalEntries=N'])``: a Theta sketch of ``N`` nominal entries (a power of 2,
  Pinot's default 16384; 32 to 2^20), LONG; relative standard error about 1 / sqrt(N). The set-operation forms
  (filters and a post-aggregation expression) and other parameters are refused (150).
- ``PERCENTILETDIGEST(x, p[, compression])`` and ``PERCENTILETDIGEST<p>(x)``: a t-digest of ``compression`` (Pinot's
  default 100; 10 to 65535), DOUBLE. A t-digest has no proven bound: DataSketches' measured 1.6-2.3% in rank at
  the median of one sketch of 120,000 skewed values, up to ~4% after merging three, far less near the tails.
- ``PERCENTILEKLL(x, p[, k])`` and ``PERCENTILEKLL<p>(x)``: a KLL sketch of ``k`` (Pinot's default 200; 8 to 65535),
  DOUBLE, inclusive rank as Pinot asks for it; normalised rank error about 1.65% at k = 200 (99% confidence).

Each has a ``...MV`` form over every value of a multi-value column. NULLs are skipped; no rows give 0 for the
distinct counts and NULL for the percentiles (Pinot answers its default values there). A KLL sketch compacts at
random, so two runs over the same rows may answer values a rank-error apart (as in Pinot).

Distinct values are fed to the sketches as DuckDB's 64-bit ``hash`` of each distinct value of a group (one pass
in DuckDB, then one sketch update per distinct value, not per row): every server runs the same DuckDB, so equal
values hash alike on all of them. Percentile sketches take each server's values as one DOUBLE array (a
vectorised update).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import datasketches as ds
import duckdb
import numpy as np
import pyarrow as pa
import sqlglot
from sqlglot import exp

from cuvee.query.aggregate_call import AggKind, AggregateCall, MergeSpec
from cuvee.query.hash_functions import guarded
from cuvee.query.pinot_aggregates import bad, double, int_literal, number_literal, sql, string_literal

DEFAULT_HLL_LOG2M = 8  # Pinot's CommonConstants.Helix.DEFAULT_HYPERLOGLOG_LOG2M
DEFAULT_HLL_PLUS_P = 14  # DEFAULT_HYPERLOGLOG_PLUS_P
DEFAULT_THETA_NOMINAL_ENTRIES = 16384  # DEFAULT_THETA_SKETCH_NOMINAL_ENTRIES
DEFAULT_TDIGEST_COMPRESSION = 100  # PercentileTDigestAggregationFunction.DEFAULT_TDIGEST_COMPRESSION
DEFAULT_KLL_K = 200  # PercentileKLLAggregationFunction's default K
HLL_LG_K = (4, 21)  # DataSketches' range
THETA_LG_K = (5, 20)  # DataSketches allows 26; 2^20 entries (16 MB a group at most) bounds a query's memory
KLL_K = (8, 65535)
TDIGEST_K = (10, 65535)

_THETA_SEED = 9001  # DataSketches' default: every sketch of a union must share it
T = TypeVar("T")


# --- the functions each DuckDB database of a role registers (servers build, brokers merge) -------------------------

def _each_values(values: pa.Array, dtype: type[np.generic]) -> Iterator[np.ndarray | None]:
    """Each row's list of ``values`` as a numpy array of ``dtype`` (a view where it can be), None for a NULL list."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    offsets = values.offsets.to_numpy(zero_copy_only=False)
    valid = np.asarray(values.is_valid())
    flat = values.values.to_numpy(zero_copy_only=False)
    same_width_ints = flat.dtype.kind in "iu" and np.dtype(dtype).kind in "iu" and flat.dtype.itemsize == 8
    flat = flat.view(dtype) if same_width_ints else flat.astype(dtype, copy=False)  # UBIGINT hashes as int64
    for row in range(len(valid)):
        yield flat[offsets[row]:offsets[row + 1]] if valid[row] else None


def _each_merged(sketches: pa.Array, start: Callable[[], T], add: Callable[[T, bytes], object]) -> Iterator[T]:
    """Per row of ``sketches`` (a list of serialised sketches), ``start()`` with each of them added."""
    values = sketches.combine_chunks() if isinstance(sketches, pa.ChunkedArray) else sketches
    for row in values.to_pylist():
        merged = start()
        for blob in row or ():
            if blob is not None:
                add(merged, blob)
        yield merged


def _first(param: pa.Array) -> int:
    """A constant parameter's value (the planner writes a literal; DuckDB passes it as a column)."""
    return int(param[0].as_py()) if len(param) else 0


_SORT_IN_NUMPY = 256  # a group's values sorted by numpy from this many (Python's sort is quicker below)


def _distinct_build(new: Callable[[int], Any], serialised: Callable[[Any], bytes],
                    ordered: bool) -> Callable[[pa.Array, pa.Array], pa.Array]:
    def build(hashes: pa.Array, lg_k: pa.Array) -> pa.Array:
        """One serialised sketch per row of ``hashes`` (a list of UBIGINT value hashes; NULL: an empty sketch),
        walked as one Python list: most groups hold a few values, and a numpy call per group cost more than the
        sketch's updates."""
        k = _first(lg_k)
        values = hashes.combine_chunks() if isinstance(hashes, pa.ChunkedArray) else hashes
        bounds = values.offsets.to_numpy(zero_copy_only=False).tolist()
        flat = values.values.to_numpy(zero_copy_only=False).view(np.int64)
        words = flat[bounds[0]:bounds[-1]].tolist()
        out = []
        for row, present in enumerate(np.asarray(values.is_valid()).tolist()):
            sketch = new(k)
            if present:
                lo, hi = bounds[row], bounds[row + 1]
                group = words[lo - bounds[0]:hi - bounds[0]]
                if ordered:  # an HLL sketch's own (HIP) estimate depends on the order, which DuckDB's lists do not fix
                    group = np.sort(flat[lo:hi]).tolist() if hi - lo >= _SORT_IN_NUMPY else sorted(group)
                for word in group:
                    sketch.update(word)
            out.append(serialised(sketch))
        return pa.array(out, pa.binary())
    return build


def _distinct_estimate(start: Callable[[int], Any], add: Callable[[Any, bytes], object],
                       estimate: Callable[[Any], float]) -> Callable[[pa.Array, pa.Array], pa.Array]:
    def read(sketches: pa.Array, lg_k: pa.Array) -> pa.Array:
        """Per row, the union of a list of serialised sketches, estimated (rounded, as Pinot's LONG)."""
        k = _first(lg_k)
        return pa.array([round(estimate(union)) for union in _each_merged(sketches, lambda: start(k), add)],
                        pa.int64())
    return read


Quantiles = type[ds.kll_doubles_sketch] | type[ds.tdigest_double]


def _quantile_build(kind: Quantiles, ordered: bool) -> Callable[[pa.Array, pa.Array], pa.Array]:
    def build(values: pa.Array, param: pa.Array) -> pa.Array:
        """One serialised sketch per row of ``values`` (a DOUBLE list; NULL: an empty sketch), updated at once."""
        k = _first(param)
        out = []
        for numbers in _each_values(values, np.float64):
            sketch = kind(k)
            if numbers is not None and len(numbers):
                numbers = numbers[~np.isnan(numbers)]
                # a t-digest depends on the order of its input, which DuckDB's list does not fix: sorted, a server
                # (and each replica) answers alike every time; a KLL sketch compacts at random whatever the order
                sketch.update(np.sort(numbers) if ordered else np.ascontiguousarray(numbers))
            out.append(sketch.serialize())
        return pa.array(out, pa.binary())
    return build


def _quantile_merge(kind: Quantiles, inclusive: bool) -> Callable[[pa.Array, pa.Array, pa.Array], pa.Array]:
    def merge(sketches: pa.Array, param: pa.Array, percentile: pa.Array) -> pa.Array:
        """Per row, the merged sketches' quantile at ``percentile`` (0 to 100); NULL when they hold no value."""
        k, rank = _first(param), float(percentile[0].as_py()) / 100 if len(percentile) else 0.0
        out: list[float | None] = []
        for merged in _each_merged(sketches, lambda: kind(k), lambda m, blob: m.merge(kind.deserialize(blob))):
            if merged.is_empty():
                out.append(None)
            else:
                out.append(merged.get_quantile(rank, inclusive) if inclusive else merged.get_quantile(rank))
        return pa.array(out, pa.float64())
    return merge


# name -> (kernel, DuckDB parameter types, result type)
FUNCTIONS: dict[str, tuple[Callable[..., pa.Array], list[str], str]] = {
    "cuvee_hll_sketch": (_distinct_build(ds.hll_sketch, lambda s: s.serialize_compact(), True),
                         ["UBIGINT[]", "INTEGER"], "BLOB"),
    "cuvee_hll_estimate": (_distinct_estimate(ds.hll_union, lambda u, b: u.update(ds.hll_sketch.deserialize(b)),
                                              lambda u: u.get_estimate()), ["BLOB[]", "INTEGER"], "BIGINT"),
    "cuvee_theta_sketch": (_distinct_build(lambda k: ds.update_theta_sketch(k, 1.0, _THETA_SEED),
                                           lambda s: s.compact().serialize(), False), ["UBIGINT[]", "INTEGER"], "BLOB"),
    "cuvee_theta_estimate": (_distinct_estimate(
        lambda k: ds.theta_union(k, 1.0, _THETA_SEED),
        lambda u, b: u.update(ds.compact_theta_sketch.deserialize(b, _THETA_SEED)),
        lambda u: u.get_result().get_estimate()), ["BLOB[]", "INTEGER"], "BIGINT"),
    "cuvee_tdigest_sketch": (_quantile_build(ds.tdigest_double, True), ["DOUBLE[]", "INTEGER"], "BLOB"),
    "cuvee_tdigest_quantile": (_quantile_merge(ds.tdigest_double, False), ["BLOB[]", "INTEGER", "DOUBLE"],
                               "DOUBLE"),
    "cuvee_kll_sketch": (_quantile_build(ds.kll_doubles_sketch, False), ["DOUBLE[]", "INTEGER"], "BLOB"),
    "cuvee_kll_quantile": (_quantile_merge(ds.kll_doubles_sketch, True), ["BLOB[]", "INTEGER", "DOUBLE"], "DOUBLE"),
}


def register(database: duckdb.DuckDBPyConnection) -> None:
    """Make the sketch functions callable in ``database`` (before its configuration is locked)."""
    for name, (kernel, parameters, result) in FUNCTIONS.items():
        database.create_function(name, guarded(name, kernel), [duckdb.sqltype(p) for p in parameters],
                                 duckdb.sqltype(result), type="arrow", null_handling="special", side_effects=False)


# --- the planner's side: which calls are sketches, and their steps --------------------------------------------------

def _ranged(value: int, bounds: tuple[int, int], what: str) -> int:
    if not bounds[0] <= value <= bounds[1]:
        raise bad(f"{what} must be from {bounds[0]} to {bounds[1]}, got {value}")
    return value


def _hashes(x: str, multi_value: bool) -> str:
    """The distinct value hashes of a group's ``x`` (a list; NULLs skipped)."""
    if multi_value:
        return (f"list_distinct(flatten(list(list_transform(list_filter({x}, lambda __v: __v IS NOT NULL), "
                f"lambda __v: hash(__v))) FILTER (WHERE {x} IS NOT NULL)))")
    return f"list(DISTINCT hash({x})) FILTER (WHERE {x} IS NOT NULL)"


def _numbers(x: str, multi_value: bool) -> str:
    """A group's values of ``x`` as one DOUBLE list (NULLs skipped; ``+ 0`` refuses strings at the check, 700)."""
    if multi_value:
        return (f"flatten(list(list_filter(CAST({x} AS DOUBLE[]), lambda __v: __v IS NOT NULL)) "
                f"FILTER (WHERE {x} IS NOT NULL))")
    return f"list(CAST({x} + 0 AS DOUBLE)) FILTER (WHERE {x} IS NOT NULL)"


def _distinct_spec(build: str, estimate: str, values: str, k: int) -> MergeSpec:
    partial = f"{build}({values}, {k})"
    return MergeSpec((partial,), f"{estimate}(list({{p0}}), {k})", f"{estimate}([{partial}], {k})",
                     on_partial=f"{estimate}([{{p0}}], {k})")


def _quantile_spec(build: str, read: str, values: str, k: int, percentile: float) -> MergeSpec:
    partial = f"{build}({values}, {k})"
    pct = double(percentile)
    # not ranked: a server's own percentile says little about the merged one (as for PERCENTILE), so a GROUP BY
    # ordered by one sends every group
    return MergeSpec((partial,), f"{read}(list({{p0}}), {k}, {pct})", f"{read}([{partial}], {k}, {pct})")


def _theta_nominal_entries(node: exp.Expression) -> int:
    text = string_literal(node, "DISTINCTCOUNTTHETASKETCH's parameters")
    entries = DEFAULT_THETA_NOMINAL_ENTRIES
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, _, value = part.partition("=")
        if key.strip().lower() != "nominalentries":
            raise bad(f"DISTINCTCOUNTTHETASKETCH: parameter {key.strip()[:40]!r} is not supported (only "
                      "nominalEntries)")
        try:
            entries = int(value.strip())
        except ValueError:
            raise bad(f"DISTINCTCOUNTTHETASKETCH: nominalEntries must be an integer, got {value.strip()[:40]!r}")\
                from None
    if entries < 1 or entries & (entries - 1):
        raise bad(f"DISTINCTCOUNTTHETASKETCH: nominalEntries must be a power of 2, got {entries}")
    _ranged(entries.bit_length() - 1, THETA_LG_K, "DISTINCTCOUNTTHETASKETCH's log2(nominalEntries)")
    return entries.bit_length() - 1


def _distinct_call(node: exp.Anonymous, key: str, name: str, multi_value: bool) -> AggregateCall:
    args = list(node.expressions)
    upper = name.upper()
    if key == "DISTINCTCOUNTTHETASKETCH":
        if not 1 <= len(args) <= 2:
            raise bad(f"{upper}: the set-operation form (filters and a post-aggregation expression) is not "
                      f"supported; use {upper}(column[, 'nominalEntries=N'])")
        k = _theta_nominal_entries(args[1]) if len(args) == 2 else DEFAULT_THETA_NOMINAL_ENTRIES.bit_length() - 1
        spec = _distinct_spec("cuvee_theta_sketch", "cuvee_theta_estimate", _hashes(sql(args[0]), multi_value), k)
        return AggregateCall(AggKind.SKETCH, name, args[0], multi_value=multi_value, spec=spec)
    what = "log2m" if key == "DISTINCTCOUNTHLL" else "p"
    if not 1 <= len(args) <= 2:
        extra = " (the sparse precision sp is not supported)" if key == "DISTINCTCOUNTHLLPLUS" else ""
        raise bad(f"{upper} takes a column and an optional {what}{extra}, got {len(args)} arguments")
    default = DEFAULT_HLL_LOG2M if key == "DISTINCTCOUNTHLL" else DEFAULT_HLL_PLUS_P
    k = _ranged(int_literal(args[1], f"{upper}'s {what}"), HLL_LG_K, f"{upper}'s {what}") if len(args) == 2 \
        else default
    spec = _distinct_spec("cuvee_hll_sketch", "cuvee_hll_estimate", _hashes(sql(args[0]), multi_value), k)
    return AggregateCall(AggKind.SKETCH, name, args[0], multi_value=multi_value, spec=spec)


def _percentile_value(node: exp.Expression, upper: str) -> float:
    value = number_literal(node, f"{upper}'s percentile")
    if not 0 <= value <= 100:
        raise bad(f"{upper}: the percentile must be between 0 and 100, got {value:g}")
    return value


def _percentile_call(node: exp.Anonymous, key: str, suffix: str | None, name: str,
                     multi_value: bool) -> AggregateCall:
    args = list(node.expressions)
    upper = name.upper()
    tdigest = key == "PERCENTILETDIGEST"
    what, default, bounds = ("compression", DEFAULT_TDIGEST_COMPRESSION, TDIGEST_K) if tdigest else \
        ("k", DEFAULT_KLL_K, KLL_K)
    if suffix is not None:
        if len(args) not in (1, 2):
            raise bad(f"{upper} takes a column and an optional {what}")
        percentile = _percentile_value(exp.Literal.number(suffix), upper)
        rest = args[1:]
    else:
        if len(args) not in (2, 3):
            raise bad(f"{upper} takes a column, a percentile and an optional {what}")
        percentile = _percentile_value(args[1], upper)
        rest = args[2:]
    k = _ranged(int_literal(rest[0], f"{upper}'s {what}"), bounds, f"{upper}'s {what}") if rest else default
    build, read = ("cuvee_tdigest_sketch", "cuvee_tdigest_quantile") if tdigest else \
        ("cuvee_kll_sketch", "cuvee_kll_quantile")
    spec = _quantile_spec(build, read, _numbers(sql(args[0]), multi_value), k, percentile)
    return AggregateCall(AggKind.SKETCH, name, args[0], percentile, multi_value=multi_value, spec=spec)


_DISTINCT_NAMES = ("DISTINCTCOUNTHLL", "DISTINCTCOUNTHLLPLUS", "DISTINCTCOUNTTHETASKETCH")
_PERCENTILE = re.compile(r"^(PERCENTILETDIGEST|PERCENTILEKLL)(\d+(?:\.\d+)?)?$")


def classify_sketch(node: exp.Expression) -> AggregateCall | None:
    """The sketch aggregation ``node`` calls (see the module's list, with their ``...MV`` forms), or None; bad
    arguments are 150. Names match in any case."""
    if not isinstance(node, exp.Anonymous):
        return None
    upper = node.name.upper()
    multi_value = upper.endswith("MV")
    base = upper[:-2] if multi_value else upper
    if base in _DISTINCT_NAMES:
        return _distinct_call(node, base, upper.lower(), multi_value)
    match = _PERCENTILE.match(base)
    if match is not None:
        return _percentile_call(node, match.group(1), match.group(2), upper.lower(), multi_value)
    return None


def sketches_in_one_step(tree: exp.Expression) -> exp.Expression:
    """``tree`` with each sketch aggregation replaced by its one-step SQL over the rows (``MergeSpec.whole``): how the
    multi-stage engine's broker stage, which sees rows and not servers' partials, answers them with the same
    sketches and the same answers as a single-stage query one server answers."""
    def swap(node: exp.Expression) -> exp.Expression:
        call = classify_sketch(node)
        if call is None or call.spec is None:
            return node
        return sqlglot.parse_one(call.spec.whole, read="duckdb")
    return tree.transform(swap)
