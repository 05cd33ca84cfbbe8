"""Plans of queries seen before, kept so a dashboard's repeated queries skip parsing and planning.

Parsing and planning a query with sqlglot costs milliseconds in pure Python, a large part of what a small query
pays at the broker; dashboards send the same texts again and again. A plan depends on the text and on the one
table the query names (its columns, their types), so an entry keeps the table name as written and the table's
fingerprint when it was planned (``fingerprint(name)``: by default what the resolver answers; the broker's adds
the column types), and is used only while the fingerprint is unchanged (a schema change, a table dropped, a
hybrid half added: planned afresh). Bounded in entries and in text size; least recently used entries go first.
Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from cuvee.query.parse import TableInfo, TableResolver
from cuvee.query.rewrite import QueryPlan, plan_sql

DEFAULT_ENTRIES = 2048
MAX_CACHED_SQL_BYTES = 16 * 1024  # longer texts (large IN-lists) are rarely repeated verbatim: not kept


class PlanCache:
    def __init__(self, max_entries: int = DEFAULT_ENTRIES, plan: Callable[[str, TableResolver], QueryPlan] = plan_sql,
                 fingerprint: Callable[[str], Hashable | None] | None = None):
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._plan = plan
        self._fingerprint = fingerprint
        self._entries: OrderedDict[str, tuple[QueryPlan, str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def cached(self, sql: str, resolve: TableResolver) -> QueryPlan | None:
        """The plan made before for ``sql``, if the table it names still resolves to the same columns; cheap
        enough to call on the event loop."""
        with self._lock:
            entry = self._entries.get(sql)
        if entry is None:
            return None
        plan, name, stamp = entry
        if (self._fingerprint(name) if self._fingerprint is not None else resolve(name)) != stamp:
            with self._lock:
                self._entries.pop(sql, None)
            return None
        with self._lock:
            if sql in self._entries:
                self._entries.move_to_end(sql)
            self.hits += 1
        return plan

    def plan(self, sql: str, resolve: TableResolver) -> QueryPlan:
        """Plan ``sql`` (QueryError as ``plan_sql``) and keep the plan; use ``cached`` first."""
        seen: list[tuple[str, TableInfo]] = []

        def remembering(name: str) -> TableInfo | None:
            info = resolve(name)
            if info is not None:
                seen.append((name, info))
            return info

        plan = self._plan(sql, remembering)
        with self._lock:
            self.misses += 1
            if self.max_entries > 0 and len(seen) == 1 and len(sql) <= MAX_CACHED_SQL_BYTES:
                name, info = seen[0]
                stamp = self._fingerprint(name) if self._fingerprint is not None else info
                self._entries[sql] = (plan, name, stamp)
                self._entries.move_to_end(sql)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return plan
