"""The broker ⇄ server query wire contract: round trips and strict, clear parsing."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from cuvee.protocol.query import (
    DimLookup,
    GroupLimits,
    QueryWireError,
    TimeFilter,
    ServerException,
    ServerQueryRequest,
    ServerQueryStats,
    decode_response,
    encode_response,
)
from cuvee.query.wanted_keys import encode

REQUEST = ServerQueryRequest("7", "events_REALTIME", "SELECT count(*) FROM cuvee_segments", ("a", "b"), 500,
                             "SELECT count(*) AS numDocsScanned FROM cuvee_segments WHERE x > 1")


def test_request_round_trip() -> None:
    assert ServerQueryRequest.decode(REQUEST.encode()) == REQUEST
    plain = ServerQueryRequest("1", "t_REALTIME", "SELECT 1", (), 10)
    assert ServerQueryRequest.from_dict(plain.to_dict()) == plain
    counted = ServerQueryRequest("2", "t_REALTIME", "SELECT count(*) AS __docs FROM cuvee_segments", (), 10,
                                 docs_column="__docs")
    assert ServerQueryRequest.decode(counted.encode()) == counted


def test_time_filter_round_trip() -> None:
    for op in ("<=", ">"):
        half = ServerQueryRequest("3", "t_OFFLINE", "SELECT 1", ("s",), 10, time_filter=TimeFilter("ts", op, -5))
        doc = orjson.loads(half.encode())
        assert doc["timeFilter"] == {"column": "ts", "op": op, "value": -5}
        assert ServerQueryRequest.decode(half.encode()) == half
    assert orjson.loads(REQUEST.encode())["timeFilter"] is None


@pytest.mark.parametrize(("time_filter", "error"), [
    ("ts <= 5", "time filter: must be a JSON object"),
    ({"column": "ts", "op": "<", "value": 5}, "op must be one of"),
    ({"column": "ts", "op": "<= 5 OR 1=1 --", "value": 5}, "op must be one of"),
    ({"column": "", "op": ">", "value": 5}, "column must be a non-empty string"),
    ({"column": 3, "op": ">", "value": 5}, "'column' must be a string"),
    ({"column": "ts", "op": ">", "value": "5"}, "'value' must be an integer"),
    ({"column": "ts", "op": ">", "value": 5.0}, "'value' must be an integer"),
    ({"column": "ts", "op": ">", "value": True}, "'value' must be an integer"),
    ({"column": "ts", "op": ">", "value": 2**63}, "64-bit integer"),
    ({"column": "ts", "op": ">"}, "missing field 'value'"),
    ({"column": "ts", "op": ">", "value": 1, "sql": "x"}, "unknown field"),
])
def test_time_filter_parsing_is_strict(time_filter: object, error: str) -> None:
    with pytest.raises(QueryWireError, match=error):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), "timeFilter": time_filter})


@pytest.mark.parametrize(("change", "error"), [
    ({"timeoutMs": "5"}, "'timeoutMs' must be an integer"),
    ({"timeoutMs": True}, "'timeoutMs' must be an integer"),
    ({"timeoutMs": 0}, "timeoutMs must be positive"),
    ({"segments": ["a", 3]}, r"segments\[1\] must be a non-empty string"),
    ({"segments": "a"}, "'segments' must be a list"),
    ({"sql": None}, "'sql' must be a string"),
    ({"docsScannedSql": 3}, "'docsScannedSql' must be a string or null"),
    ({"docsColumn": ["x"]}, "'docsColumn' must be a string or null"),
    ({"extra": 1}, "unknown field"),
])
def test_request_parsing_is_strict(change: dict, error: str) -> None:
    with pytest.raises(QueryWireError, match=error):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), **change})


def test_request_missing_field_and_non_json_are_named() -> None:
    doc = REQUEST.to_dict()
    del doc["table"]
    with pytest.raises(QueryWireError, match="missing field 'table'"):
        ServerQueryRequest.from_dict(doc)
    with pytest.raises(QueryWireError, match="not JSON"):
        ServerQueryRequest.decode(b"{nope")
    with pytest.raises(QueryWireError, match="must be a JSON object"):
        ServerQueryRequest.decode(b"[1]")


def test_response_round_trip_with_result_and_stats() -> None:
    result = pa.table({"__g0": ["x", None], "__p0": pa.array([[1, 2], []], pa.list_(pa.int64()))})
    stats = ServerQueryStats(numDocsScanned=3, totalDocs=9, numSegmentsQueried=2, numSegmentsProcessed=2,
                             numConsumingSegmentsQueried=1, minConsumingFreshnessTimeMs=77, timeUsedMs=4,
                             missingSegments=("gone",), exceptions=(ServerException(250, "slow"),))
    table, got = decode_response(encode_response(result, stats))
    assert table is not None and table.equals(result)
    assert got == stats


def test_response_without_result() -> None:
    stats = ServerQueryStats(exceptions=(ServerException(200, "bad sql"),))
    table, got = decode_response(encode_response(None, stats))
    assert table is None
    assert got.exceptions == (ServerException(200, "bad sql"),)


def test_bad_responses_are_clear_errors() -> None:
    with pytest.raises(QueryWireError, match="not an Arrow IPC stream"):
        decode_response(b"<html>oops</html>")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("a", pa.int64())])) as writer:
        writer.write_table(pa.table({"a": [1]}))
    with pytest.raises(QueryWireError, match="lacks 'cuvee.stats'"):
        decode_response(sink.getvalue())
    bad = pa.schema([("a", pa.int64())], metadata={b"cuvee.stats": orjson.dumps({"totalDocs": "x"})})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, bad):
        pass
    with pytest.raises(QueryWireError, match="server query stats"):
        decode_response(sink.getvalue())


def test_lookups_round_trip_and_are_absent_unless_used() -> None:
    assert "lookups" not in REQUEST.to_dict()  # an older server, which refuses unknown fields, still reads it
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    asked = ServerQueryRequest("4", "f_OFFLINE", "SELECT 1", ("s",), 10, lookups=(
        DimLookup("cuvee_lookup_1", "teams_OFFLINE", ("t0", "t1")),
        DimLookup("cuvee_lookup_2", "d_OFFLINE", (), schema)))
    back = ServerQueryRequest.decode(asked.encode())
    assert back == asked and back.lookups[1].schema == schema and back.lookups[0].schema is None
    assert orjson.loads(asked.encode())["lookups"][0] == {"relation": "cuvee_lookup_1", "table": "teams_OFFLINE",
                                                         "segments": ["t0", "t1"]}


@pytest.mark.parametrize(("lookups", "error"), [
    ({"relation": "cuvee_lookup_1"}, "must be a list"),
    ([{"relation": "cuvee_segments", "table": "t", "segments": []}], "relation must be cuvee_lookup_<n>"),
    ([{"relation": "cuvee_lookup_1; DROP", "table": "t", "segments": []}], "relation must be cuvee_lookup_<n>"),
    ([{"relation": "cuvee_lookup_1", "table": "", "segments": []}], "table must be a non-empty string"),
    ([{"relation": "cuvee_lookup_1", "table": "t", "segments": [""]}], "must be a non-empty string"),
    ([{"relation": "cuvee_lookup_1", "table": "t", "segments": [], "schema": "!!"}], "not a base64 Arrow schema"),
    ([{"relation": "cuvee_lookup_1", "table": "t", "segments": [], "sql": "x"}], "unknown field"),
    ([{"relation": "cuvee_lookup_1", "table": "t", "segments": []}] * 2, "a relation twice"),
])
def test_lookups_parsing_is_strict(lookups: object, error: str) -> None:
    with pytest.raises(QueryWireError, match=error):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), "lookups": lookups})


def test_group_limits_round_trip_and_are_absent_unless_grouping() -> None:
    assert "groups" not in REQUEST.to_dict()  # an older server, which refuses unknown fields, still reads it
    grouped = ServerQueryRequest("5", "t_OFFLINE", "SELECT 1", ("s",), 10, groups=GroupLimits(
        "SELECT * FROM cuvee_groups ORDER BY __g0", trim_rows=12, exact=True, num_groups_limit=300,
        min_trim_size=-1))
    assert ServerQueryRequest.decode(grouped.encode()) == grouped
    assert orjson.loads(grouped.encode())["groups"] == {
        "orderSql": "SELECT * FROM cuvee_groups ORDER BY __g0", "trimRows": 12, "exact": True,
        "numGroupsLimit": 300, "minServerGroupTrimSize": -1}
    defaults = ServerQueryRequest("6", "t_OFFLINE", "SELECT 1", ("s",), 10,
                                  groups=GroupLimits("SELECT * FROM cuvee_groups"))
    assert ServerQueryRequest.decode(defaults.encode()) == defaults


def test_wanted_groups_travel_as_json_keys_and_are_absent_unless_asked() -> None:
    """A broker's second round (``cuvee.query.exact_trim``) names the groups it wants by their keys, as text."""
    keys = encode(pa.table({"__g0": pa.array(["a", None, "c"]), "__g1": pa.array([1, 2, None], pa.int64())}))
    asked = ServerQueryRequest("7", "t_OFFLINE", "SELECT 1", ("s",), 10,
                               groups=GroupLimits("SELECT * FROM cuvee_groups", trim_rows=3, wanted=keys))
    decoded = ServerQueryRequest.decode(asked.encode())
    assert decoded.groups is not None and decoded.groups.wanted == keys
    assert orjson.loads(asked.encode())["groups"]["wanted"] == {"__g0": ["a", None, "c"], "__g1": ["1", "2", None]}
    assert "wanted" not in orjson.loads(ServerQueryRequest(
        "8", "t_OFFLINE", "SELECT 1", ("s",), 10, groups=GroupLimits("SELECT 1")).encode())["groups"]


