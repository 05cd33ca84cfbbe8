"""Prometheus metrics of each role (``GET /metrics``, text exposition; docs/metrics.md lists every one).

Each role instance has a registry of its own (an in-process cluster holds several servers in one process), its
instruments defined in this package's per-role module; the roles and their components only call them. Labels
follow Pinot's: ``table`` (the name with its type) and ``partition`` where a metric is per stream partition.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase


def new_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=True)


def keep_label_values(owner: object, label: str, keep: Callable[[str], bool]) -> int:
    """Remove, from every instrument ``owner`` holds as an attribute, the series whose ``label`` value ``keep``
    refuses: a dropped table's series would otherwise be exposed, frozen, until the role restarts. Returns how
    many went."""
    removed = 0
    for metric in vars(owner).values():
        if not isinstance(metric, MetricWrapperBase) or label not in metric._labelnames:
            continue
        at = metric._labelnames.index(label)
        for key in [k for k in list(metric._metrics) if not keep(k[at])]:  # prometheus_client: no filtered remove
            metric.remove(*key)
            removed += 1
    return removed


def metrics_router(registry: CollectorRegistry, before_scrape: Callable[[], None] | None = None) -> APIRouter:
    """``GET /metrics``: the registry in Prometheus' text format. ``before_scrape``: the role drops the series of
    tables that are gone (``keep_tables`` of its metrics), so a scrape never shows a dropped table."""
    api = APIRouter()

    @api.get("/metrics")
    def metrics() -> Response:
        if before_scrape is not None:
            before_scrape()
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return api
