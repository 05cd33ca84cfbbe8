"""Credentials that tools outside the roles send, from the environment (docs/security.md).

- ``CUVEE_TOKEN`` (a principal's bearer token), or ``CUVEE_USER`` and ``CUVEE_PASSWORD``: what ``cuvee pipeline``
  sends the controller;
- ``CUVEE_INTERNAL_TOKEN``: the cluster's internal token, for the Spark reader, which reads servers directly
  (on a Spark cluster, pass it to executors too: ``spark.executorEnv.CUVEE_INTERNAL_TOKEN``).
"""

from __future__ import annotations

import base64
import os


def user_headers() -> dict[str, str]:
    token = os.environ.get("CUVEE_TOKEN")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("CUVEE_USER"), os.environ.get("CUVEE_PASSWORD")
    if user and password is not None:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


def cluster_headers() -> dict[str, str]:
    token = os.environ.get("CUVEE_INTERNAL_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}
