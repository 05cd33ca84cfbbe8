"""``POST /query`` on a server: the Arrow answer, and HTTP errors only for requests that are not queries."""

from __future__ import annotations

from pathlib import Path

import orjson
from fastapi import FastAPI
from fastapi.testclient import TestClient

from cuvee.protocol.query import ARROW_STREAM_MEDIA_TYPE, ServerQueryRequest, TimeFilter, decode_response
from cuvee.server.query_routes import query_router
from cuvee.server.registry import SegmentRegistry
from tests.broker.helpers import BASE_MS, TABLE, committed, event_rows, segment_name


def client(tmp_path: Path, max_request_bytes: int = 1 << 20) -> TestClient:
    registry = SegmentRegistry()
    registry.put(TABLE, committed(tmp_path, segment_name(0, 0), event_rows(40, 0, 5)))
    app = FastAPI()
    app.include_router(query_router(registry, max_request_bytes=max_request_bytes))
    return TestClient(app)


def test_query_answers_arrow_with_stats(tmp_path: Path) -> None:
    body = ServerQueryRequest("9", TABLE, "SELECT count(*) AS n, sum(v) AS s FROM cuvee_segments",
                              (segment_name(0, 0), "gone"), 1000).encode()
    response = client(tmp_path).post("/query", content=body)
    assert response.status_code == 200
    assert response.headers["content-type"] == ARROW_STREAM_MEDIA_TYPE
    table, stats = decode_response(response.content)
    assert table is not None and table.column("n").to_pylist() == [40]
    assert stats.totalDocs == 40 and stats.missingSegments == ("gone",)


def test_execution_errors_are_200_with_exceptions(tmp_path: Path) -> None:
    body = ServerQueryRequest("9", TABLE, "SELECT nope FROM cuvee_segments", (segment_name(0, 0),), 1000).encode()
    response = client(tmp_path).post("/query", content=body)
    assert response.status_code == 200
    table, stats = decode_response(response.content)
    assert table is None and [e.error_code for e in stats.exceptions] == [200]


def test_malformed_requests_are_400_json(tmp_path: Path) -> None:
    c = client(tmp_path)
    for content in (b"not json", orjson.dumps({"table": TABLE}), orjson.dumps([1, 2])):
        response = c.post("/query", content=content)
        assert response.status_code == 400
        assert response.json()["code"] == 400 and "server query request" in response.json()["error"]


def test_oversize_requests_are_413(tmp_path: Path) -> None:
    body = ServerQueryRequest("9", TABLE, "SELECT 1 FROM cuvee_segments WHERE " + "1=1 AND " * 300 + "1=1",
                              (segment_name(0, 0),), 1000).encode()
    response = client(tmp_path, max_request_bytes=1000).post("/query", content=body)
    assert response.status_code == 413 and "over 1000 bytes" in response.json()["error"]


def test_time_filter_over_http_and_malformed_ones_are_400(tmp_path: Path) -> None:
    c = client(tmp_path)
    half = ServerQueryRequest("9", TABLE, "SELECT count(*) AS n FROM cuvee_segments", (segment_name(0, 0),), 1000,
                              time_filter=TimeFilter("ts", ">", BASE_MS + 9_000))  # rows 10..39
    table, stats = decode_response(c.post("/query", content=half.encode()).content)
    assert table is not None and table.column("n").to_pylist() == [30] and stats.numDocsScanned == 30
    doc = {**half.to_dict(), "timeFilter": {"column": "ts", "op": ">= 0 OR TRUE --", "value": 1}}
    response = c.post("/query", content=orjson.dumps(doc))
    assert response.status_code == 400 and "time filter: op must be one of" in response.json()["error"]