@pytest.mark.parametrize(("wanted", "error"), [
    ({'x" = 1 OR "y': ["1"]}, "group key columns"),  # names reach SQL: only the planner's
    ({}, "1 to 256 key columns"),
    ({"__g0": ["a"], "__g1": []}, "as many values"),
    ({"__g0": [1]}, "strings or nulls"),
    ({"__g0": "a"}, "strings or nulls"),
    ("QVJST1cx", "JSON object"),  # an Arrow IPC stream in base64, as this was before: never decoded
    ({"__g0": ["a"] * 50_001}, "at most 50000 rows"),
])
def test_wanted_keys_are_bounded_plain_json(wanted: object, error: str) -> None:
    """The keys come from any client of a server's /query: plain bounded JSON, nothing decompressed (review H2)."""
    with pytest.raises(QueryWireError, match=error):
        GroupLimits.from_dict({"orderSql": "SELECT 1", "exact": False, "wanted": wanted})


@pytest.mark.parametrize(("groups", "error"), [
    ([], "must be a JSON object"),
    ({"orderSql": "", "exact": False}, "orderSql must be a non-empty string"),
    ({"exact": False}, "missing field 'orderSql'"),
    ({"orderSql": "SELECT 1"}, "missing field 'exact'"),
    ({"orderSql": "SELECT 1", "exact": "yes"}, "'exact' must be a boolean"),
    ({"orderSql": "SELECT 1", "exact": False, "trimRows": -1}, "'trimRows' must be an integer from 0"),
    ({"orderSql": "SELECT 1", "exact": False, "numGroupsLimit": 0}, "'numGroupsLimit' must be an integer from 1"),
    ({"orderSql": "SELECT 1", "exact": False, "numGroupsLimit": 2**31}, "'numGroupsLimit' must be an integer"),
    ({"orderSql": "SELECT 1", "exact": False, "minServerGroupTrimSize": True}, "must be an integer"),
    ({"orderSql": "SELECT 1", "exact": False, "limit": 3}, "unknown field"),
])
def test_group_limits_parsing_is_strict(groups: object, error: str) -> None:
    with pytest.raises(QueryWireError, match=error):
        ServerQueryRequest.from_dict({**REQUEST.to_dict(), "groups": groups})


