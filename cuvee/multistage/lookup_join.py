"""Joins with a dimension table on its primary key, answered on the servers as Pinot's *lookup join*.

A dimension table (``isDimTable``) has every segment on every server of its tenant, and at most one row per
primary key (Pinot's rule: its lookups answer one row per key). So a join of a fact table with a dimension table
on the dimension's whole primary key does not need the broker: each server joins its own fact rows with its own
copy of the dimension table. That is what Pinot's ``LOOKUP`` already does inside a single-stage query, so the
join is rewritten into one::

    SELECT t.teamName, SUM(g.runs) FROM games g JOIN teams t ON t.teamID = g.teamID GROUP BY t.teamName
 →  SELECT LOOKUP('teams', 'teamName', 'teamID', g.teamID) AS teamName, SUM(g.runs) FROM games g
    WHERE LOOKUP('teams', 'teamID', 'teamID', g.teamID) IS NOT NULL
    GROUP BY LOOKUP('teams', 'teamName', 'teamID', g.teamID)

Every column of the dimension table becomes a ``LOOKUP`` of it by the fact side's key values (NULL where no row
matches: a LEFT join's answer); an INNER join also keeps only the rows whose key is found. The fact rows never
reach the broker: the query is pushed to the servers whole (aggregations, GROUP BY and LIMIT included), or, inside
a larger query, becomes one leaf of it.

Rewritten only when the answer cannot change: the FROM side is a table of the cluster (not a CTE of that name),
every join is INNER (or a LEFT one with the dimension table on the right) with an ON condition of equalities that
name each primary key column exactly once against a column of the tables before it **of the key's own type**
(LOOKUP reads a value with Java's casts: a DOUBLE 2.9 would find key 2, where the join finds nothing), every
column is a known one of exactly one table and no select alias shadows one, no ``*`` reaches the dimension table,
and the rewritten SELECT plans as a single stage. Anything else is left to the broker's join. The answer's
columns keep the names the join gives them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from cuvee.multistage.plan import conjuncts, is_cte_reference
from cuvee.query.errors import QueryError
from cuvee.query.functions import pinot_column_name
from cuvee.query.parse import TableInfo, TableResolver

Planned = Callable[[exp.Select], bool]
"""Whether a rewritten SELECT plans as a single stage (the caller's planner: the rewrite keeps a join otherwise)."""


@dataclass(frozen=True)
class _Dimension:
    """A joined dimension table: the name its LOOKUPs use, its columns, and the fact-side value of each key."""

    table: str
    label: str  # the alias (or name) its columns are qualified with
    columns: dict[str, str]  # lower-case name -> the schema's spelling
    keys: tuple[tuple[str, exp.Expression], ...]  # (primary key column, fact-side expression), in key order

    def lookup(self, column: str) -> exp.Expression:
        arguments: list[exp.Expression] = [exp.Literal.string(self.table), exp.Literal.string(column)]
        for key, value in self.keys:
            arguments += [exp.Literal.string(key), value.copy()]
        return exp.Anonymous(this="LOOKUP", expressions=arguments)


def lookup_joins(tree: exp.Expression, resolve: TableResolver, planned: Planned) -> exp.Expression:
    """``tree`` (a copy) with every join a lookup join can answer rewritten into LOOKUPs; ``planned`` says
    whether a rewritten SELECT is one the single stage answers (else its joins stay)."""
    tree = tree.copy()
    for select in list(tree.find_all(exp.Select)):
        if not select.args.get("joins"):
            continue
        try:
            rewritten = _rewritten(select, resolve)
        except QueryError:  # an unknown table: the broker's join path reports it
            rewritten = None
        if rewritten is not None and planned(rewritten):
            if select is tree:
                return rewritten
            select.replace(rewritten)
    return tree


def _rewritten(select: exp.Select, resolve: TableResolver) -> exp.Select | None:
    source = select.args.get("from_") or select.args.get("from")
    fact = source.this if source is not None else None
    if not _plain_table(fact):
        return None
    assert isinstance(fact, exp.Table)
    fact_info = resolve(fact.name)
    if fact_info is None:
        return None
    fact_label = fact.alias_or_name.lower()
    known: dict[str, set[str]] = {fact_label: {c.lower() for c in fact_info.columns}}  # label -> columns
    types: dict[str, dict[str, str]] = {fact_label: _value_types(fact_info)}  # label -> single-value types
    dimensions: list[_Dimension] = []
    filters: list[exp.Expression] = []
    for join in select.args.get("joins") or []:
        dimension = _dimension(join, resolve, known, types, dimensions)
        if dimension is None:
            return None
        known[dimension.label] = set(dimension.columns)
        dimensions.append(dimension)
        if not join.side:  # INNER: the rows whose key the dimension table holds
            filters.append(exp.Not(this=exp.Is(this=dimension.lookup(dimension.keys[0][0]), expression=exp.Null())))
    if any(isinstance(item, exp.Star) for item in select.expressions) or \
            not _unambiguous(select, known, fact_label):
        return None  # a * (its columns are the join's) or a column the join would have to resolve
    copy = select.copy()
    copy.set("joins", None)
    items = [_rewrite(item, dimensions, known) for item in copy.expressions]
    copy.set("expressions", [item if isinstance(item, exp.Alias) else exp.alias_(item, pinot_column_name(old),
                                                                                   quoted=True)
                             for item, old in zip(items, select.expressions)])  # the join's names
    for key in ("where", "group", "having", "order", "qualify"):
        value = copy.args.get(key)
        if value is not None:
            copy.set(key, _rewrite(value, dimensions, known))
    if filters:
        where = copy.args.get("where")
        condition = exp.and_(*filters, *([where.this] if where is not None else []))
        copy.set("where", exp.Where(this=condition))
    return copy


_LOOKUP_JOINS = {("", ""), ("", "INNER"), ("LEFT", ""), ("LEFT", "OUTER")}  # (side, kind) a LOOKUP can answer


def _plain_table(node: exp.Expression | None) -> bool:
    """A table of the cluster named alone: not a subquery, a qualified name, nor a CTE of that name."""
    return (isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and not node.args.get("db")
            and not is_cte_reference(node))


def _value_types(info: TableInfo) -> dict[str, str]:
    return {name.lower(): kind for name, kind in info.value_types}


def _dimension(join: exp.Join, resolve: TableResolver, known: dict[str, set[str]], types: dict[str, dict[str, str]],
               dimensions: list[_Dimension]) -> _Dimension | None:
    """The dimension table ``join`` joins on its whole primary key, or None when it is not such a join."""
    shape = ((join.side or "").upper(), (join.args.get("kind") or "").upper())
    if join.args.get("method") or join.args.get("using") or shape not in _LOOKUP_JOINS:
        return None
    table = join.this
    if not _plain_table(table):
        return None
    assert isinstance(table, exp.Table)
    info = resolve(table.name)
    if info is None or not info.dim_table or not info.primary_key:
        return None
    label = table.alias_or_name.lower()
    if label in known:
        return None
    columns = {c.lower(): c for c in info.columns}
    key_types = _value_types(info)
    condition = join.args.get("on")
    if condition is None:
        return None
    keys: dict[str, exp.Expression] = {}
    for equality in conjuncts(condition):
        if not isinstance(equality, exp.EQ):
            return None
        pair = _key_and_value(equality, label, columns, known, types)
        if pair is None or pair[0] in keys or key_types.get(pair[0]) != pair[2]:
            return None  # a value of another type: LOOKUP's Java casts would match what the join does not
        keys[pair[0]] = pair[1]
    types[label] = key_types
    wanted = [columns.get(k.lower(), k) for k in info.primary_key]
    if set(keys) != {k.lower() for k in wanted}:
        return None
    values = tuple((key, _rewrite(keys[key.lower()], dimensions, known)) for key in wanted)
    return _Dimension(info.name, label, columns, values)


def _key_and_value(equality: exp.EQ, label: str, columns: dict[str, str], known: dict[str, set[str]],
                   types: dict[str, dict[str, str]]) -> tuple[str, exp.Column, str] | None:
    """(key column, lower-case; the column of a table before it it equals; that column's type) of
    ``dim.key = other.column``."""
    for mine, other in ((equality.this, equality.expression), (equality.expression, equality.this)):
        if isinstance(mine, exp.Column) and not isinstance(mine.this, exp.Star) and \
                mine.table.lower() == label and mine.name.lower() in columns and \
                isinstance(other, exp.Column) and not isinstance(other.this, exp.Star) and _belongs(other, known):
            owner = other.table.lower() if other.table else next(
                name for name, names in known.items() if other.name.lower() in names)
            kind = types.get(owner, {}).get(other.name.lower())
            if kind is not None:  # a multi-value column has none: any-match is not a join's equality
                return mine.name.lower(), other, kind
    return None


def _belongs(column: exp.Column, known: dict[str, set[str]]) -> bool:
    """Whether ``column`` is one of the tables already joined (qualified with one's label, or one name alone)."""
    if column.table:
        return column.table.lower() in known and column.name.lower() in known[column.table.lower()]
    return sum(column.name.lower() in names for names in known.values()) == 1


def _unambiguous(select: exp.Select, known: dict[str, set[str]], fact_label: str) -> bool:
    """Every column of the SELECT is of exactly one table (or a select alias): else the join decides."""
    aliases = {item.alias.lower() for item in select.expressions if isinstance(item, exp.Alias)}
    for item in select.expressions:
        if not isinstance(item, exp.Alias):
            continue
        name = item.alias.lower()
        itself = isinstance(item.this, exp.Column) and item.this.name.lower() == name
        if not itself and any(label != fact_label and name in names for label, names in known.items()):
            return False  # ``ORDER BY name`` means the alias: a rewrite would read the dimension's column
    for column in select.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            return False
        if column.find_ancestor(exp.Subquery, exp.Select) is not select:
            return False  # a nested query reads the join's tables: left to the broker
        if column.table:
            if column.table.lower() not in known or column.name.lower() not in known[column.table.lower()]:
                return False  # an enclosing query's column, or one the table lacks (the join reports it: 710)
        else:
            owners = sum(column.name.lower() in names for names in known.values())
            if owners > 1 or (owners == 0 and column.name.lower() not in aliases):
                return False
    return True


def _rewrite(node: exp.Expression, dimensions: list[_Dimension], known: dict[str, set[str]]) -> exp.Expression:
    """``node`` with every column of a dimension table read as a LOOKUP of it."""
    by_label = {d.label: d for d in dimensions}

    def replace(found: exp.Expression) -> exp.Expression:
        if not isinstance(found, exp.Column) or isinstance(found.this, exp.Star):
            return found
        label = found.table.lower() if found.table else next(
            (name for name, columns in known.items() if found.name.lower() in columns), None)
        dimension = by_label.get(label) if label is not None else None
        if dimension is None:
            return found
        return dimension.lookup(dimension.columns[found.name.lower()])

    return node.copy().transform(replace)
