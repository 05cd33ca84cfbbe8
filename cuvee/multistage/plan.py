"""Split a query a scatter-gather cannot answer into stages: leaves the servers answer, and the rest for the broker.

A *leaf* is a SELECT over one table with nothing a single stage cannot do (no join, subquery, window or set
operation inside it, and no column of an enclosing query): it runs through the ordinary single-stage path —
pushed to the servers whole, aggregations, GROUP BY and LIMIT included — and its answer becomes a relation of the
broker's stage. Every other table the query reads is fetched as a leaf of its own: the columns the query names,
filtered by the WHERE conjuncts that concern that table alone. Those conjuncts move into the leaf (and leave the
broker's query) only when the SELECT has no outer join, whose null-supplying side a moved filter would change.
The broker then runs what is left — the joins, set operations, windows, subqueries over leaf relations — in
DuckDB under a memory bound (``cuvee.multistage.engine``).

Pure: no I/O. Every leaf is asked for at most ``leaf_rows + 1`` rows, so the broker can tell a leaf that was cut.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from cuvee.config.table import raw_table_name
from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.funnel import FUNNEL_NAMES
from cuvee.query.functions import DIALECT, classify_aggregate, pinot_column_name, translate_scalar
from cuvee.query.lookup import is_lookup
from cuvee.query.multivalue import rewrite_multi_value_where
from cuvee.query.parse import TableInfo, TableResolver
from cuvee.query.pinot_aggregates import AGGREGATE_NAMES, normalised
from cuvee.query.sketches import sketches_in_one_step
from cuvee.query.virtual_columns import VIRTUAL_COLUMNS

RELATION_PREFIX = "__cuvee_stage_"


@dataclass(frozen=True)
class Leaf:
    """One single-stage query the servers answer; the broker's query reads its answer as ``relation``."""

    relation: str
    sql: str  # Pinot SQL for the single-stage path
    table: str  # the table as the query names it
    whole: bool  # a whole SELECT of the query (its answer is that SELECT's); else a table's filtered rows


@dataclass(frozen=True)
class StagePlan:
    """The leaves, and the broker's query over their relations (DuckDB SQL)."""

    leaves: tuple[Leaf, ...]
    final_sql: str
    column_names: tuple[str, ...] | None  # Pinot's names for the answer's columns; None: the engine's own


@dataclass(frozen=True)
class InSubquery:
    """An uncorrelated ``x IN (SELECT one column FROM one table …)``: the servers answer the subquery first, and
    its values take its place in the query (Pinot's IN_SUBQUERY), so what is left may still run as one stage."""

    node: exp.In  # in the tree ``in_subqueries`` was given
    sql: str  # the subquery as single-stage SQL
    table: str


INLINE_VALUES = 10_000  # an IN-subquery's answer of up to this many values becomes a list in the query


def in_subqueries(tree: exp.Expression, resolve: TableResolver, leaf_rows: int) -> list[InSubquery]:
    """The IN-subqueries of ``tree`` a single stage answers whole (the innermost ones)."""
    try:
        return _in_subqueries(tree, resolve, leaf_rows)
    except RecursionError:
        raise QueryError(QueryErrorCode.SQL_PARSING, "the query is nested too deeply to plan") from None


def _in_subqueries(tree: exp.Expression, resolve: TableResolver, leaf_rows: int) -> list[InSubquery]:
    found: list[InSubquery] = []
    for node in tree.find_all(exp.In):
        query = node.args.get("query")
        select = query.this if isinstance(query, exp.Subquery) else query
        if (isinstance(select, exp.Select) and len(select.expressions) == 1
                and not isinstance(select.expressions[0], exp.Star) and _is_leaf(select, resolve)):
            table = _source_table(select)
            assert table is not None
            found.append(InSubquery(node, _leaf_sql(select, leaf_rows), table.name))
    return found