def test_group_flags_are_sent_only_when_set() -> None:
    quiet = ServerQueryStats(totalDocs=1)
    assert "numGroupsLimitReached" not in quiet.to_dict() and "groupsTrimmed" not in quiet.to_dict()
    flagged = ServerQueryStats(totalDocs=1, numGroupsLimitReached=True, groupsTrimmed=True)
    assert decode_response(encode_response(None, flagged))[1] == flagged
    assert decode_response(encode_response(None, quiet))[1] == quiet
    with pytest.raises(QueryWireError, match="'groupsTrimmed' must be a boolean"):
        ServerQueryStats.from_dict({**quiet.to_dict(), "groupsTrimmed": 1})


def test_prune_filter_and_pruned_count_round_trip_and_are_absent_unless_used() -> None:
    from cuvee.pruning import And, Compare, In

    assert "pruneFilter" not in REQUEST.to_dict()
    predicate = And((Compare("id", ">=", 5), In("city", ("bern", "cairo"))))
    asked = ServerQueryRequest("5", "f_OFFLINE", "SELECT 1", ("s",), 10, prune_filter=predicate)
    assert ServerQueryRequest.decode(asked.encode()) == asked
    with pytest.raises(QueryWireError, match="pruning filter"):
        ServerQueryRequest.from_dict({**asked.to_dict(), "pruneFilter": ["cmp", "id", "~", 1]})
    assert "numSegmentsPrunedByServer" not in ServerQueryStats().to_dict()
    stats = ServerQueryStats(numSegmentsQueried=3, numSegmentsProcessed=1, numSegmentsPrunedByServer=2)
    assert decode_response(encode_response(None, stats))[1] == stats
