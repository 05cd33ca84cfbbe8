"""What the broker adds for LOOKUP: the dimension tables' types, and the segments every server must hold."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from cuvee.broker.cluster_view import TableEntry
from cuvee.broker.lookups import lookup_requests, served_segments, with_schemas
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.query import QueryError, QueryErrorCode, TableInfo, plan_sql

ON, OFF = SegmentState.ONLINE, SegmentState.OFFLINE
DIM_SCHEMA = pa.schema([("id", pa.string()), ("name", pa.string())])
INFOS = {"facts_OFFLINE": TableInfo("facts_OFFLINE", ("fid",)),
         "dims_OFFLINE": TableInfo("dims_OFFLINE", ("id", "name"), dim_table=True, primary_key=("id",))}


class View:
    def __init__(self, entries: dict[str, TableEntry]):
        self.entries = entries

    def table(self, name_with_type: str) -> TableEntry | None:
        return self.entries.get(name_with_type)


def entry(segments: dict[str, dict[str, SegmentState]], hidden: frozenset[str] = frozenset()) -> TableEntry:
    return TableEntry("dims_OFFLINE", INFOS["dims_OFFLINE"], DIM_SCHEMA, ExternalView("dims_OFFLINE", segments),
                      hidden=hidden)


def resolve(name: str) -> TableInfo | None:
    return next((i for k, i in INFOS.items() if name.lower() in (k.lower(), k[:-8].lower())), None)


PLAN = plan_sql("SELECT LOOKUP('dims', 'name', 'id', fid) FROM facts", resolve)


def test_every_server_is_told_the_segments_online_somewhere_and_not_hidden() -> None:
    dims = entry({"d0": {"s1": ON, "s2": ON}, "d1": {"s1": ON, "s2": OFF}, "d2": {"s1": OFF}, "d3": {"s2": ON}},
                 hidden=frozenset({"d3"}))
    assert served_segments(dims) == ("d0", "d1") and served_segments(None) == ()
    typed = with_schemas(PLAN, View({"dims_OFFLINE": dims}))
    assert typed.lookups[0].schema == DIM_SCHEMA
    with pytest.raises(QueryError) as unserved:  # d2 is ONLINE nowhere: its keys would answer NULL unsaid
        lookup_requests(typed, View({"dims_OFFLINE": dims}))
    assert unserved.value.code is QueryErrorCode.BROKER_SEGMENT_UNAVAILABLE and "d2" in unserved.value.message
    served = entry({"d0": {"s1": ON, "s2": ON}, "d1": {"s1": ON, "s2": OFF}, "d3": {"s2": ON}},
                   hidden=frozenset({"d3"}))
    [asked] = lookup_requests(typed, View({"dims_OFFLINE": served}))
    assert (asked.relation, asked.table, asked.segments, asked.schema) == ("cuvee_lookup_1", "dims_OFFLINE",
                                                                           ("d0", "d1"), None)
    [empty] = lookup_requests(typed, View({"dims_OFFLINE": entry({})}))
    assert empty.segments == () and empty.schema == DIM_SCHEMA  # the schema types a table of no rows


def test_a_plan_without_lookup_is_left_alone_and_a_dimension_table_gone_since_planning_is_190() -> None:
    plain = plan_sql("SELECT fid FROM facts", resolve)
    assert with_schemas(plain, View({})) is plain and lookup_requests(plain, View({})) == ()
    with pytest.raises(QueryError) as info:
        with_schemas(dataclasses.replace(PLAN), View({}))
    assert info.value.code is QueryErrorCode.TABLE_DOES_NOT_EXIST


def test_the_broker_tells_lookup_each_key_columns_type_a_timestamp_key_included() -> None:
    """What LOOKUP converts a join value to (Pinot reads it as the key's stored type: a TIMESTAMP as LONG millis)."""
    from cuvee.broker.cluster_view import table_info
    from cuvee.config import Schema

    schema = Schema.from_json({"schemaName": "d", "primaryKeyColumns": ["at", "code", "name"], "dimensionFieldSpecs": [
        {"name": "code", "dataType": "INT"}, {"name": "name", "dataType": "STRING"}],
        "dateTimeFieldSpecs": [{"name": "at", "dataType": "TIMESTAMP", "format": "TIMESTAMP",
                                "granularity": "1:MILLISECONDS"}]})
    info = table_info("d_OFFLINE", schema, dim_table=True)
    assert dict(zip(info.primary_key, info.primary_key_types)) == {"at": "TIMESTAMP", "code": "INTEGER",
                                                                  "name": "VARCHAR"}
    timed = plan_sql("SELECT LOOKUP('d', 'name', 'at', fid, 'code', fid, 'name', 'x') FROM facts",
                     lambda n: info if n.lower().startswith("d") else resolve(n))
    assert 'EPOCH_MS("__lookup1"."at") = ' in timed.server_sql  # the dimension side of a TIMESTAMP key: its millis
