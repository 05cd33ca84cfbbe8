"""Pinot's multi-value columns in WHERE: a comparison with a multi-value column holds when any of its values
matches (``DivAirports = 'SEA'``, ``IN``, ``BETWEEN``, ``<`` …, ``LIKE``, ``REGEXP_LIKE``); the negations
(``!=``, ``NOT IN``, ``NOT BETWEEN``, ``NOT LIKE``) hold when none does — Pinot's rule for its exclusive predicates
on multi-value columns (``BaseDictionaryBasedPredicateEvaluator.applyMV``).

Each such predicate becomes ``len(list_filter(column, v -> <the predicate on v>)) > 0`` (or its negation) in the
servers' SQL: DuckDB holds a multi-value column as a LIST, and would otherwise refuse to compare a list with a
scalar. Only predicates whose other side is constant are rewritten; a multi-value column compared with another
column is refused with a clear error (Pinot has no meaning for it either).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from sqlglot import exp

from cuvee.query.errors import QueryError, QueryErrorCode

_VALUE = "cuvee_mv_value"  # the lambda's parameter: not a name a column can clash with in a query that parses
_FLIPPED: dict[type[exp.Expression], type[exp.Expression]] = {
    exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE}
_NEGATED = (exp.NEQ,)

IsMultiValue = Callable[[exp.Column], bool]
"""Whether a column reference names a multi-value column (by name on a server; by its source at the broker)."""


def rewrite_multi_value_predicates(select: exp.Select, columns: Collection[str]) -> exp.Select:
    """``select`` with every WHERE predicate on a multi-value column in ``columns`` made Pinot's any-match."""
    if not columns:
        return select
    names = frozenset(columns)
    group = select.args.get("group")
    grouped = {e.name for e in group.expressions if isinstance(e, exp.Column)} if group is not None else set()
    outside = names - grouped  # a GROUP BY key is one value per group outside WHERE: comparable there
    for key in ("expressions", "having", "order"):
        value = select.args.get(key)
        for part in value if isinstance(value, list) else [value] if value is not None else []:
            for node in part.find_all(*_FLIPPED, exp.In, exp.Between, exp.Like, exp.ILike, exp.RegexpLike):
                subject = _mv_subject(node, lambda column: column.name in outside)
                if subject is not None:
                    raise QueryError(QueryErrorCode.SQL_PARSING,
                                     f"multi-value column {subject.name!r} can be compared only in WHERE: "
                                     f"{node.sql(dialect='duckdb')}")
    return rewrite_multi_value_where(select, lambda column: column.name in names)


def rewrite_multi_value_where(select: exp.Select, is_mv: IsMultiValue) -> exp.Select:
    """``select`` with every WHERE predicate on a column ``is_mv`` accepts made Pinot's any-match (nothing else
    checked: the broker's stage, whose columns come from relations, decides which are multi-value by source)."""
    where = select.args.get("where")
    if where is None:
        return select
    select.set("where", where.transform(lambda node: _rewrite(node, is_mv), copy=True))
    return select


def _rewrite(node: exp.Expression, names: IsMultiValue) -> exp.Expression:
    if isinstance(node, exp.Not) and _mv_subject(node.this, names) is not None:
        inner = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if isinstance(inner, _NEGATED):  # NOT (col != x): some value equals x
            return _any_match(_positive(inner), names)
        return exp.Not(this=_any_match(inner, names))  # none of the values matches
    if _mv_subject(node, names) is None:
        return node
    if isinstance(node, _NEGATED):
        return exp.Not(this=_any_match(_positive(node), names))
    return _any_match(node, names)


def _positive(node: exp.Expression) -> exp.Expression:
    assert isinstance(node, exp.NEQ)
    return exp.EQ(this=node.this.copy(), expression=node.expression.copy())


def _mv_subject(node: exp.Expression, names: IsMultiValue) -> exp.Column | None:
    """The multi-value column ``node`` compares, when it is a predicate on one."""
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, tuple(_FLIPPED)):
        for side in (node.this, node.expression):
            if _is_mv(side, names):
                return side
        return None
    if isinstance(node, (exp.In, exp.Between, exp.Like, exp.ILike, exp.RegexpLike)) and _is_mv(node.this, names):
        return node.this
    return None


def _is_mv(node: exp.Expression, names: IsMultiValue) -> bool:
    return isinstance(node, exp.Column) and names(node)


def _any_match(node: exp.Expression, names: IsMultiValue) -> exp.Expression:
    node = node.unnest() if isinstance(node, exp.Paren) else node
    predicate = node.copy()
    if isinstance(node, tuple(_FLIPPED)) and not _is_mv(node.this, names):  # 'x' < col: col > 'x'
        predicate = _FLIPPED[type(node)](this=node.expression.copy(), expression=node.this.copy())
    column = predicate.this
    others = [arg for key, arg in predicate.args.items() if key != "this" for arg in (
        arg if isinstance(arg, list) else [arg]) if isinstance(arg, exp.Expression)]
    if any(other.find(exp.Column) is not None or isinstance(other, (exp.Subquery, exp.Select)) for other in others):
        raise QueryError(QueryErrorCode.SQL_PARSING,
                         f"multi-value column {column.name!r} can only be compared with constants: "
                         f"{node.sql(dialect='duckdb')}")
    predicate.set("this", exp.column(_VALUE, quoted=False))
    matches = exp.Anonymous(this="list_filter", expressions=[
        column.copy(), exp.Lambda(this=predicate, expressions=[exp.to_identifier(_VALUE)])])
    return exp.Paren(this=exp.GT(this=exp.Anonymous(this="len", expressions=[matches]),
                                 expression=exp.Literal.number(0)))
