"""Pinot's broker response: field names, type names and value formats that pinotdb and Pinot clients read."""

from __future__ import annotations

import datetime as dt
import decimal

import orjson
import pyarrow as pa
import pytest

from cuvee.query import ExecutionStats, QueryError, QueryErrorCode, broker_response, error_response, result_table
from cuvee.query.response import format_timestamp, pinot_type
from tests.query.helpers import SCHEMA, distributed

PINOT_FIELDS = {
    "resultTable", "numRowsResultSet", "partialResult", "exceptions", "numGroupsLimitReached", "groupsTrimmed",
    "timeUsedMs",
    "requestId", "numServersQueried", "numServersResponded", "numDocsScanned", "totalDocs",
    "numEntriesScannedInFilter", "numEntriesScannedPostFilter", "numSegmentsQueried", "numSegmentsProcessed",
    "numSegmentsMatched", "numConsumingSegmentsQueried", "minConsumingFreshnessTimeMs", "traceInfo",
    "numSegmentsPrunedByBroker", "numSegmentsPrunedByServer",
}


@pytest.mark.parametrize(("arrow_type", "name"), [
    (pa.int8(), "INT"), (pa.int32(), "INT"), (pa.int64(), "LONG"), (pa.uint64(), "LONG"), (pa.float32(), "FLOAT"),
    (pa.float64(), "DOUBLE"), (pa.bool_(), "BOOLEAN"), (pa.string(), "STRING"), (pa.large_string(), "STRING"),
    (pa.binary(), "BYTES"), (pa.timestamp("ms"), "TIMESTAMP"), (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    (pa.decimal128(38, 0), "BIG_DECIMAL"), (pa.list_(pa.int32()), "INT_ARRAY"), (pa.list_(pa.string()), "STRING_ARRAY"),
    (pa.large_list(pa.float64()), "DOUBLE_ARRAY"),
])
def test_arrow_types_map_to_pinot_type_names(arrow_type: pa.DataType, name: str) -> None:
    assert pinot_type(arrow_type) == name


@pytest.mark.parametrize(("value", "text"), [
    (dt.datetime(2026, 11, 21, 16, 47), "2026-11-21 16:47:00.0"),
    (dt.datetime(2026, 11, 21, 16, 47, 5, 120_000), "2026-11-21 16:47:05.12"),
    (dt.datetime(2026, 1, 2, 3, 4, 5, 6), "2026-01-02 03:04:05.000006"),
    (dt.datetime(2026, 11, 21, 17, 47, tzinfo=dt.timezone(dt.timedelta(hours=1))), "2026-11-21 16:47:00.0"),
])
def test_timestamps_are_written_like_java_timestamp_to_string(value: dt.datetime, text: str) -> None:
    assert format_timestamp(value) == text
    # pinotdb parses these with an ISO-8601 parser.
    assert dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc) == value.replace(
        tzinfo=value.tzinfo or dt.timezone.utc)


def test_values_are_written_as_pinot_writes_them() -> None:
    table = pa.table({
        "i": pa.array([1, None], pa.int32()),
        "f": pa.array([0.1, None], pa.float32()),
        "d": pa.array([float("nan"), float("-inf")], pa.float64()),
        "b": pa.array([True, False]),
        "s": pa.array(["x", None]),
        "ts": pa.array([dt.datetime(2026, 11, 21, 16, 47), None], pa.timestamp("ms")),
        "raw": pa.array([b"\x00\xff", b""], pa.binary()),
        "big": pa.array([decimal.Decimal(12345678901234567890), None], pa.decimal128(38, 0)),
        "mv": pa.array([[1, 2], []], pa.list_(pa.int64())),
    })
    rt = result_table(table, column_types={"s": "JSON"})
    assert rt["dataSchema"] == {
        "columnNames": ["i", "f", "d", "b", "s", "ts", "raw", "big", "mv"],
        "columnDataTypes": ["INT", "FLOAT", "DOUBLE", "BOOLEAN", "JSON", "TIMESTAMP", "BYTES", "BIG_DECIMAL",
                            "LONG_ARRAY"],
    }
    assert rt["rows"] == [
        [1, 0.1, "NaN", True, "x", "2026-11-21 16:47:00.0", "00ff", "12345678901234567890", [1, 2]],
        [None, None, "-Infinity", False, None, None, "", None, []],
    ]
    assert orjson.loads(orjson.dumps(rt)) == rt


def test_result_table_takes_names_from_the_plan_even_when_duplicated() -> None:
    table = pa.table({"a": [1], "b": [2]})
    rt = result_table(table, column_names=["x", "x"])
    assert rt["dataSchema"]["columnNames"] == ["x", "x"]
    assert rt["rows"] == [[1, 2]]
    with pytest.raises(ValueError):
        result_table(table, column_names=["x"])


