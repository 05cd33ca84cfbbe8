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
# Queries whose right answer on 20,000 generated rows is empty (or all zeros) whatever the engine: they check
# little here, and bench/compat.py runs them at size. Any other query answering nothing fails the test (the
# generated rows must give each query something to select).
EMPTY_BY_DESIGN = {
    "clickbench-028": "HAVING COUNT(*) > 100000", "clickbench-029": "HAVING COUNT(*) > 100000",
    "clickbench-039": "OFFSET 1000", "clickbench-041": "OFFSET 100 of a narrow filter",
    "clickbench-042": "OFFSET 10000", "clickbench-043": "OFFSET 1000",
    "pinot-113": "BETWEEN 1257 AND 325", "pinot-117": "Quarter NOT IN (1) in a one-quarter sample",
    "pinot-189": "BETWEEN 338.0 AND 18", "pinot-190": "BETWEEN '1900-1959' AND '0700-0759'",
    "pinot-191": "BETWEEN 353 AND 328", "pinot-199": "BETWEEN 292.0 AND 237.0",
}


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
    idle = {o.query_id for o in found if o.extra.get("trivial")} - set(EMPTY_BY_DESIGN)
    assert not idle, f"the generated rows give these queries nothing to answer: {sorted(idle)}"
