"""The part of a query's WHERE that segment metadata can rule out: a small typed tree, its wire form. Pure.

Only what a segment's column statistics, partition metadata or bloom filter can answer is kept: comparisons of a
column with a literal (``=``, ``<``, ``<=``, ``>``, ``>=``, either side), ``IN`` lists of literals, ``BETWEEN`` (two
comparisons), and ``AND``/``OR`` of those. Everything else (``NOT``, ``<>``, ``BETWEEN SYMMETRIC``, functions,
expressions over columns, subqueries, casts, NULL) is *unknown*: it may match any segment. An ``AND`` keeps its
known parts (a segment that cannot match one of them cannot match the whole); an ``OR`` with an unknown part is
unknown as a whole. So the tree is never stricter than the WHERE it was taken from, which is what makes pruning by
it safe.

Literals keep their kind (integer, float, string): the pruner compares a literal with a column only when the
kinds agree (a string literal against an integer column, which DuckDB would cast, is unknown there).

The wire form (``to_json``/``from_json``) is nested lists: ``["and", [..]]``, ``["or", [..]]``,
``["cmp", column, op, value]``, ``["in", column, [values]]``. ``from_json`` checks every node and bounds the tree
(``MAX_NODES`` nodes, ``MAX_DEPTH`` levels, ``MAX_VALUES`` literals, names of ``MAX_NAME`` characters): a server
reads it from the network. The broker's extraction keeps inside the same bounds with room for a hybrid half's time
bound (``with_bound``): a larger WHERE is simply not pruned.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

OPS = ("=", "<", "<=", ">", ">=")
MAX_NODES = 256
MAX_DEPTH = 16
MAX_VALUES = 4096
MAX_NAME = 512
MAX_IN_VALUES = 2048  # an IN list's distinct values kept for membership; a longer list prunes by its range
MAX_LISTED = 1_000_000  # values of a set-aside IN list read at all (a longer one is unknown)
_INT64 = (-(2**63), 2**63 - 1)
_INTEGER = re.compile(r"[+-]?[0-9]+")
_TOKEN = re.compile(r"'[^']*(?:''[^']*)*'|[^,\s]+")  # a set-aside list's literals (strings keep their commas)

Value = Union[int, float, str]

_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_COMPARISONS: dict[type[exp.Expression], str] = {exp.EQ: "=", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}


class PredicateWireError(ValueError):
    """A pruning filter on the wire that does not follow the form above (the message says where)."""


@dataclass(frozen=True)
class Compare:
    """``column <op> value``."""

    column: str
    op: str
    value: Value


@dataclass(frozen=True)
class In:
    """``column IN (values)`` (``=`` is an ``In`` of one value where partitions and blooms are concerned)."""

    column: str
    values: tuple[Value, ...]


@dataclass(frozen=True)
class And:
    parts: tuple[Predicate, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Predicate, ...]


Predicate = Union[Compare, In, And, Or]


# ---------------------------------------------------------------- from a WHERE clause


def from_where(where: exp.Expression | None) -> Predicate | None:
    """What of ``where`` (a planned WHERE's condition, columns as canonical identifiers) pruning can use; None when
    nothing (no WHERE, or only unknown parts), or when the tree would pass the wire bounds once ``with_bound`` has
    joined a hybrid half's time bound to it (room is left for that: 2 nodes, 1 value, 1 level)."""
    if where is None:
        return None
    found = _extract(where, 0)
    if found is None or _size(found) > MAX_NODES - 2 or _values(found) > MAX_VALUES - 1 \
            or _depth(found) > MAX_DEPTH - 1:
        return None
    return found


def _extract(node: exp.Expression, depth: int) -> Predicate | None:
    if depth > MAX_DEPTH:
        return None
    while isinstance(node, exp.Paren):
        node = node.this
    # a chain of one connective (``a AND b AND c`` parses as nested pairs) is one level: flatten() walks it
    # without recursion, so a long chain does not run into MAX_DEPTH
    if isinstance(node, exp.And):
        known = [p for p in (_extract(part, depth + 1) for part in node.flatten()) if p is not None]
        return _joined(And, known) if known else None
    if isinstance(node, exp.Or):
        parts = [_extract(part, depth + 1) for part in node.flatten()]
        return None if any(p is None for p in parts) else _joined(Or, [p for p in parts if p is not None])
    if isinstance(node, exp.Between):
        if node.args.get("symmetric"):
            return None  # BETWEEN SYMMETRIC swaps its bounds when low > high: not two plain comparisons
        column, low, high = _column(node.this), _literal(node.args.get("low")), _literal(node.args.get("high"))
        if column is None or low is None or high is None:
            return None
        return And((Compare(column, ">=", low), Compare(column, "<=", high)))
    if isinstance(node, exp.In):
        column = _column(node.this)
        if column is None or node.args.get("query") is not None or node.args.get("unnest") is not None \
                or node.args.get("field") is not None:
            return None
        from cuvee.query.prescan import LIST_META  # here: cuvee.query imports this module

        if len(node.expressions) == 1 and LIST_META in node.expressions[0].meta:
            return _listed(column, str(node.expressions[0].this))  # a long list the parser set aside as text
        values = [_literal(v) for v in node.expressions]
        if not values or any(v is None for v in values):
            return None
        return _membership(column, [v for v in values if v is not None])
    op = _COMPARISONS.get(type(node))
    if op is None:
        return None
    left, right = node.this, node.expression
    column, value = _column(left), _literal(right)
    if column is None or value is None:
        column, value, op = _column(right), _literal(left), _FLIPPED[op]
    if column is None or value is None:
        return None
    return Compare(column, op, value)


def _listed(column: str, text: str) -> Predicate | None:
    """``column IN (text)`` for a set-aside list's text (``cuvee.query.prescan``: literals and commas only), as
    ``_membership`` keeps it. A list of numbers only is read at once by Arrow (integers as integers; past
    ``MAX_IN_VALUES`` values, any numbers as doubles: only their range is kept); any other list one literal at a
    time, as ``_literal`` reads them, up to the first that makes it unknown (one ``_literal`` would not read, or a
    mix of numbers and strings past ``MAX_IN_VALUES`` distinct values). A list past ``MAX_LISTED`` values is not
    read (unknown)."""
    if text.count(",") >= MAX_LISTED:
        return None
    if "'" not in text:
        parts = pc.utf8_trim_whitespace(pa.array(text.split(",")))
        for kind in (pa.int64(), pa.float64()):
            try:
                numbers = parts.cast(kind)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            if kind == pa.int64() and pc.count_distinct(numbers).as_py() <= MAX_IN_VALUES:
                return _membership(column, numbers.to_pylist())
            if len(numbers) > MAX_IN_VALUES:
                low, high = pc.min_max(numbers).values()
                if pc.all(pc.is_finite(numbers)).as_py() if kind == pa.float64() else True:
                    return And((Compare(column, ">=", low.as_py()), Compare(column, "<=", high.as_py())))
                return None
    distinct: dict[Value, None] = {}
    kinds: set[bool] = set()  # whether strings, numbers, or both were seen
    for token in _TOKEN.finditer(text):
        value = _token(token.group())
        if value is None:
            return None
        distinct[value] = None
        kinds.add(isinstance(value, str))
        if len(kinds) == 2 and len(distinct) > MAX_IN_VALUES:
            return None  # no range for numbers and strings alike: what follows cannot make it known
    return _membership(column, list(distinct)) if distinct else None


def _token(token: str) -> Value | None:
    """One literal of a set-aside list, read as ``_literal`` reads its parsed form."""
    if token.startswith("'"):
        text = token[1:-1].replace("''", "'")
        return text if len(text) <= MAX_NAME * 8 else None
    if _INTEGER.fullmatch(token):
        value = int(token)
        return value if _INT64[0] <= value <= _INT64[1] else None
    try:
        number = float(token)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _membership(column: str, values: list[Value]) -> Predicate | None:
    """``column IN values`` as pruning can use it: an ``In`` of the distinct values while they fit
    ``MAX_IN_VALUES`` (membership: min/max, partitions, bloom filter); past that, the range from the smallest to
    the largest (min/max only), when the values are all numbers or all strings (else unknown)."""
    distinct = list(dict.fromkeys(values))
    if len(distinct) <= MAX_IN_VALUES:
        return In(column, tuple(distinct))
    strings = [v for v in distinct if isinstance(v, str)]
    if strings and len(strings) < len(distinct):
        return None
    ordered = strings or [v for v in distinct if not isinstance(v, str)]
    return And((Compare(column, ">=", min(ordered)), Compare(column, "<=", max(ordered))))  # type: ignore[type-var]


def _joined(kind: type[And] | type[Or], parts: list[Predicate]) -> Predicate:
    """One node for the parts (a part of the same connective, from parentheses, is merged in)."""
    if len(parts) == 1:
        return parts[0]
    flat: list[Predicate] = []
    for part in parts:
        flat += part.parts if isinstance(part, kind) else [part]
    return kind(tuple(flat))


def _column(node: exp.Expression | None) -> str | None:
    if not isinstance(node, exp.Column) or node.table or not isinstance(node.this, exp.Identifier):
        return None
    name = node.name
    return name if 0 < len(name) <= MAX_NAME else None


def _literal(node: exp.Expression | None) -> Value | None:
    negative = False
    while isinstance(node, exp.Neg):
        negative, node = not negative, node.this
    while isinstance(node, exp.Paren):
        node = node.this
    if not isinstance(node, exp.Literal):
        return None
    text = str(node.this)
    if node.is_string:
        return None if negative or len(text) > MAX_NAME * 8 else text
    value: Value
    if _INTEGER.fullmatch(text):
        value = -int(text) if negative else int(text)
        return value if _INT64[0] <= value <= _INT64[1] else None
    try:
        number = float(text)
    except ValueError:
        return None
    number = -number if negative else number
    return number if math.isfinite(number) else None


def _size(predicate: Predicate) -> int:
    if isinstance(predicate, (And, Or)):
        return 1 + sum(_size(p) for p in predicate.parts)
    return 1


def _depth(predicate: Predicate) -> int:
    """Levels below the root, as ``from_json`` counts them (a leaf alone: 0)."""
    if isinstance(predicate, (And, Or)):
        return 1 + max(_depth(p) for p in predicate.parts)
    return 0


def _values(predicate: Predicate) -> int:
    if isinstance(predicate, (And, Or)):
        return sum(_values(p) for p in predicate.parts)
    return len(predicate.values) if isinstance(predicate, In) else 1


def with_bound(predicate: Predicate | None, column: str, op: str, value: int | str) -> Predicate:
    """``predicate AND column <op> value``: a hybrid half's time filter joined to what WHERE prunes by."""
    bound = Compare(column, op, value)
    return bound if predicate is None else And((*predicate.parts, bound) if isinstance(predicate, And)
                                               else (predicate, bound))


# ---------------------------------------------------------------- wire form


def to_json(predicate: Predicate) -> list[Any]:
    if isinstance(predicate, Compare):
        return ["cmp", predicate.column, predicate.op, predicate.value]
    if isinstance(predicate, In):
        return ["in", predicate.column, list(predicate.values)]
    return ["and" if isinstance(predicate, And) else "or", [to_json(p) for p in predicate.parts]]


def from_json(doc: Any) -> Predicate:
    """The tree ``doc`` describes; PredicateWireError when it is malformed or past the bounds."""
    budget = [MAX_NODES, MAX_VALUES]
    return _read(doc, 0, budget)


def _read(doc: Any, depth: int, budget: list[int]) -> Predicate:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        raise PredicateWireError(f"pruning filter: more than {MAX_NODES} nodes or {MAX_DEPTH} levels")
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], str):
        raise PredicateWireError("pruning filter: each node must be a list starting with its kind")
    kind = doc[0]
    if kind in ("and", "or") and len(doc) == 2 and isinstance(doc[1], list) and len(doc[1]) >= 2:
        parts = tuple(_read(p, depth + 1, budget) for p in doc[1])
        return And(parts) if kind == "and" else Or(parts)
    if kind == "cmp" and len(doc) == 4 and doc[2] in OPS:
        budget[1] -= 1
        return Compare(_name(doc[1]), doc[2], _value(doc[3]))
    if kind == "in" and len(doc) == 3 and isinstance(doc[2], list) and doc[2]:
        budget[1] -= len(doc[2])
        if budget[1] < 0:
            raise PredicateWireError(f"pruning filter: more than {MAX_VALUES} values")
        return In(_name(doc[1]), tuple(_value(v) for v in doc[2]))
    raise PredicateWireError(f"pruning filter: malformed {str(kind)[:16]!r} node")


def _name(value: Any) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise PredicateWireError(f"pruning filter: a column name must be a string of 1 to {MAX_NAME} characters")
    return value


def _value(value: Any) -> Value:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PredicateWireError("pruning filter: a value must be a number or a string")
    if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
        raise PredicateWireError("pruning filter: an integer value must fit 64 bits")
    if isinstance(value, float) and not math.isfinite(value):
        raise PredicateWireError("pruning filter: a float value must be finite")
    if isinstance(value, str) and len(value) > MAX_NAME * 8:
        raise PredicateWireError(f"pruning filter: a string value must be at most {MAX_NAME * 8} characters")
    return value