def inline_values(subquery: InSubquery, values: list[object], relation: str) -> bool:
    """Put the subquery's answer in its place: a list of literals (at most ``INLINE_VALUES`` of them), else the
    relation ``relation`` — True then: the caller registers the answer under that name."""
    literals = _literals(values) if len(values) <= INLINE_VALUES else None
    node = subquery.node
    if literals is None:
        node.set("query", exp.Subquery(this=exp.select("*").from_(exp.to_table(relation, quoted=True))))
        return True
    if not literals:
        node.replace(exp.false())  # x IN (no rows) is false, also for a NULL x
    else:
        node.set("query", None)
        node.set("expressions", literals)
    return False


def _literals(values: list[object]) -> list[exp.Expression] | None:
    """SQL literals for the values (each once), or None when one has no literal form here (a list, a NaN)."""
    literals: list[exp.Expression] = []
    seen: set[object] = set()
    for value in values:
        key = (type(value), value) if not isinstance(value, list) else None
        if key is not None and key in seen:
            continue
        if value is None:
            literals.append(exp.null())
        elif isinstance(value, bool):
            literals.append(exp.true() if value else exp.false())
        elif isinstance(value, int):
            literals.append(exp.Literal.number(value))
        elif isinstance(value, float) and math.isfinite(value):  # a DOUBLE: a decimal literal misses a FLOAT's value
            literals.append(exp.cast(exp.Literal.number(repr(value)), exp.DataType.build("DOUBLE")))
        elif isinstance(value, decimal.Decimal) and value.is_finite():
            literals.append(exp.Literal.number(str(value)))
        elif isinstance(value, str):
            literals.append(exp.Literal.string(value))
        elif isinstance(value, dt.datetime):  # a TIMESTAMP: compared as epoch millis, as Pinot does
            moment = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
            literals.append(exp.Literal.number(int(moment.timestamp() * 1000)))
        else:
            return None
        seen.add(key)
    return literals


def is_cte_reference(table: exp.Table) -> bool:
    """Whether ``table`` names a CTE visible where it stands: one of an enclosing WITH — inside a CTE's own body
    only the CTEs defined before it, so ``WITH t AS (SELECT … FROM t)`` reads the real table ``t``."""
    name = table.name.lower()
    previous: exp.Expression = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            index = next(i for i, cte in enumerate(node.expressions) if cte is previous)
            if any(cte.alias_or_name.lower() == name for cte in node.expressions[:index]):
                return True
        else:
            with_ = node.args.get("with_") or node.args.get("with")
            if isinstance(with_, exp.With) and with_ is not previous and \
                    any(cte.alias_or_name.lower() == name for cte in with_.expressions):
                return True
        previous, node = node, node.parent
    return False


@dataclass(frozen=True)
class MadeColumns:
    """Columns of relations made before planning (joins the servers answer, ``cuvee.multistage.colocated_join``)
    that Pinot's rules treat apart: TIMESTAMP, numeric and multi-value ones, by their names in the relation."""

    timestamps: frozenset[str] = frozenset()
    numbers: frozenset[str] = frozenset()
    # relation -> (its columns, those multi-valued), lower case: multi-value rules follow a column's source
    relations: Mapping[str, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)


def plan_stages(query: exp.Expression, resolve: TableResolver, leaf_rows: int,
                joined: MadeColumns = MadeColumns()) -> StagePlan:
    """The stages of ``query`` (a parsed statement). Raises QueryError 190 for an unknown table, 150 for what
    neither stage can run. ``joined``: what the caller's relations hold (see ``MadeColumns``)."""
    try:
        return _plan_stages(query, resolve, leaf_rows, joined)
    except RecursionError:
        raise QueryError(QueryErrorCode.SQL_PARSING, "the query is nested too deeply to plan") from None


