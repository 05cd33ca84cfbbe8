"""Pinot's ``JSON_MATCH(jsonColumn, 'filter')`` as a DuckDB boolean expression. Pure tree building.

Pinot answers JSON_MATCH from its JSON index, and the index fixes the meaning (``JsonUtils.flatten``, the JSON
index readers, Pinot 1.2's semantics). A document is *flattened* into records: one per combination of elements of
the arrays it holds (an array of objects gives a record per object, two arrays every pair), each record a map of
leaf key paths to the leaf's text (``.addresses..street`` → ``main st``; a number as Jackson writes it, JSON
``null`` leaves out). The filter is Pinot SQL over those key paths:

- ``"$.a.b" = 'x'``, ``IN``, ``!=``, ``NOT IN``, ``IS NOT NULL``, ranges (``<``, ``>=``, ``BETWEEN``: numbers
  compared as DOUBLEs when the bound is a number, else as text), ``REGEXP_LIKE`` (a whole-value match) and ``LIKE``
  hold for a record holding that leaf with a matching value: values compare as text, so ``'1'`` matches ``1``;
  ``!=`` and ``NOT IN`` need the leaf present with another value;
- ``AND`` and ``OR`` combine conditions on the *same* record: ``"$.arr[*].a" = 1 AND "$.arr[*].b" = 2`` needs one
  element holding both;
- ``"$.arr[*].k"`` reads every element, ``"$.arr[1].k"`` the second one only (in the same record as the others);
  a key without ``$`` (``a.b = 'x'``) is the legacy spelling of ``$.a.b``;
- a document matches when any of its records does; ``IS NULL`` alone (it cannot be nested) matches the documents
  none of whose records holds the leaf.

Here the records are never built: every array a condition reads becomes a lambda over its elements (an absent or
empty array as one element holding nothing), nested in path order, and the filter holds when it holds for any
combination of elements. A condition on a leaf an element lacks is false, so the elements Pinot's flattening
leaves out (JSON ``null``, empty objects) change nothing. Pinot has no ``NOT`` inside the filter (its index
evaluates AND, OR and predicates only); it is refused here too — ``NOT JSON_MATCH(…)`` outside works. Malformed
JSON matches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from cuvee.query.commons_split import let
from cuvee.query.errors import QueryError, QueryErrorCode

NAME = "JSON_MATCH"
_SCALARS = ("VARCHAR", "BIGINT", "UBIGINT", "DOUBLE", "BOOLEAN", "HUGEINT")  # json_type of a leaf
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\*|\d+)\]")
_ELEMENT, _INDEX = "cuvee_jm_element", "cuvee_jm_index"  # + scope number: lambda parameters no column is named
_LEAF, _ARRAY, _DOCUMENT = "cuvee_jm_leaf", "cuvee_jm_array", "cuvee_jm_document"


def _error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, f"{NAME}: {message}")


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


@dataclass(frozen=True)
class _Path:
    """A key path split at its arrays: ``scopes[i]`` are the keys leading to the i-th array (from the previous
    array's element, or the document), ``indexes[i]`` its element (None: any), ``leaf`` the keys after the last."""

    scopes: tuple[tuple[str, ...], ...]
    indexes: tuple[int | None, ...]
    leaf: tuple[str, ...]

    def scope_id(self, depth: int) -> tuple[tuple[str, ...], ...]:
        """The array at ``depth`` (0-based), named by the keys to it and the arrays around it."""
        return self.scopes[:depth + 1]


def _parse_key(node: exp.Expression) -> _Path:
    """The left side of a predicate: a JSON path identifier (``"$.a[*].b"``), or the legacy ``a.b``."""
    if not isinstance(node, exp.Column):
        raise _error(f"the left side of {node.parent.sql(dialect='duckdb') if node.parent else node.sql()} must be "
                     "a JSON key path in double quotes, like \"$.a.b\"")
    text = ".".join(part.name for part in node.parts)
    text = text[1:] if text.startswith("$") else "." + text
    scopes: list[tuple[str, ...]] = []
    indexes: list[int | None] = []
    keys: list[str] = []
    at = 0
    while at < len(text):
        match = _STEP.match(text, at)
        if match is None:
            raise _error(f"cannot read the key path {node.name!r} at {text[at:]!r} (keys and [n] or [*] only)")
        if match.group(1) is not None:
            keys.append(match.group(1))
        else:
            scopes.append(tuple(keys))
            indexes.append(None if match.group(2) == "*" else int(match.group(2)))
            keys = []
        at = match.end()
    return _Path(tuple(scopes), tuple(indexes), tuple(keys))


def _value_text(node: exp.Expression) -> tuple[str, bool]:
    """A literal's text as Pinot compares it, and whether it is a number."""
    if isinstance(node, exp.Boolean):
        return ("true" if node.this else "false"), False
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return "-" + node.this.name, True
    if isinstance(node, exp.Literal):
        return node.name, not node.is_string
    raise _error(f"the value {node.sql(dialect='duckdb')} must be a literal")


@dataclass(frozen=True)
class _Predicate:
    """One condition on a leaf: ``test`` builds it over the leaf's text (known present and a scalar)."""

    path: _Path
    test: Callable[[exp.Expression], exp.Expression]
    null_check: bool = False  # IS NULL: the top-level flip of IS NOT NULL


@dataclass
class _Filter:
    """The filter as And/Or over predicates (sqlglot nodes), with every predicate's path collected."""

    tree: exp.Expression
    predicates: dict[int, _Predicate] = field(default_factory=dict)


def _compare(op: type[exp.Binary], bound: exp.Expression) -> Callable[[exp.Expression], exp.Expression]:
    text, numeric = _value_text(bound)
    if numeric:
        return lambda leaf: op(this=exp.TryCast(this=leaf, to=exp.DataType.build("DOUBLE")),
                               expression=exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DOUBLE")))
    return lambda leaf: op(this=leaf, expression=exp.Literal.string(text))


def _predicate(node: exp.Expression) -> _Predicate:
    """A leaf condition of the filter; anything Pinot's JSON index does not evaluate is a 150 naming it."""
    negated = isinstance(node, exp.Not)
    inner = node.this if negated else node
    if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
        return _Predicate(_parse_key(inner.this), lambda leaf: exp.true(), null_check=not negated)
    if isinstance(inner, exp.In) and not inner.args.get("query"):
        values = [exp.Literal.string(_value_text(v)[0]) for v in inner.expressions]
        test: Callable[[exp.Expression], exp.Expression] = lambda leaf: exp.In(this=leaf, expressions=values)
        if negated:
            return _Predicate(_parse_key(inner.this), lambda leaf: exp.Not(this=test(leaf)))
        return _Predicate(_parse_key(inner.this), test)
    if negated:
        raise _error(f"NOT is not supported inside the filter ({node.sql(dialect='duckdb')}): Pinot's JSON index "
                     "has no NOT; write != or NOT IN, or put NOT before JSON_MATCH")
    if isinstance(inner, (exp.EQ, exp.NEQ)):
        text, _ = _value_text(inner.expression)
        op = exp.EQ if isinstance(inner, exp.EQ) else exp.NEQ
        return _Predicate(_parse_key(inner.this), lambda leaf: op(this=leaf, expression=exp.Literal.string(text)))
    if isinstance(inner, (exp.GT, exp.GTE, exp.LT, exp.LTE)):
        return _Predicate(_parse_key(inner.this), _compare(type(inner), inner.expression))
    if isinstance(inner, exp.Between):
        low, high = _compare(exp.GTE, inner.args["low"]), _compare(exp.LTE, inner.args["high"])
        return _Predicate(_parse_key(inner.this), lambda leaf: exp.and_(low(leaf), high(leaf.copy())))
    if isinstance(inner, exp.RegexpLike):
        pattern, _ = _value_text(inner.expression)
        return _Predicate(_parse_key(inner.this), lambda leaf: _call("regexp_full_match", leaf,
                                                                     exp.Literal.string(pattern)))
    if isinstance(inner, exp.Like):
        pattern, _ = _value_text(inner.expression)
        return _Predicate(_parse_key(inner.this), lambda leaf: exp.Like(this=leaf,
                                                                        expression=exp.Literal.string(pattern)))
    raise _error(f"{inner.sql(dialect='duckdb')} is not a predicate Pinot's JSON index evaluates (=, !=, IN, NOT IN, "
                 "IS [NOT] NULL, <, <=, >, >=, BETWEEN, REGEXP_LIKE, LIKE, combined with AND and OR)")


def _parse_filter(text: str) -> _Filter:
    try:
        tree = sqlglot.parse_one(text, read="duckdb")
    except (SqlglotError, ValueError) as e:
        raise _error(f"cannot parse the filter {text!r}: {str(e).splitlines()[0]}") from None
    filtered = _Filter(tree)

    def collect(node: exp.Expression) -> None:
        while isinstance(node, exp.Paren):
            node = node.this
        if isinstance(node, (exp.And, exp.Or)):
            collect(node.this)
            collect(node.expression)
            return
        filtered.predicates[id(node)] = _predicate(node)

    collect(tree)
    nested = [p for p in filtered.predicates.values() if p.null_check]
    if nested and len(filtered.predicates) > 1:
        raise _error("IS NULL cannot be nested in AND or OR (Pinot's JSON index flips it over whole documents)")
    return filtered


def _json_path(keys: tuple[str, ...]) -> exp.Literal:
    return exp.Literal.string("$" + "".join(f'."{k}"' for k in keys))


def _leaf_condition(predicate: _Predicate, element: exp.Expression, bound: dict[tuple, tuple[exp.Expression,
                                                                                             exp.Expression]]
                    ) -> exp.Expression:
    """A predicate over the current element of its innermost array (or the document): the leaf present as a
    scalar, the element indexes it names matching, and its test."""
    path = predicate.path
    checks: list[exp.Expression] = []
    for depth, index in enumerate(path.indexes):
        if index is not None:  # the lambda's index counts from 1
            checks.append(exp.EQ(this=bound[path.scope_id(depth)][1].copy(), expression=exp.Literal.number(index + 1)))

    def on_leaf(leaf: exp.Column) -> exp.Expression:  # the leaf extracted once; its text read from it alone
        scalar = exp.In(this=_call("json_type", leaf), expressions=[exp.Literal.string(t) for t in _SCALARS])
        return exp.and_(scalar, predicate.test(_call("json_extract_string", leaf.copy(), exp.Literal.string("$"))))

    checks.append(let(_call("json_extract", element.copy(), _json_path(path.leaf)), _LEAF, on_leaf))
    return _call("coalesce", exp.and_(*checks), exp.false())


def _scopes(predicates: list[_Predicate]) -> list[tuple[tuple[str, ...], ...]]:
    """Every array the filter reads, parents before children (a scope is named by its path of keys)."""
    found: list[tuple[tuple[str, ...], ...]] = []
    for predicate in predicates:
        for depth in range(len(predicate.path.scopes)):
            scope = predicate.path.scope_id(depth)
            if scope not in found:
                found.append(scope)
    return sorted(found, key=len)


def _elements(container: exp.Expression, keys: tuple[str, ...], name: str) -> exp.Expression:
    """The elements of the array at ``keys`` in ``container`` as JSON values; one NULL element where there is no
    array or it is empty, so the conditions on other arrays still see the document (as Pinot's records do)."""
    def pick(listed: exp.Column) -> exp.Expression:
        return exp.Case(ifs=[exp.If(this=exp.GT(this=_call("coalesce", _call("len", listed), exp.Literal.number(0)),
                                                expression=exp.Literal.number(0)), true=listed.copy())],
                        default=exp.Array(expressions=[exp.Cast(this=exp.Null(), to=exp.DataType.build("JSON"))]))
    array = _call("json_extract", container, _json_path(keys))
    return let(exp.TryCast(this=array, to=exp.DataType.build("JSON[]")), name, pick)


def _any_record(document: exp.Expression, tree: exp.Expression, predicates: dict[int, _Predicate]) -> exp.Expression:
    """Whether the filter holds for any combination of the elements of the arrays it reads."""
    scopes = _scopes(list(predicates.values()))
    bound: dict[tuple, tuple[exp.Expression, exp.Expression]] = {}

    def body() -> exp.Expression:
        def swap(node: exp.Expression) -> exp.Expression:
            predicate = predicates.get(id(node))
            if predicate is None:
                return node
            depth = len(predicate.path.scopes)
            element = bound[predicate.path.scope_id(depth - 1)][0] if depth else document
            return _leaf_condition(predicate, element, bound)
        return tree.transform(swap, copy=False)

    def nest(level: int) -> exp.Expression:
        if level == len(scopes):
            return body()
        scope = scopes[level]
        container = bound[scope[:-1]][0] if len(scope) > 1 else document
        element = exp.column(f"{_ELEMENT}{level}", quoted=False)
        index = exp.column(f"{_INDEX}{level}", quoted=False)
        bound[scope] = (element, index)
        inner = nest(level + 1)
        mapped = _call("list_transform", _elements(container.copy(), scope[-1], f"{_ARRAY}{level}"),
                       exp.Lambda(this=inner, expressions=[exp.to_identifier(element.name),
                                                           exp.to_identifier(index.name)]))
        return _call("coalesce", _call("list_bool_or", mapped), exp.false())

    return nest(0)


def translate_json_match(args: list[exp.Expression]) -> exp.Expression:
    """``JSON_MATCH(json, 'filter')`` (see the module doc): TRUE or FALSE, never NULL."""
    if len(args) != 2:
        raise _error(f"takes 2 arguments (jsonColumn, 'filter'), got {len(args)}")
    if not (isinstance(args[1], exp.Literal) and args[1].is_string):
        raise _error(f"the filter must be a string literal, got {args[1].sql(dialect='duckdb')}")
    filtered = _parse_filter(args[1].name)
    root = filtered.tree
    while isinstance(root, exp.Paren):
        root = root.this
    only = filtered.predicates.get(id(root))

    def over(document: exp.Column) -> exp.Expression:
        if only is not None and only.null_check:  # IS NULL: no record holds the leaf
            return exp.Not(this=exp.paren(_any_record(document, root, {id(root): _Predicate(only.path, only.test)})))
        return _any_record(document, filtered.tree, filtered.predicates)

    # the document read once as JSON (NULL where it is not JSON: it matches nothing)
    return let(exp.TryCast(this=args[0], to=exp.DataType.build("JSON")), _DOCUMENT, over)
