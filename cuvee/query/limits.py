"""How large and how deep a query's text may be, checked before anything recursive reads it. Pure.

A query's text is parsed by sqlglot (Python recursion) on the broker, then parsed, bound and optimized by DuckDB on
the broker and the servers (C++ recursion), and a WHERE that DuckDB pushes into an Arrow scan is bound by Arrow,
recursively again, one C++ frame per ``OR``. A 20,000-term ``id = 0 OR id = 1 OR ...`` (300 KB) ran that last
recursion off an 8 MiB thread stack and killed the server and the broker (a segmentation fault, no Python error to
catch). Raising the recursion limit or the thread stacks only moves the threshold, so every text from outside is
measured first by one cheap pass that nests nothing (``cuvee.query.prescan``): parentheses nesting, tokens, ANDs and
ORs, and the longest IN-list of literals. Past a limit the query is refused with 150 (SQLParsingError) naming the
limit's configuration key; nothing recursive has seen it. The depth of any AND/OR tree is at most the number of its
connectives, so bounding the connectives of the whole text bounds every chain and every nesting of chains at once.

The defaults hold a hand-written or dashboard query with a wide margin (a few hundred tokens) and keep the deepest
tree any engine builds from an accepted text at about a thousand levels, a fraction of any thread stack; long lists
of values belong in ``IN (...)``, which is flat everywhere (the prescan sets long ones aside from the parser).
Brokers check the client's SQL; servers check the SQL a broker sends them, with limits twice as large by default
(the broker's rewrite adds a little: time bounds, wrappers), since a hostile client may reach a server directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.parse import MAX_NESTING as PARSER_MAX_NESTING  # sqlglot cannot parse deeper
from cuvee.query.prescan import Prescan, prescan


# Arrow binds a filter DuckDB pushes into its scan one C++ frame (~500 bytes) per OR: 16,000 ran off an 8 MiB
# thread stack. No configuration may come within a quarter of that (DuckDB's own parser stops other operator
# chains at its max_expression_depth, 1,000; only AND/OR chains are flattened past it).
MAX_CONNECTIVES_CAP = 4_000


@dataclass(frozen=True)
class QueryLimits:
    """The ``[query_limits]`` table of a broker's or a server's configuration (docs/security.md)."""

    max_nesting: int = 32  # parentheses (and function calls) inside one another
    max_tokens: int = 20_000  # words, literals, operators and parentheses; a long IN-list of literals counts once
    max_connectives: int = 1_000  # ANDs and ORs in the whole text
    max_in_values: int = 1_000_000  # values of one IN-list

    def __post_init__(self) -> None:
        for name in ("max_nesting", "max_tokens", "max_connectives", "max_in_values"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"query_limits.{name} must be a positive integer")
        if self.max_connectives > MAX_CONNECTIVES_CAP:
            raise ValueError(f"query_limits.max_connectives must be at most {MAX_CONNECTIVES_CAP}: engines recurse "
                             "once per AND/OR, and more can overflow a thread's stack")


@dataclass(frozen=True)
class ServerQueryLimits(QueryLimits):
    """A server's ``[query_limits]``: twice the broker's, room for what the broker's rewrite adds (partial
    aggregates, time bounds, wrapping selects); IN-lists pass as they came."""

    max_nesting: int = 64
    max_tokens: int = 40_000
    max_connectives: int = 2_000


def check_text(sql: str, limits: QueryLimits) -> Prescan:
    """Measure ``sql`` and refuse it (150, naming the limit's key) when it passes one of ``limits``; returns the
    measure (its text with long IN-lists set aside)."""
    scanned = prescan(sql)
    _within(scanned.depth, limits.max_nesting, "max_nesting", "nests parentheses {n} deep")
    _within(scanned.connectives, limits.max_connectives, "max_connectives", "has {n} ANDs and ORs",
            "; ORs of one column's values are better written IN (...)")
    _within(scanned.tokens, limits.max_tokens, "max_tokens", "has {n} tokens")
    _within(scanned.longest_in, limits.max_in_values, "max_in_values", "has an IN-list of {n} values")
    return scanned


def _within(value: int, limit: int, key: str, what: str, hint: str = "") -> None:
    if value > limit:
        raise QueryError(QueryErrorCode.SQL_PARSING,
                         f"the query {what.format(n=value)}; at most {limit} (query_limits.{key}){hint}")


__all__ = ["MAX_CONNECTIVES_CAP", "PARSER_MAX_NESTING", "QueryLimits", "ServerQueryLimits", "check_text"]