def _plan_stages(query: exp.Expression, resolve: TableResolver, leaf_rows: int, joined: MadeColumns) -> StagePlan:
    tree = query.copy()
    # the broker's DuckDB runs the final stage: its sources are tables, subqueries and UNNEST, never a function
    for source in tree.find_all(exp.Table, exp.Lateral):
        allowed = (exp.Identifier,) if isinstance(source, exp.Table) else (exp.Subquery, exp.Select, exp.Unnest)
        if not isinstance(source.this, allowed):
            raise QueryError(QueryErrorCode.SQL_PARSING, f"table functions are not supported: "
                                                         f"{source.this.sql(dialect=DIALECT)[:100]}")
    for select in list(tree.find_all(exp.Select)):
        _aggregate_below_windows(select, resolve)
    leaves: list[Leaf] = []
    timestamps: set[str] = set(joined.timestamps)
    numbers: set[str] = set(joined.numbers)
    relations = dict(joined.relations)  # a table's own rows, by relation: their lists are multi-value columns

    def relation() -> str:
        return f"{RELATION_PREFIX}{len(leaves) + 1}"

    for select in [s for s in tree.find_all(exp.Select) if _is_leaf(s, resolve)]:
        table = _source_table(select)
        assert table is not None
        name = relation()
        leaves.append(Leaf(name, _leaf_sql(select, leaf_rows), table.name, whole=True))
        select.replace(exp.select("*").from_(exp.to_table(name, quoted=True)))
    # found afresh each time: moving a filter rebuilds its WHERE, and the tables in the conditions it keeps
    while (table := next((t for t in tree.find_all(exp.Table) if _is_cluster_table(t)), None)) is not None:
        info = _resolve(table.name, resolve)
        timestamps |= info.timestamp_columns
        numbers |= info.number_columns
        name = relation()
        enclosing = table.find_ancestor(exp.Select)
        filters = _movable_filters(enclosing, table, info, resolve) if enclosing is not None else []
        columns = _columns_needed(tree, table, info)
        leaf = exp.select(*(exp.column(c, quoted=True) for c in columns)).from_(exp.to_table(table.name))
        if filters:
            leaf = leaf.where(exp.and_(*(_unqualified(c) for c in filters)), copy=False)
        leaf = leaf.limit(leaf_rows + 1)
        leaves.append(Leaf(name, leaf.sql(dialect=DIALECT), table.name, whole=False))
        relations[name] = (frozenset(c.lower() for c in columns),
                           frozenset(c.lower() for c in columns if c in info.multi_value_columns))
        table.replace(exp.Table(this=exp.to_identifier(name, quoted=True),
                                alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
    if not leaves and not any(t.name.startswith(RELATION_PREFIX) for t in tree.find_all(exp.Table)):
        raise QueryError(QueryErrorCode.SQL_PARSING, "the query reads no table")
    if any(is_lookup(node) for node in tree.find_all(exp.Anonymous)):  # dimension tables live on the servers
        raise QueryError(QueryErrorCode.SQL_PARSING, "LOOKUP runs on the servers: use it in a SELECT over one table "
                                                     "(a subquery or CTE of its own), not over a join's rows")
    if any(mv for _, mv in relations.values()):  # a filter or grouping above a join: Pinot's rules there too
        for select in list(tree.find_all(exp.Select)):
            sources = _relation_sources(select, relations)
            if sources:
                rewrite_multi_value_where(select, lambda column, found=sources: _is_multi_value(column, found))
                _group_each_value(select, sources)
    _refuse_merged_aggregates(tree)
    names = _answer_names(tree)  # as written: Pinot's names, not those of the translated functions
    final = sketches_in_one_step(translate_scalar(tree, frozenset(timestamps), number_columns=frozenset(numbers)))
    return StagePlan(tuple(leaves), final.sql(dialect=DIALECT), names)


def _refuse_merged_aggregates(tree: exp.Expression) -> None:
    """Refuse (150) Pinot's aggregations the single-stage planner merges with its own SQL (MODE, HISTOGRAM,
    LASTWITHTIME, EXPR_MAX, ARRAY_AGG with a type, the funnels) where the broker's stage would run them: DuckDB
    would answer its own MODE (another tie rule) or not know the name. Inside a leaf (a SELECT over one table)
    they run on the single-stage path."""
    for node in tree.find_all(exp.Anonymous):
        if normalised(node.name) in AGGREGATE_NAMES | FUNNEL_NAMES:
            raise QueryError(QueryErrorCode.SQL_PARSING, f"{node.name.upper()[:40]} is not supported over a join, "
                                                         f"subquery or set operation's rows (the multi-stage engine's "
                                                         f"broker stage): use it in a SELECT over one table, which "
                                                         f"the servers answer")


_Sources = dict[str, "tuple[frozenset[str], frozenset[str]] | None"]  # label -> (columns, multi-value) or unknown


def _relation_sources(select: exp.Select, relations: Mapping[str, tuple[frozenset[str], frozenset[str]]]
                      ) -> _Sources:
    """The SELECT's own sources by label: a table's fetched rows (their columns and multi-value ones), or None for
    any other source (a subquery, a CTE, a grouped leaf: what it hands on is not a table's column as stored).
    Empty when no source holds a multi-value column."""
    found: _Sources = {}
    for source in _sources(select):
        name = source.name if isinstance(source, exp.Table) else ""
        found[source.alias_or_name.lower()] = relations.get(name)
    return found if any(known and known[1] for known in found.values()) else {}


def _column_source(column: exp.Column, sources: _Sources) -> str | None:
    """The label of the source a column reads, when it can be told: its qualifier, or the one known source with
    that column and no unknown source beside it."""
    name = column.name.lower()
    if column.table:
        label = column.table.lower()
        return label if sources.get(label) is not None else None
    holders = [label for label, known in sources.items() if known is None or name in known[0]]
    return holders[0] if len(holders) == 1 and sources[holders[0]] is not None else None


def _is_multi_value(column: exp.Column, sources: _Sources) -> bool:
    label = _column_source(column, sources)
    known = sources.get(label) if label is not None else None
    return known is not None and column.name.lower() in known[1]


def _group_each_value(select: exp.Select, sources: _Sources) -> None:
    """A GROUP BY key that is a multi-value column makes a group of each of its values, as Pinot groups one (a
    row with no values joins the NULL group, as on the servers): the SELECT reads the column unnested beside its
    sources (``, unnest(…) AS __mvN(v)``) and selects, groups and orders by that value wherever it names the
    column. A key given by position or select alias names the item, which then reads the value."""
    group = select.args.get("group")
    if group is None:
        return
    items = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    aliases = {item.alias.lower(): item.this for item in select.expressions if isinstance(item, exp.Alias)}
    unnested: dict[tuple[str, str], exp.Column] = {}
    for key in group.expressions:
        target = key
        if isinstance(key, exp.Literal) and not key.is_string and key.name.isdigit() \
                and 1 <= int(key.name) <= len(items):
            target = items[int(key.name) - 1]
        elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases \
                and _column_source(key, sources) is None:
            target = aliases[key.name.lower()]
        if not isinstance(target, exp.Column) or not _is_multi_value(target, sources):
            continue
        label = _column_source(target, sources)
        assert label is not None
        place = (label, target.name.lower())
        if place in unnested:
            continue  # the same column twice: one unnest
        alias = f"__mv{len(unnested) + 1}"
        column = exp.column(target.name, table=label, quoted=True).sql(dialect=DIALECT)
        values = exp.maybe_parse(f"SELECT 1 FROM __t, unnest(CASE WHEN len({column}) > 0 THEN {column} "
                                 f"ELSE [NULL] END) AS {alias}(v)", dialect=DIALECT)
        select.append("joins", values.args["joins"][0])
        unnested[place] = exp.column("v", table=alias)
    if not unnested:
        return

    def replaced(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            label = _column_source(node, sources)
            if label is not None and (label, node.name.lower()) in unnested:
                return unnested[(label, node.name.lower())].copy()
        return node

    kept = []
    for item in select.expressions:
        changed = item.transform(replaced)
        kept.append(exp.alias_(changed, item.name, quoted=True)
                    if isinstance(item, exp.Column) and changed is not item else changed)
    select.set("expressions", kept)
    for part in ("group", "having", "order", "qualify"):
        if select.args.get(part) is not None:
            select.set(part, select.args[part].transform(replaced))


def _resolve(name: str, resolve: TableResolver) -> TableInfo:
    info = resolve(name)
    if info is None:
        raise QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, f"table {name!r} does not exist")
    return info


def _is_cluster_table(table: exp.Table) -> bool:
    """A table of the cluster (not a CTE's name, nor a relation this plan made)."""
    if not isinstance(table.this, exp.Identifier) or table.name.startswith(RELATION_PREFIX):
        return False
    if table.args.get("db") or table.args.get("catalog"):
        raise QueryError(QueryErrorCode.SQL_PARSING, f"qualified table names are not supported: "
                                                     f"{table.sql(dialect=DIALECT)}")
    return not is_cte_reference(table)


def _source_table(select: exp.Select) -> exp.Table | None:
    source = select.args.get("from_") or select.args.get("from")
    table = source.this if source is not None else None
    return table if isinstance(table, exp.Table) else None


_LEAF_ARGS = {"expressions", "from", "from_", "where", "group", "having", "order", "limit", "offset", "distinct"}


def _is_leaf(select: exp.Select, resolve: TableResolver) -> bool:
    """A SELECT the single-stage path answers whole: one cluster table, nothing nested, no outer column."""
    if any(value and key not in _LEAF_ARGS for key, value in select.args.items()):
        return False
    table = _source_table(select)
    if table is None or not _is_cluster_table(table):
        return False
    for node in select.walk():
        if node is not select and isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation, exp.Join,
                                                    exp.Window, exp.Filter)):
            return False
    info = _resolve(table.name, resolve)
    names = _qualifiers(table, info)
    columns = {c.lower() for c in (*info.columns, *VIRTUAL_COLUMNS)}
    aliases = {item.alias.lower() for item in select.expressions if isinstance(item, exp.Alias)}
    for column in select.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue
        if column.table:
            if column.table.lower() not in names:
                return False  # an enclosing query's column: correlated
        elif column.name.lower() not in columns and column.name.lower() not in aliases:
            return False
    return True


