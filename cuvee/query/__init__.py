"""Query planning and merging shared by the broker and the servers (pure: no I/O, no threads, no clock).

``plan_sql`` parses Pinot SQL into a ``QueryPlan``: the SQL each server runs over its segments and the SQL the
broker runs over the servers' partial results. ``execute`` runs either step with DuckDB over Arrow tables;
``response`` renders Pinot's broker response JSON.
"""

from cuvee.query.errors import QueryError, QueryErrorCode
from cuvee.query.execute import check_plan, merge_partials, run_server_step
from cuvee.query.parse import (
    ParsedQuery,
    TableInfo,
    TableResolver,
    embedded_options,
    parse_query,
    parse_query_options,
)
from cuvee.query.response import ExecutionStats, broker_response, error_response, result_table
from cuvee.query.rewrite import PARTIALS_RELATION, SERVER_RELATION, QueryKind, QueryPlan, plan_query, plan_sql

__all__ = [
    "PARTIALS_RELATION", "SERVER_RELATION", "ExecutionStats", "ParsedQuery", "QueryError", "QueryErrorCode",
    "QueryKind", "QueryPlan", "TableInfo", "TableResolver", "broker_response", "check_plan", "embedded_options",
    "error_response", "merge_partials", "parse_query", "parse_query_options", "plan_query", "plan_sql", "result_table", "run_server_step",
]
