"""One multi-process cluster (controller, 2 servers, broker as processes) for every maintenance e2e module of this
package: each test makes tables of its own names, so they share it (a cluster starts in ~10 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from tests.e2e.support import FAST, fast_sqlite


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("maintenance")
    overrides = {**FAST, "controller": {**FAST["controller"], "lineage_end_timeout_seconds": 60}}
    info = up(LocalClusterSpec(dir=root, servers=2, metadata=fast_sqlite(root), overrides=overrides))
    try:
        http = httpx.Client(timeout=30)
        yield {**info, "http": http, "root": root}
        http.close()
    finally:
        down(root)
