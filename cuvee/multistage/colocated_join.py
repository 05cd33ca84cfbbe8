"""Joins of two tables partitioned alike on the join key, answered on the servers (Pinot's colocated join).

Two OFFLINE tables whose ``segmentPartitionConfig`` uses the same function and number of partitions on the
columns a join compares have, for every partition p, all the rows that can match each other in their partition-p
segments; a push places those segments on the servers of partition p (``cuvee.cluster.offline_assignment``). So the
join of the two tables is the union over p of the join of their partition-p segments, and each server can compute
its share from its own copies: the broker asks one server per partition (one holding every segment of p of both
tables) for its joined rows, already filtered by the join's ON and WHERE, and only those rows travel::

    SELECT c.region, SUM(o.amount) FROM orders o JOIN customers c ON o.customerId = c.customerId
    WHERE c.tier = 'gold' GROUP BY c.region
 →  servers:  SELECT "o"."amount" AS "o.amount", "c"."region" AS "c.region"
              FROM cuvee_segments AS "o" JOIN cuvee_lookup_1 AS "c" ON ... WHERE "c"."tier" = 'gold'
    broker:   SELECT "__j"."c.region" AS region, SUM("__j"."o.amount") FROM "__cuvee_stage_j1" AS "__j" GROUP BY ...

A WHERE is applied to the joined rows in SQL's own order, so it runs on the servers whatever the join's kind; the
rest of the SELECT (aggregations, GROUP BY, windows, ORDER BY, LIMIT) runs at the broker over the joined rows.

Rewritten only when the answer cannot change: exactly one INNER join (or a LEFT one, whose preserved side is the
FROM table) of two tables of the cluster (not CTEs), an ON condition with an equality of the two partition columns
among its conjuncts, no ``*``, no nested query inside the SELECT, every column a known one of exactly one of the
two tables (or a select alias that is no column), and the caller's ``colocate`` finding a placement (the tables'
functions alike, every segment of one partition, one server holding each partition of both). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from cuvee.multistage.plan import RELATION_PREFIX, MadeColumns, conjuncts, is_cte_reference
from cuvee.query.errors import QueryError
from cuvee.query.functions import DIALECT, pinot_column_name, translate_scalar
from cuvee.query.lookup import LOOKUP_PREFIX, SERVER_RELATION
from cuvee.query.parse import TableInfo, TableResolver

OTHER_RELATION = f"{LOOKUP_PREFIX}1"  # what a server names the join's other table (a lookup relation on the wire)
JOINED = "__j"  # the broker's alias for the joined rows

Colocate = Callable[[TableInfo, str, TableInfo, str], Any]
"""(left table, its join column, right table, its join column) → the caller's placement of the join's partitions
on servers, or None when the two cannot be joined on their servers now."""


@dataclass(frozen=True)
class ColocatedJoin:
    """One join the servers answer: each one runs ``sql`` over its segments of ``left`` (bound as the server's
    own relation) and of ``right`` (bound as ``OTHER_RELATION``); the broker's stage reads the union of the
    answers as ``relation``."""

    relation: str
    left: str
    right: str
    sql: str
    placement: Any


@dataclass(frozen=True)
class _Side:
    table: exp.Table
    info: TableInfo
    label: str  # what its columns are qualified with: the alias, else the name as written
    columns: dict[str, str]  # lower-case name -> the schema's spelling


def colocated_joins(tree: exp.Expression, resolve: TableResolver, colocate: Colocate,
                    leaf_rows: int) -> tuple[exp.Expression, list[ColocatedJoin], MadeColumns]:
    """``tree`` (a copy) with every join the servers can answer replaced by a relation of joined rows; the joins,
    and what the broker's stage must know of the joined columns to apply Pinot's rules to them as to the tables'
    own (TIMESTAMP and numeric names; each relation's columns and multi-value ones). Each server is asked for at most ``leaf_rows + 1`` rows, as for any leaf."""
    tree = tree.copy()
    joins: list[ColocatedJoin] = []
    timestamps: set[str] = set()
    numbers: set[str] = set()
    relations: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for select in list(tree.find_all(exp.Select)):
        if not select.args.get("joins"):
            continue
        try:
            found = _rewritten(select, resolve, colocate, leaf_rows, f"{RELATION_PREFIX}j{len(joins) + 1}")
        except QueryError:  # an unknown table: the broker's join path reports it
            found = None
        if found is None:
            continue
        rewritten, join, made = found
        joins.append(join)
        timestamps |= made.timestamps
        numbers |= made.numbers
        relations.update(made.relations)
        if select is tree:
            tree = rewritten
        else:
            select.replace(rewritten)
    return tree, joins, MadeColumns(frozenset(timestamps), frozenset(numbers), relations)


def _side(node: exp.Expression | None, resolve: TableResolver) -> _Side | None:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier) or node.args.get("db") \
            or node.args.get("catalog") or node.name.startswith(RELATION_PREFIX) or is_cte_reference(node):
        return None
    info = resolve(node.name)
    if info is None:
        return None
    return _Side(node, info, node.alias_or_name, {c.lower(): c for c in info.columns})


