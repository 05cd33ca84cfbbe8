"""The broker's metrics: queries, their latency and errors, unavailable segments."""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import Counter, Histogram

from cuvee.metrics import keep_label_values, new_registry

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = new_registry()
        r = self.registry
        self.queries = Counter("cuvee_broker_queries", "Queries answered, by table", ("table",), registry=r)
        self.query_seconds = Histogram("cuvee_broker_query_seconds", "Query latency at the broker", ("table",),
                                       buckets=_SECONDS, registry=r)
        self.query_errors = Counter("cuvee_broker_query_errors", "Errors in query answers, by Pinot error code",
                                    ("code",), registry=r)
        self.unavailable_segments = Counter("cuvee_broker_unavailable_segments", "Segments a query could not read "
                                            "(305: ONLINE nowhere and no CONSUMING replica)", ("table",), registry=r)

    def keep_tables(self, tables: Collection[str]) -> None:
        """Drop every series of a table not in ``tables`` (the tables that exist: raw table names)."""
        keep_label_values(self, "table", lambda value: value in tables or value == "unknown")
