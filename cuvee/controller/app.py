"""The controller's FastAPI app: one router per concern."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from cuvee.controller import (
    api_compaction,
    api_completion,
    api_consumption,
    api_offline,
    api_reload,
    api_schemas,
    api_segments,
    api_tables,
    api_tasks,
    api_users,
    rebalance,
    repair,
    retention,
)
from cuvee.console import console_router
from cuvee.controller.api_common import install_error_handlers
from cuvee.controller.catalog import Catalog
from cuvee.metrics import metrics_router

if TYPE_CHECKING:
    from cuvee.controller.controller import Controller


def build_app(ctl: Controller) -> FastAPI:
    app = FastAPI(title="Cuvee controller")
    install_error_handlers(app)
    for module in (api_offline, api_reload, api_segments, api_schemas, api_tables, api_consumption, api_completion,
                   repair, retention, rebalance, api_tasks, api_compaction):
        app.include_router(module.router(ctl))
    app.include_router(metrics_router(  # series of tables that no longer exist go
        ctl.metrics.registry, lambda: ctl.metrics.keep_tables(set(Catalog(ctl.store).table_names()))))
    app.include_router(console_router(ctl, app))
    app.include_router(api_users.router(lambda: ctl.store, ctl.config.auth, ctl.refresh_principals))
    return app
