"""Planning a WHERE the way the broker does, for the pruning tests."""

from __future__ import annotations

from cuvee.pruning import Predicate, from_where
from cuvee.query import TableInfo
from cuvee.query.parse import parse_query

COLUMNS = ("i", "l", "d", "s", "f", "m", "m2", "g")
INFO = TableInfo("t_OFFLINE", COLUMNS, frozenset(), frozenset({"m"}), (), frozenset({"i", "l", "d", "f", "g"}))


def where_of(condition: str) -> Predicate | None:
    parsed = parse_query(f"SELECT * FROM t WHERE {condition}", lambda name, **_: INFO)
    return from_where(parsed.select.args["where"].this)