def _kind_ok(join: exp.Join) -> bool:
    """A plain INNER join or a LEFT one (the FROM table preserved): not RIGHT, FULL, CROSS, SEMI, ANTI, ASOF,
    NATURAL, nor USING (whose merged column belongs to neither side alone)."""
    kind = (join.args.get("kind") or "").upper()
    side = (join.side or "").upper()
    return (not join.args.get("method") and not join.args.get("using") and join.args.get("on") is not None
            and kind in ("", "INNER", "OUTER") and side in ("", "LEFT") and not (kind == "OUTER" and not side))


def _rewritten(select: exp.Select, resolve: TableResolver, colocate: Colocate, leaf_rows: int, relation: str
               ) -> tuple[exp.Select, ColocatedJoin, MadeColumns] | None:
    joins = select.args.get("joins") or []
    source = select.args.get("from_") or select.args.get("from")
    if len(joins) != 1 or source is None or not _kind_ok(joins[0]):
        return None
    left, right = _side(source.this, resolve), _side(joins[0].this, resolve)
    if left is None or right is None or left.label.lower() == right.label.lower():
        return None
    if any(node is not select and isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation))
           for node in select.walk()) or any(_star(item) for item in select.expressions):
        return None
    aliases = _shadowing(select)
    owner: dict[int, tuple[_Side, str]] = {}  # id(column) -> its side and schema spelling
    for column in select.find_all(exp.Column):
        found = _owner(column, left, right, aliases)
        if found is False:
            return None
        if found is not None:
            owner[id(column)] = found
    on = joins[0].args["on"]
    keys = _partition_keys(on, left, right, owner)
    if keys is None:
        return None
    placement = colocate(left.info, keys[0], right.info, keys[1])
    if placement is None:
        return None
    where = select.args.get("where")
    filters = [on] + ([where.this] if where is not None else [])
    if any(node.find(exp.AggFunc, exp.Window) is not None for node in filters):
        return None
    filtered = [owner.get(id(column)) for node in filters for column in node.find_all(exp.Column)]
    if any(found is None for found in filtered):
        return None  # a select alias in WHERE (DuckDB reads it so): the servers' SQL has no such alias
    if not _plain_filters([found for found in filtered if found is not None]):
        return None
    # the columns the broker's part reads, each once, under a name of their own (positional: no two collide)
    outputs: dict[tuple[str, str], str] = {}
    for column in select.find_all(exp.Column):
        if id(column) in owner and not _inside(column, filters):
            side, name = owner[id(column)]
            outputs.setdefault((side.label, name), f"__c{len(outputs) + 1}")
    if not outputs:  # COUNT(*) over the join: the rows are what counts
        outputs[(left.label, keys[0])] = "__c1"
    server = _server_sql(left, right, filters, owner, outputs, leaf_rows)
    join = ColocatedJoin(relation, left.info.name, right.info.name, server, placement)
    final = _broker_select(select, relation, owner, outputs)

    def named(kind: Callable[[TableInfo], frozenset[str]]) -> frozenset[str]:
        """The joined columns of a kind, by their relation names and their own (as ``plan_stages`` pools a
        leaf's: a subquery passing one on under its name keeps its meaning)."""
        found = {(name, column) for (label, column), name in outputs.items()
                 if column in kind(_side_of(label, left, right).info)}
        return frozenset(n for pair in found for n in pair)

    multi = frozenset(name.lower() for (label, column), name in outputs.items()
                      if column in _side_of(label, left, right).info.multi_value_columns)
    return final, join, MadeColumns(named(lambda info: info.timestamp_columns),
                                    named(lambda info: info.number_columns),
                                    {relation: (frozenset(n.lower() for n in outputs.values()), multi)})


