"""Prometheus metrics of each role (``GET /metrics``, text exposition; docs/metrics.md lists every one).

Each role instance has a registry of its own (an in-process cluster holds several servers in one process), its
instruments defined in this package's per-role module; the roles and their components only call them. Labels
follow Pinot's: ``table`` (the name with its type) and ``partition`` where a metric is per stream partition.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


def new_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def metrics_router(registry: CollectorRegistry) -> APIRouter:
    """``GET /metrics``: the registry in Prometheus' text format."""
    api = APIRouter()

    @api.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return api