def _qualifiers(table: exp.Table, info: TableInfo) -> set[str]:
    """The names a column may be qualified with to mean ``table``: its alias when it has one (then its name means
    a table of an enclosing query: ``FROM t x WHERE x.id = t.id`` is correlated), else its names."""
    if table.alias:
        return {table.alias.lower()}
    return {table.name.lower(), raw_table_name(info.name).lower(), info.name.lower()}


def _leaf_sql(select: exp.Select, leaf_rows: int) -> str:
    """``select`` as single-stage SQL: the table by its name alone (an alias dropped, columns unqualified), and a
    LIMIT (a subquery's rows are all its rows; the single stage's default is 10)."""
    leaf = _unqualified(select)
    assert isinstance(leaf, exp.Select)
    table = _source_table(leaf)
    assert table is not None
    table.set("alias", None)
    if leaf.args.get("limit") is None:
        leaf.set("limit", exp.Limit(expression=exp.Literal.number(leaf_rows + 1)))
    return leaf.sql(dialect=DIALECT)


def _unqualified(node: exp.Expression) -> exp.Expression:
    copy = node.copy()
    for column in copy.find_all(exp.Column):
        column.set("table", None)
    return copy


def conjuncts(condition: exp.Expression) -> Iterator[exp.Expression]:
    if isinstance(condition, exp.And):
        yield from conjuncts(condition.this)
        yield from conjuncts(condition.expression)
    elif isinstance(condition, exp.Paren):
        yield from conjuncts(condition.this)
    else:
        yield condition