def _plain_filters(columns: list[tuple[_Side, str]]) -> bool:
    """Whether ON and WHERE can run on the servers as written: no multi-value column (Pinot's any-match rule
    applies to a table's own filters, in its leaf) nor STRING date-time one (read with its pattern), and no name
    that is TIMESTAMP or numeric on one side and not on the other (Pinot's functions are translated by name)."""
    kinds: dict[str, set[tuple[bool, bool]]] = {}
    for side, name in columns:
        info = side.info
        if name in info.multi_value_columns or name in dict(info.string_time_patterns):
            return False
        kinds.setdefault(name, set()).add((name in info.timestamp_columns, name in info.number_columns))
    return all(len(found) == 1 for found in kinds.values())


def _star(item: exp.Expression) -> bool:
    """``*`` or ``t.*`` as a select item (its columns would be named by the relation, not by Pinot's rules)."""
    return isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star))


def _shadowing(select: exp.Select) -> set[str]:
    """The select aliases (lower case) that may name something other than a column of that name: every alias
    but ``x AS x`` and ``t.x AS x``, which mean the column whichever way a clause resolves the name."""
    names = set()
    for item in select.expressions:
        if isinstance(item, exp.Alias) and not (isinstance(item.this, exp.Column)
                                                and item.this.name.lower() == item.alias.lower()):
            names.add(item.alias.lower())
    return names


def _side_of(label: str, left: _Side, right: _Side) -> _Side:
    return left if label == left.label else right


def _owner(column: exp.Column, left: _Side, right: _Side, aliases: set[str]) -> tuple[_Side, str] | None | bool:
    """The side and schema spelling of ``column``; None for a select alias that is no column; False when it
    cannot be told (an unknown qualifier or column, a name both tables have, an alias shadowing a column).
    ``aliases``: the select aliases that may name another expression (``_shadowing``)."""
    name = column.name.lower()
    if column.table:
        qualifier = column.table.lower()
        side = left if qualifier == left.label.lower() else right if qualifier == right.label.lower() else None
        if side is None or name not in side.columns:
            return False
        return side, side.columns[name]
    holders = [side for side in (left, right) if name in side.columns]
    if len(holders) == 1 and name not in aliases:
        return holders[0], holders[0].columns[name]
    if not holders and name in aliases:
        return None
    return False


def _partition_keys(on: exp.Expression, left: _Side, right: _Side,
                    owner: dict[int, tuple[_Side, str]]) -> tuple[str, str] | None:
    """The (left, right) columns of an ``=`` conjunct of ON comparing a column of each side (the candidates the
    caller's placement checks against the tables' partition columns): the first one that does."""
    for condition in conjuncts(on):
        if not isinstance(condition, exp.EQ):
            continue
        a, b = condition.this, condition.expression
        if not (isinstance(a, exp.Column) and isinstance(b, exp.Column)) or id(a) not in owner or id(b) not in owner:
            continue
        (side_a, name_a), (side_b, name_b) = owner[id(a)], owner[id(b)]
        if side_a is left and side_b is right:
            return name_a, name_b
        if side_a is right and side_b is left:
            return name_b, name_a
    return None


