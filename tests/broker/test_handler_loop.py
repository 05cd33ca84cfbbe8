"""The broker's event loop stays free: a slow answer (merge, response building, JSON encoding) runs on a worker
thread while other queries are answered; and the server connection pool is closed exactly once, after the last
query using it, with no pool opened once the broker is stopping.

The slow step is injected (a wrapper that blocks on a ``threading.Event``), and progress is observed with events,
never by sleeping.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest

from cuvee.broker import app as broker_app
from cuvee.broker import handler as handler_module
from cuvee.broker.cluster_view import ClusterSnapshot, TableEntry, table_info
from cuvee.broker.config import BrokerConfig
from cuvee.broker.handler import QueryHandler
from cuvee.broker.hybrid import QueryTarget
from cuvee.broker.scatter import ServerCall, ServerReply
from cuvee.metrics.broker import BrokerMetrics
from cuvee.cluster.records import ExternalView, SegmentState
from cuvee.protocol.query import ServerQueryStats
from cuvee.query import TableInfo
from tests.broker.helpers import TABLE, schema, segment_name

HOLD = 10.0  # the injected slow step gives up after this, so a regression fails instead of hanging
SEGMENT = segment_name(0, 0)


class FakeView:
    """The handler's view of one table, ``events``; with ``server`` its one segment is ONLINE there."""

    def __init__(self, server: str | None = None):
        segments = {SEGMENT: {server: SegmentState.ONLINE}} if server else {}
        self.entry = TableEntry(TABLE, table_info(TABLE, schema()), schema().arrow_schema(),
                                ExternalView(TABLE, segments))
        self.snapshot = ClusterSnapshot({TABLE: self.entry}, {server: "http://127.0.0.1:9"} if server else {})

    def resolve(self, name: str) -> TableInfo | None:
        return self.entry.info if name.lower() in ("events", TABLE.lower()) else None

    def table(self, name: str) -> TableEntry | None:
        return self.entry if name == TABLE else None

    def targets(self, name: str) -> list[QueryTarget]:
        return [QueryTarget(self.entry)] if name == TABLE else []


class Gate:
    """Wraps a function so that its first call signals ``entered`` and blocks until ``release`` (or HOLD)."""

    def __init__(self, inner: Callable[..., Any]):
        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.timed_out = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.timed_out = not self.release.wait(HOLD)
        return self.inner(*args, **kwargs)


@pytest.fixture
def handler() -> Iterator[QueryHandler]:
    handler = QueryHandler(BrokerConfig(metadata="sqlite:///unused"), FakeView())  # type: ignore[arg-type]
    yield handler


def test_a_slow_response_does_not_delay_a_concurrent_small_query(handler: QueryHandler,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(handler_module.broker_response)
    monkeypatch.setattr(handler_module, "broker_response", gate)

    async def scenario() -> None:
        slow = asyncio.create_task(handler.handle("SELECT * FROM events LIMIT 100000"))
        assert await asyncio.to_thread(gate.entered.wait, HOLD)
        small = await handler.handle("SELECT COUNT(*) FROM events")  # answered while the slow one is still building
        assert not slow.done(), "the small query waited for the slow one"
        assert small["exceptions"] == [] and small["resultTable"]["rows"] == [[0]]
        gate.release.set()
        big = await slow
        assert big["exceptions"] == [] and big["resultTable"]["rows"] == []

    asyncio.run(scenario())
    assert not gate.timed_out


def test_json_encoding_runs_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(broker_app.encode)
    monkeypatch.setattr(broker_app, "encode", gate)

    class Handler:
        async def handle(self, sql: Any, options: Any = None, principal: Any = None) -> dict[str, Any]:
            return {"sql": sql, "numRowsResultSet": 100_000 if sql == "big" else 1}  # small ones: on the loop

    class Broker:
        instance_id = "Broker_test"
        config = BrokerConfig(metadata="sqlite:///unused")
        metrics = BrokerMetrics()
        is_serving = True
        handler = Handler()

    async def scenario() -> None:
        transport = httpx.ASGITransport(broker_app.build_broker_app(Broker()))  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://broker") as client:
            slow = asyncio.create_task(client.post("/query/sql", json={"sql": "big"}))
            assert await asyncio.to_thread(gate.entered.wait, HOLD)
            small = await client.post("/query/sql", json={"sql": "small"})
            assert not slow.done(), "the small answer waited for the slow one's encoding"
            assert small.json() == {"sql": "small", "numRowsResultSet": 1}
            gate.release.set()
            assert (await slow).json() == {"sql": "big", "numRowsResultSet": 100_000}

    asyncio.run(scenario())
    assert not gate.timed_out


def test_the_pool_closes_after_the_last_query_and_none_opens_once_stopping(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = QueryHandler(BrokerConfig(metadata="sqlite:///unused"), FakeView("Server_A"))  # type: ignore[arg-type]
    plan_gate = Gate(handler_module.plan_sql)
    pools: list[Any] = []
    scattering = asyncio.Event()
    answer = asyncio.Event()

    async def fake_scatter(client: Any, calls: list[ServerCall], wait: float, **_: Any) -> list[ServerReply]:
        pools.append(client)
        scattering.set()
        await answer.wait()  # the in-flight query is still using the pool
        assert not client.closed
        return [ServerReply(c.instance, None, ServerQueryStats(numSegmentsQueried=1)) for c in calls]

    monkeypatch.setattr(handler_module, "scatter", fake_scatter)

    async def scenario() -> None:
        first = asyncio.create_task(handler.handle("SELECT COUNT(*) FROM events"))
        await scattering.wait()
        monkeypatch.setattr(handler_module, "plan_sql", plan_gate)
        # held while planning (another text: the first one's plan is cached and would not be planned again)
        planning = asyncio.create_task(handler.handle("SELECT count(*) FROM events"))
        assert await asyncio.to_thread(plan_gate.entered.wait, HOLD)
        await asyncio.to_thread(handler.close)  # as Broker.stop() does, from its own thread
        assert not pools[0].closed, "the pool was closed under an in-flight query"
        plan_gate.release.set()
        late = await planning  # it reaches the scatter step after close(): no new pool for it
        assert [e["errorCode"] for e in late["exceptions"]] == [450]
        assert "stopping" in late["exceptions"][0]["message"]
        assert not pools[0].closed
        answer.set()
        done = await first
        assert done["exceptions"] == [] and done["numServersResponded"] == 1
        assert pools[0].closed and not handler.pool_open

    asyncio.run(scenario())
    assert handler.pools_opened == 1 and len(pools) == 1


def test_close_closes_an_idle_pool_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = QueryHandler(BrokerConfig(metadata="sqlite:///unused"), FakeView("Server_A"))  # type: ignore[arg-type]
    pools: list[Any] = []

    async def fake_scatter(client: Any, calls: list[ServerCall], wait: float, **_: Any) -> list[ServerReply]:
        pools.append(client)
        return [ServerReply(c.instance, pa.table({}), ServerQueryStats()) for c in calls]

    monkeypatch.setattr(handler_module, "scatter", fake_scatter)

    async def scenario() -> None:
        await handler.handle("SELECT COUNT(*) FROM events")
        assert not pools[0].closed
        await asyncio.to_thread(handler.close)
        assert pools[0].closed and not handler.pool_open
        after = await handler.handle("SELECT COUNT(*) FROM events")
        assert [e["errorCode"] for e in after["exceptions"]] == [450]

    asyncio.run(scenario())
    assert handler.pools_opened == 1