def _sources(select: exp.Select) -> list[exp.Expression]:
    source = select.args.get("from_") or select.args.get("from")
    found = [source.this] if source is not None else []
    return found + [join.this for join in select.args.get("joins") or []]


def _plain_join(join: exp.Join) -> bool:
    """An inner or cross join (a comma too): a filter on one side may run before it. Not an outer, ASOF,
    POSITIONAL, NATURAL, SEMI or ANTI one, whose answer a moved filter can change."""
    kind = (join.args.get("kind") or "").upper()
    return not join.side and not join.args.get("method") and kind in ("", "INNER", "CROSS")


def _movable_filters(select: exp.Select, table: exp.Table, info: TableInfo,
                     resolve: TableResolver) -> list[exp.Expression]:
    """The WHERE conjuncts of ``select`` that read ``table``'s columns alone, taken out of ``select`` (they move
    into the table's leaf). None when the SELECT has an outer join, or ``table`` is not one of its own sources."""
    sources = _sources(select)
    where = select.args.get("where")
    if where is None or not any(s is table for s in sources):
        return []
    if not all(_plain_join(join) for join in select.args.get("joins") or []):
        return []
    own = {c.lower() for c in info.columns}
    others: set[str] | None = set()  # unqualified names another source may have; None: unknown (a subquery)
    for source in sources:
        if source is table:
            continue
        if isinstance(source, exp.Table) and _is_cluster_table(source):
            assert others is not None
            others |= {c.lower() for c in _resolve(source.name, resolve).columns}
        else:
            others = None
            break
    label = table.alias_or_name.lower()

    def movable(condition: exp.Expression) -> bool:
        if condition.find(exp.Select, exp.Subquery, exp.Window, exp.AggFunc) is not None:
            return False
        columns = [c for c in condition.find_all(exp.Column) if not isinstance(c.this, exp.Star)]
        for column in columns:
            if column.table:
                if column.table.lower() != label:
                    return False
            elif column.name.lower() not in own or others is None or column.name.lower() in others:
                return False
        return bool(columns)

    kept: list[exp.Expression] = []
    moved: list[exp.Expression] = []
    for condition in conjuncts(where.this):
        (moved if movable(condition) else kept).append(condition)
    if moved:
        select.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return moved


