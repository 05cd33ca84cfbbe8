"""Issue 29: one anonymous request must never end a role. Texts that crashed the broker and the server
(``id = 0 OR id = 1 OR ... OR id = 19999``: a segmentation fault, Arrow binding the filter DuckDB pushed into its
scan, one C++ frame per OR) are refused with 150 naming the limit, by the broker and by a server asked directly;
a 100,000-value IN-list is answered; JSON bodies nested 100,000 deep get 400 from the controller. Separate
processes, so a crash is a dead role here and not a dead test run; each role answers /health afterwards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.protocol.query import ServerQueryRequest, decode_response
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, counts, create_id_table, fast_sqlite, log_stream, produce_ids

TABLE = "hostile"
OR_CHAIN = " OR ".join(f"id = {i}" for i in range(20_000))


def _error(answer: dict[str, Any]) -> tuple[int, str]:
    [error] = answer["exceptions"]
    return error["errorCode"], error["message"]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_hostile_texts_are_refused_by_name_and_every_role_stays_up(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=1, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=120)
    broker, server, controller = info["broker"], info["servers"][0], info["controller"]

    def all_healthy() -> None:
        for url in (broker, server, controller):
            assert http.get(f"{url}/health", timeout=10).status_code == 200, f"{url} no longer answers"

    def ask(sql: str) -> dict[str, Any]:
        response = http.post(f"{broker}/query/sql", json={"sql": sql, "queryOptions": "timeoutMs=120000"})
        assert response.status_code == 200
        return response.json()

    try:
        configs = log_stream(tmp_path, TABLE, flush_rows=500)
        create_id_table(http, controller, TABLE, configs, partitions=1, replicas=1)
        produce_ids(configs, 0, 1000)
        wait_until(lambda: counts(http, broker, TABLE) == (1000, 1000), 60, interval=0.2)

        started = time.monotonic()
        code, message = _error(ask(f"SELECT COUNT(*) FROM {TABLE} WHERE {OR_CHAIN}"))
        assert code == 150 and "(query_limits.max_connectives)" in message, message
        assert time.monotonic() - started < 30
        code, message = _error(ask("SELECT " + "abs(" * 10_000 + "id" + ")" * 10_000 + f" FROM {TABLE}"))
        assert code == 150 and "(query_limits.max_nesting)" in message, message
        code, message = _error(ask(f"SELECT COUNT(*) FROM {TABLE} WHERE " + "(" * 10_000 + "id = 1" + ")" * 10_000))
        assert code == 150 and "(query_limits.max_nesting)" in message, message
        all_healthy()

        # a long list belongs in IN (...): flat for every engine, answered whole
        listed = ", ".join(str(i) for i in range(0, 200_000, 2))  # 100,000 values, ~690 KB
        answer = ask(f"SELECT COUNT(*) FROM {TABLE} WHERE id IN ({listed})")
        assert answer["exceptions"] == [] and answer["resultTable"]["rows"] == [[500]]

        # a client that reaches the server directly, as a broker would
        held = http.get(f"{server}/tables/{TABLE}_REALTIME/segments").json()["segments"]
        request = ServerQueryRequest(request_id="hostile", table=f"{TABLE}_REALTIME",
                                     sql=f"SELECT count(*) AS __p0 FROM cuvee_segments WHERE {OR_CHAIN}",
                                     segments=tuple(s["segmentName"] for s in held), timeout_ms=120_000)
        response = http.post(f"{server}/query", content=request.encode())
        assert response.status_code == 200
        result, stats = decode_response(response.content)
        [failure] = stats.exceptions
        assert result is None and failure.error_code == 150 and "(query_limits.max_connectives)" in failure.message
        all_healthy()

        # JSON nested deeper than any parser's recursion: a plain 400 on every body-taking route tried
        deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
        routes = [("POST", f"{controller}/schemas"), ("POST", f"{controller}/tables"),
                  ("PUT", f"{controller}/tables/{TABLE}"), ("POST", f"{controller}/sql"),  # the console's queries
                  ("POST", f"{controller}/segments?tableName={TABLE}"),  # a metadata push reads its body itself
                  ("POST", f"{broker}/query/sql"), ("POST", f"{server}/query")]
        for method, url in routes:
            response = http.request(method, url, content=deep, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, (url, response.status_code, response.text[:200])
            assert "Recursion" not in response.text and "Traceback" not in response.text
        all_healthy()
        assert counts(http, broker, TABLE) == (1000, 1000)
    finally:
        http.close()
        down(tmp_path)
