"""STRING date-time columns EXTRACT and DATE_TRUNC can read: only patterns translated whole and without a zone (a
partial or zone-less reading would answer wrong hours); the others are refused at the broker (700)."""

from __future__ import annotations

import pytest

from cuvee.broker.cluster_view import table_info
from cuvee.config import Schema
from cuvee.query import QueryError, QueryErrorCode, check_plan, plan_sql

SCHEMA = Schema.from_json({"schemaName": "s", "dateTimeFieldSpecs": [
    {"name": "plain", "dataType": "STRING", "format": "1:SECONDS:SIMPLE_DATE_FORMAT:yyyy-MM-dd HH:mm:ss",
     "granularity": "1:SECONDS"},
    {"name": "short", "dataType": "STRING", "format": "SIMPLE_DATE_FORMAT|M/d/yyyy", "granularity": "1:DAYS"},
    {"name": "zoned", "dataType": "STRING", "format": "SIMPLE_DATE_FORMAT|yyyy-MM-dd HH:mm|America/Los_Angeles",
     "granularity": "1:MINUTES"},
    {"name": "offset", "dataType": "STRING", "format": "SIMPLE_DATE_FORMAT|yyyy-MM-dd'T'HH:mm:ssZ",
     "granularity": "1:SECONDS"}]})


def test_only_whole_zone_free_patterns_are_read_and_the_others_are_refused_clearly() -> None:
    info = table_info("s_OFFLINE", SCHEMA)
    assert dict(info.string_time_patterns) == {"plain": "yyyy-MM-dd HH:mm:ss", "short": "M/d/yyyy"}
    for column in ("plain", "short"):
        check_plan(plan_sql(f"SELECT DATE_TRUNC('day', {column}), COUNT(*) FROM s GROUP BY 1", lambda _: info),
                   SCHEMA.arrow_schema())
    for column in ("zoned", "offset"):
        with pytest.raises(QueryError) as refused:
            check_plan(plan_sql(f"SELECT EXTRACT(hour FROM {column}) FROM s", lambda _: info), SCHEMA.arrow_schema())
        assert refused.value.code is QueryErrorCode.QUERY_VALIDATION