def _columns_needed(tree: exp.Expression, table: exp.Table, info: TableInfo) -> list[str]:
    """The table's columns the query may read: every column named anywhere (a superset: names are not resolved
    to sources), all of them under a ``*`` that can reach the table; at least one (the row count stays)."""
    label = table.alias_or_name.lower()
    if any(join.args.get("method") == "NATURAL" for join in tree.find_all(exp.Join)):
        return list(info.columns)  # joined on every column the two sides share
    for star in tree.find_all(exp.Star):
        parent = star.parent
        if isinstance(parent, exp.Select) or (isinstance(parent, exp.Column) and
                                             (not parent.table or parent.table.lower() == label)):
            return list(info.columns)
    named = {c.name.lower() for c in tree.find_all(exp.Column) if not isinstance(c.this, exp.Star)}
    named |= {i.name.lower() for join in tree.find_all(exp.Join) for i in join.args.get("using") or []}
    # Pinot's virtual columns too (a stored column of such a name wins: listed once)
    stored = {c.lower() for c in info.columns}
    columns = [c for c in (*info.columns, *(v for v in VIRTUAL_COLUMNS if v.lower() not in stored))
               if c.lower() in named]
    return columns or list(info.columns[:1])


def _answer_names(final: exp.Expression) -> tuple[str, ...] | None:
    """Pinot's column names for the answer: aliases, else Pinot's name of each select item (the first arm's of a
    set operation); None when a ``*`` leaves them to the relations."""
    select = final
    while isinstance(select, exp.SetOperation):
        select = select.this
    if isinstance(select, exp.Subquery):
        select = select.this
    if not isinstance(select, exp.Select):
        return None
    names: list[str] = []
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            return None
        names.append(item.alias if isinstance(item, exp.Alias) else pinot_column_name(item))
    return tuple(names)


