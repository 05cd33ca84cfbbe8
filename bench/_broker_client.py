"""A lean client of the broker's ``POST /query/sql`` for latency figures: Python's own ``http.client`` on one
keep-alive connection (httpx spends ~2 ms of its own CPU a request, more than some whole queries take).

The wall time it reports is a client's: the request sent, the broker's work, the answer read and parsed."""

from __future__ import annotations

import http.client
import time
from typing import Any

import orjson


class BrokerClient:
    def __init__(self, broker_url: str, timeout: float = 600) -> None:
        host, port = broker_url.split("//", 1)[1].rsplit(":", 1)
        self._connection = http.client.HTTPConnection(host, int(port), timeout=timeout)

    def post(self, sql: str) -> dict[str, Any]:
        body = orjson.dumps({"sql": sql})
        try:
            return self._send(body)
        except (http.client.HTTPException, ConnectionError):  # the broker closed an idle keep-alive connection
            self._connection.close()
            return self._send(body)

    def timed(self, sql: str) -> tuple[dict[str, Any], float]:
        """The answer and the client's wall time for it, in ms."""
        began = time.perf_counter()
        answer = self.post(sql)
        return answer, (time.perf_counter() - began) * 1000

    def close(self) -> None:
        self._connection.close()

    def _send(self, body: bytes) -> dict[str, Any]:
        self._connection.request("POST", "/query/sql", body, {"content-type": "application/json"})
        answer: dict[str, Any] = orjson.loads(self._connection.getresponse().read())
        return answer