def _inside(node: exp.Expression, roots: list[exp.Expression]) -> bool:
    parent: exp.Expression | None = node
    while parent is not None:
        if any(parent is root for root in roots):
            return True
        parent = parent.parent
    return False


def _server_sql(left: _Side, right: _Side, filters: list[exp.Expression], owner: dict[int, tuple[_Side, str]],
                outputs: dict[tuple[str, str], str], leaf_rows: int) -> str:
    """What each server runs: the join of its two relations under the query's labels, ON and WHERE with every
    column qualified and spelled as its schema does (Pinot's functions translated), the columns the broker reads,
    at most ``leaf_rows + 1`` rows."""
    on, *where = [_qualified(node, owner) for node in filters]
    items = [exp.alias_(exp.column(column, table=label, quoted=True), name, quoted=True)
             for (label, column), name in outputs.items()]
    joined = exp.select(*items).from_(exp.Table(this=exp.to_identifier(SERVER_RELATION),
                                                alias=exp.TableAlias(this=exp.to_identifier(left.label, quoted=True))))
    joined = joined.join(exp.Table(this=exp.to_identifier(OTHER_RELATION),
                                   alias=exp.TableAlias(this=exp.to_identifier(right.label, quoted=True))),
                         on=on, join_type="LEFT" if _is_left(filters[0]) else None)
    if where:
        joined = joined.where(where[0], copy=False)
    joined = joined.limit(leaf_rows + 1)
    named = [owner[id(column)] for node in filters for column in node.find_all(exp.Column)]
    timestamps = frozenset(name for side, name in named if name in side.info.timestamp_columns)
    numbers = frozenset(name for side, name in named if name in side.info.number_columns)
    return translate_scalar(joined, timestamps, number_columns=numbers).sql(dialect=DIALECT)


def _qualified(node: exp.Expression, owner: dict[int, tuple[_Side, str]]) -> exp.Expression:
    """A copy of filter ``node`` with each column as ``"label"."Spelling"``: the servers bind every column under
    its schema's spelling, which a quoted name in another case would miss."""
    found = node.copy()
    for original, column in zip(list(node.find_all(exp.Column)), list(found.find_all(exp.Column))):
        side, name = owner[id(original)]
        spelled = exp.column(name, table=side.label, quoted=True)
        if column is found:
            return spelled
        column.replace(spelled)
    return found


def _is_left(on: exp.Expression) -> bool:
    join = on.parent
    return isinstance(join, exp.Join) and (join.side or "").upper() == "LEFT"


def _broker_select(select: exp.Select, relation: str, owner: dict[int, tuple[_Side, str]],
                   outputs: dict[tuple[str, str], str]) -> exp.Select:
    """``select`` over the joined rows: FROM the relation, no join, no WHERE (both ran on the servers), every
    column of the tables read from the relation, and each select item keeping the name it had."""
    final = select.copy()
    originals = list(select.find_all(exp.Column))
    copies = list(final.find_all(exp.Column))
    for original, column in zip(originals, copies):  # the same walk over equal trees: paired in order
        if id(original) not in owner:
            continue
        side, name = owner[id(original)]
        if (side.label, name) in outputs:
            column.replace(exp.column(outputs[(side.label, name)], table=JOINED, quoted=True))
    items = []
    for before, after in zip(select.expressions, final.expressions):
        if isinstance(after, exp.Alias) or after.sql(dialect=DIALECT) == before.sql(dialect=DIALECT):
            items.append(after)
        else:
            items.append(exp.alias_(after, pinot_column_name(before), quoted=True))
    final.set("expressions", items)
    final.set("joins", None)
    final.set("where", None)
    final.set("from_" if "from_" in final.args else "from",
              exp.From(this=exp.Table(this=exp.to_identifier(relation, quoted=True),
                                      alias=exp.TableAlias(this=exp.to_identifier(JOINED)))))
    return final