def _aggregate_below_windows(select: exp.Select, resolve: TableResolver) -> None:
    """A grouped SELECT over one table with window functions on top (``SUM(COUNT(*)) OVER (…)``): the grouping
    moves into a subquery the servers answer whole, and the windows run over its groups at the broker — the
    table's rows never travel. Left as it is when anything else is in the way (a join, a nested query, DISTINCT)."""
    if (select.find(exp.Window) is None or select.args.get("joins") or select.args.get("distinct")
            or select.find(exp.Filter) is not None):
        return
    table = _source_table(select)
    if table is None or not _is_cluster_table(table):
        return
    if any(node is not select and isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation))
           for node in select.walk()):
        return
    info = _resolve(table.name, resolve)
    names = _qualifiers(table, info)
    if any(c.table and c.table.lower() not in names for c in select.find_all(exp.Column)):
        return  # a correlated column
    items = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    keys = [_group_key(key, items, info) for key in (select.args["group"].expressions if select.args.get("group")
                                                      else [])]
    aggregates = [node for node in select.walk() if _pushed_aggregate(node)]
    aggregates = [a for a in aggregates if not any(_pushed_aggregate(p) for p in _ancestors(a, select))]
    if not aggregates and not keys:
        return
    replaced: dict[str, exp.Expression] = {}
    inner: list[exp.Expression] = []
    for prefix, found in (("__k", keys), ("__a", aggregates)):
        for expression in found:
            text = _unqualified(expression).sql(dialect=DIALECT)
            if text not in replaced:
                name = f"{prefix}{len(replaced) + 1}"
                replaced[text] = exp.column(name)
                inner.append(exp.alias_(_unqualified(expression), name))
    leaf = exp.select(*inner).from_(exp.to_table(table.name))
    if select.args.get("where") is not None:
        leaf = leaf.where(_unqualified(select.args["where"].this), copy=False)
    if keys:
        leaf = leaf.group_by(*(_unqualified(k) for k in keys), copy=False)

    def outer(node: exp.Expression) -> exp.Expression:
        if isinstance(node.parent, exp.Window) and node.arg_key == "this":
            return node  # the window function itself
        if isinstance(node, (exp.Column, exp.Anonymous, exp.Func, exp.Binary, exp.Paren, exp.Cast)):
            text = _unqualified(node).sql(dialect=DIALECT)
            if text in replaced:
                return replaced[text].copy()
        return node

    for key in ("expressions", "having", "order", "qualify"):
        value = select.args.get(key)
        if isinstance(value, list):
            select.set(key, [_keep_name(item, outer) for item in value])
        elif value is not None:
            select.set(key, value.transform(outer))
    having = select.args.get("having")
    select.set("where", exp.Where(this=having.this) if having is not None else None)  # groups filtered, then windows
    select.set("having", None)
    select.set("group", None)
    select.set("from_" if "from_" in select.args else "from",
               exp.From(this=exp.Subquery(this=leaf, alias=exp.TableAlias(this=exp.to_identifier(
                   table.alias_or_name)))))


def _keep_name(item: exp.Expression, outer: Callable[[exp.Expression], exp.Expression]) -> exp.Expression:
    """A select item rewritten over the grouped subquery, keeping the name Pinot gives the item as written."""
    if isinstance(item, exp.Alias):
        return item.transform(outer)
    rewritten = item.transform(outer)
    if rewritten.sql(dialect=DIALECT) == item.sql(dialect=DIALECT):
        return rewritten
    return exp.alias_(rewritten, pinot_column_name(item), quoted=True)


def _group_key(key: exp.Expression, items: list[exp.Expression], info: TableInfo) -> exp.Expression:
    """A GROUP BY entry as the expression it names: a position, or a select alias that is not a column."""
    if isinstance(key, exp.Literal) and not key.is_string and key.name.isdigit() and 1 <= int(key.name) <= len(items):
        return items[int(key.name) - 1]
    if isinstance(key, exp.Column) and not key.table and key.name.lower() not in {c.lower() for c in info.columns}:
        for item in key.parent_select.expressions if key.parent_select else []:
            if isinstance(item, exp.Alias) and item.alias.lower() == key.name.lower():
                return item.this
    return key


def _pushed_aggregate(node: exp.Expression) -> bool:
    """An aggregation of the grouping (not a window's own function)."""
    if isinstance(node.parent, exp.Window) and node.arg_key == "this":
        return False
    if not isinstance(node, (exp.AggFunc, exp.Anonymous)):
        return False
    try:
        return classify_aggregate(node) is not None
    except QueryError:
        return isinstance(node, exp.AggFunc)


def _ancestors(node: exp.Expression, stop: exp.Expression) -> Iterator[exp.Expression]:
    parent = node.parent
    while parent is not None and parent is not stop:
        yield parent
        parent = parent.parent
