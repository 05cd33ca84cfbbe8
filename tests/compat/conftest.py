"""The live clusters of the compatibility tests: both sets' tables loaded once per cluster (20,000 generated rows
each, 4 offline segments), with DuckDB over the same rows as the oracle. Two servers, whose partial answers the
broker merges, and one server, which answers aggregations whole (``QueryPlan.whole_sql``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.compat.judge import oracle_connection
from cuvee.testing.compat.queries import CLICKBENCH, PINOT
from cuvee.testing.compat.run import generated, load
from cuvee.testing.waiting import wait_until

ROWS = 20_000
LEAF_ROWS = 15_000


@dataclass
class Compat:
    cluster: InProcessCluster
    oracle: Any  # a DuckDB connection with `hits` and `mytable` registered


@pytest.fixture(scope="package", params=[2, 1], ids=["two servers", "one server"])
def compat(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compat]:
    root: Path = tmp_path_factory.mktemp("compat")
    # a leaf may bring 15,000 rows to the broker: the whole of a table (20,000) is refused, with a filter it fits
    # the servers copy segments into DuckDB as queries read them (native copies, every size): the set runs over
    # Arrow views, copies and both mixed while the copies are made
    with InProcessCluster(root, servers=request.param, broker={"multistage_leaf_rows": LEAF_ROWS},
                          server={"native_copy_bytes": 256 << 20, "native_copy_min_rows": 1}) as cluster:
        tables = {}
        for suite in (CLICKBENCH, PINOT):
            rows = generated(suite, ROWS)
            name = "hits" if suite == CLICKBENCH else "mytable"
            tables[name] = rows
            load(cluster.http, cluster.controller_url, suite, rows, segments=4)
            wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {name}") == ROWS, 60)
        yield Compat(cluster, oracle_connection(tables))
