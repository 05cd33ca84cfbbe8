"""``POST /sql`` on the controller: the console's query, answered by a live broker.

The caller's own ``Authorization`` header goes with it (never the cluster's internal token): the broker
authenticates it and checks READ on the query's table, so the console can read no more than its user may.
Brokers are tried in a shuffled order; one that cannot be reached is skipped, one that answers is final.
"""

from __future__ import annotations

import random
import ssl
from typing import Any

import httpx

from cuvee.broker.config import BROKER_TAG
from cuvee.cluster.store import ClusterStore

MAX_SQL_CHARS = 1_000_000  # the broker bounds it again (max_sql_bytes); this keeps the hop honest
MAX_BODY_BYTES = 4 * MAX_SQL_CHARS + 64 * 1024  # a JSON body holding the longest query (escapes included)


def live_brokers(store: ClusterStore) -> list[str]:
    """URLs of the brokers with a live node."""
    live = set(store.live_instance_ids())
    urls = (i.url() for i in store.instances()
            if i.instance_id in live and any(tag.endswith("_BROKER") for tag in i.tags))
    return [url for url in urls if url is not None]


def _error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"code": status, "error": message}


async def forward_query(brokers: list[str], body: Any, authorization: str | None, *, timeout: float,
                        verify: ssl.SSLContext | bool) -> tuple[int, Any]:
    """(status, JSON body) of the first broker that answers ``body``; 400 for a body that is not a query, 503
    when no broker is live or none can be reached."""
    if not isinstance(body, dict) or not isinstance(body.get("sql"), str) or not body["sql"].strip():
        return _error(400, 'the body must be JSON {"sql": "<query>"}')
    if len(body["sql"]) > MAX_SQL_CHARS:
        return _error(400, f"the query is over {MAX_SQL_CHARS} characters")
    request: dict[str, Any] = {"sql": body["sql"]}
    if isinstance(body.get("queryOptions"), str):
        request["queryOptions"] = body["queryOptions"]
    if not brokers:
        return _error(503, f"no live broker (tag {BROKER_TAG}) to run the query")
    headers = {"Authorization": authorization} if authorization else {}
    order = random.sample(brokers, len(brokers))
    async with httpx.AsyncClient(timeout=timeout, verify=verify, headers=headers) as client:
        for url in order:
            try:
                response = await client.post(f"{url}/query/sql", json=request)
            except httpx.TimeoutException:
                return _error(504, f"the broker at {url} did not answer within {timeout:g} s")
            except httpx.HTTPError:
                continue  # unreachable: the next broker
            if response.status_code == 401:  # known to the controller, not to the broker (yet): never a login loop
                return _error(502, "the broker did not accept your credentials; a principal kept in the metadata "
                                   "store reaches the brokers within auth.principals_refresh_seconds, one in a "
                                   "controller's config file must be in the brokers' too")
            try:
                return response.status_code, response.json()
            except ValueError:
                return _error(502, f"the broker at {url} answered HTTP {response.status_code} without JSON")
    return _error(503, f"none of the {len(order)} live brokers could be reached")
