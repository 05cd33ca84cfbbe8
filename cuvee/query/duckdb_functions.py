"""The Python functions every Cuvee DuckDB database registers: Pinot's hashes DuckDB lacks
(``cuvee.query.hash_functions``), the windowed funnels' algorithms (``cuvee.query.funnel_window``) and the
sketches servers build and brokers merge (``cuvee.query.sketches``).

One entry point so that the query executors (``cuvee.query.execute``), the servers' native copies and the
multi-stage engine offer the same functions in every step a query runs.
"""

from __future__ import annotations

import duckdb

from cuvee.query import funnel_window, hash_functions, sketches


def register(database: duckdb.DuckDBPyConnection) -> None:
    """Make every function callable in ``database`` (before its configuration is locked); its cursors see them."""
    hash_functions.register(database)
    funnel_window.register(database)
    sketches.register(database)