def test_broker_response_has_pinots_fields_and_sums_server_stats() -> None:
    stats = ExecutionStats.combine([
        ExecutionStats(numDocsScanned=5, totalDocs=10, numSegmentsQueried=2, numSegmentsProcessed=2,
                       numSegmentsMatched=1, numConsumingSegmentsQueried=1, minConsumingFreshnessTimeMs=2000),
        ExecutionStats(numDocsScanned=7, totalDocs=20, numSegmentsQueried=3, numSegmentsProcessed=3,
                       numSegmentsMatched=3, numConsumingSegmentsQueried=1, minConsumingFreshnessTimeMs=1500),
        ExecutionStats(numDocsScanned=1, totalDocs=1, numSegmentsQueried=1, minConsumingFreshnessTimeMs=0),
    ])
    table = pa.table({"count(*)": pa.array([13], pa.int64())})
    response = broker_response(request_id="42", time_used_ms=3, table=table, stats=stats, num_servers_queried=3,
                               num_servers_responded=3)
    assert set(response) == PINOT_FIELDS
    assert response["resultTable"] == {"dataSchema": {"columnNames": ["count(*)"], "columnDataTypes": ["LONG"]},
                                       "rows": [[13]]}
    assert response["exceptions"] == []
    assert response["partialResult"] is False
    assert (response["numDocsScanned"], response["totalDocs"]) == (13, 31)
    assert (response["numSegmentsQueried"], response["numSegmentsProcessed"], response["numSegmentsMatched"]) == (6, 5, 4)
    assert response["numConsumingSegmentsQueried"] == 2
    assert response["minConsumingFreshnessTimeMs"] == 1500
    assert (response["requestId"], response["timeUsedMs"], response["numRowsResultSet"]) == ("42", 3, 1)
    orjson.dumps(response)


def test_group_flags_are_any_servers() -> None:
    quiet = ExecutionStats(totalDocs=3)
    limited = ExecutionStats(numGroupsLimitReached=True)
    trimmed = ExecutionStats(groupsTrimmed=True)
    assert not ExecutionStats.combine([quiet, quiet]).numGroupsLimitReached
    assert not ExecutionStats.combine([quiet, quiet]).groupsTrimmed
    both = ExecutionStats.combine([quiet, limited, trimmed])
    assert (both.numGroupsLimitReached, both.groupsTrimmed, both.totalDocs) == (True, True, 3)
    response = broker_response(request_id="1", time_used_ms=1, stats=both)
    assert (response["numGroupsLimitReached"], response["groupsTrimmed"]) == (True, True)


def test_freshness_is_zero_without_consuming_segments() -> None:
    stats = ExecutionStats.combine([ExecutionStats(totalDocs=3), ExecutionStats()])
    assert stats.minConsumingFreshnessTimeMs == 0
    assert stats.totalDocs == 3


def test_missing_servers_make_a_partial_result() -> None:
    missing = QueryError(QueryErrorCode.SERVER_NOT_RESPONDING, "1 of 2 servers did not respond: server_1")
    response = broker_response(request_id="7", time_used_ms=1000, table=pa.table({"x": [1]}),
                               num_servers_queried=2, num_servers_responded=1, exceptions=[missing])
    assert response["partialResult"] is True
    assert response["exceptions"] == [{"errorCode": 427,
                                       "message": "ServerNotRespondingError:\n1 of 2 servers did not respond: server_1"}]


def test_error_response_has_no_result_table() -> None:
    error = QueryError(QueryErrorCode.TABLE_DOES_NOT_EXIST, "table 'nope' does not exist")
    response = error_response(error, request_id="1", time_used_ms=0)
    assert "resultTable" not in response
    assert response["exceptions"] == [{"errorCode": 190, "message": "TableDoesNotExistError:\ntable 'nope' does not exist"}]
    assert response["partialResult"] is False
    assert response["numServersQueried"] == 0


def test_a_merged_answer_renders_with_pinot_types() -> None:
    table = pa.table(
        {"id": [1, 2, 3], "city": ["a", "b", "a"], "v": pa.array([1, 2, None], pa.int32()), "d": [0.5, 1.0, 1.5],
         "ts": [dt.datetime(2026, 11, 21, 16, 47, 0, 250_000)] * 3}, schema=SCHEMA)
    merged = distributed("SELECT city, COUNT(*), SUM(v), AVG(d), MIN(ts), DISTINCTCOUNT(v), DISTINCTCOUNTHLL(v), "
                         "PERCENTILE(d, 50) FROM events GROUP BY city ORDER BY city", [table.slice(0, 2), table.slice(2)])
    rt = result_table(merged)
    assert rt["dataSchema"]["columnDataTypes"] == ["STRING", "LONG", "DOUBLE", "DOUBLE", "TIMESTAMP", "INT", "LONG",
                                                   "DOUBLE"]
    assert rt["rows"] == [["a", 2, 1.0, 1.0, "2026-11-21 16:47:00.25", 1, 1, 1.5],
                          ["b", 1, 2.0, 1.0, "2026-11-21 16:47:00.25", 1, 1, 1.0]]
