"""A client may reach a server's /query directly: the texts it sends are held to the server's ``[query_limits]``
(``cuvee.query.limits``) before DuckDB reads any of them."""

from __future__ import annotations

from cuvee.query.limits import ServerQueryLimits
from cuvee.server.query_executor import QueryExecutor
from tests.server.test_query_executor import loaded, request  # noqa: F401 - the fixture, shared

ORS = " OR ".join(f"v = {i}" for i in range(4))


def test_the_sql_sent_is_measured_before_duckdb_reads_it_within_configured_limits(loaded) -> None:  # noqa: F811
    registry, _, names = loaded
    lowered = QueryExecutor(registry, limits=ServerQueryLimits(max_connectives=2))
    result, stats = lowered.execute(request(f"SELECT count(*) AS n FROM cuvee_segments WHERE {ORS}", names))
    [error] = stats.exceptions
    assert result is None and error.error_code == 150
    assert "3 ANDs and ORs; at most 2 (query_limits.max_connectives)" in error.message
    # every text DuckDB would read, the WHERE-counting one too
    _, stats = lowered.execute(request("SELECT count(*) AS n FROM cuvee_segments", names,
                                       docs_sql=f"SELECT count(*) FROM cuvee_segments WHERE {ORS}"))
    assert [e.error_code for e in stats.exceptions] == [150]
    result, stats = QueryExecutor(registry).execute(request(f"SELECT count(*) AS n FROM cuvee_segments WHERE {ORS}",
                                                            names))
    assert stats.exceptions == () and result is not None  # the defaults hold it
