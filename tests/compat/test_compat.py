"""The external query sets (cuvee/testing/compat/sets: ClickBench's 43 Pinot queries, Pinot's own 200
compatibility queries) on generated rows through a live cluster, each answer judged against DuckDB over the same
rows running the set's own oracle text (the H2 translations for Pinot's set). Every query must answer, and answer
right. ``bench/compat.py`` runs the same at size and prints each query's time against DuckDB's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.compat.judge import Outcome, Verdict, oracle_connection
from cuvee.testing.compat.queries import CLICKBENCH, PINOT, clickbench_queries, pinot_queries
from cuvee.testing.compat.run import generated, judge_all, load
from cuvee.testing.waiting import wait_until

ROWS = 20_000


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Outcome]]]:
    root: Path = tmp_path_factory.mktemp("compat")
    with InProcessCluster(root, servers=2) as cluster:
        tables = {}
        for suite in (CLICKBENCH, PINOT):
            rows = generated(suite, ROWS)
            name = "hits" if suite == CLICKBENCH else "mytable"
            tables[name] = rows
            load(cluster.http, cluster.controller_url, suite, rows, segments=4)
            wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {name}") == ROWS, 60)
        oracle = oracle_connection(tables)
        yield {CLICKBENCH: judge_all(cluster.http, cluster.broker_url, oracle, clickbench_queries()),
               PINOT: judge_all(cluster.http, cluster.broker_url, oracle, pinot_queries())}


@pytest.mark.parametrize("suite, expected", [(CLICKBENCH, 43), (PINOT, 200)])
def test_every_query_of_the_set_answers_and_answers_right(outcomes: dict[str, list[Outcome]], suite: str,
                                                          expected: int) -> None:
    found = outcomes[suite]
    assert len(found) == expected
    bad = [f"{o.query_id} {o.verdict.value}: {o.detail}" for o in found if o.verdict is not Verdict.PASS]
    assert not bad, "\n".join(bad)
    assert sum(o.rows for o in found) > expected  # the generated rows make the queries select something
