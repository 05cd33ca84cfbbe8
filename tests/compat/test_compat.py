"""The external query sets (cuvee/testing/compat/sets: ClickBench's 43 Pinot queries, Pinot's own 200
compatibility queries) on generated rows through a live cluster, each answer judged against DuckDB over the same
rows running the set's own oracle text (the H2 translations for Pinot's set). Every query must answer, and answer
right. ``bench/compat.py`` runs the same at size and prints each query's time against DuckDB's."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from cuvee.testing.compat.judge import Outcome, Verdict
from cuvee.testing.compat.queries import CLICKBENCH, CUVEE, PINOT, clickbench_queries, cuvee_queries, pinot_queries
from cuvee.testing.compat.run import judge_all
from tests.compat.conftest import Compat

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
def outcomes(compat: Compat) -> Callable[[str], list[Outcome]]:
    """Each set's outcomes, judged when a test first asks for them (``-k cuvee`` judges Cuvee's own set alone)."""
    http, broker = compat.cluster.http, compat.cluster.broker_url
    sets = {CLICKBENCH: clickbench_queries, PINOT: pinot_queries, CUVEE: cuvee_queries}
    return functools.cache(lambda suite: judge_all(http, broker, compat.oracle, sets[suite]()))


@pytest.mark.parametrize("suite, expected", [(CLICKBENCH, 43), (PINOT, 200), (CUVEE, 14)])
def test_every_query_of_the_set_answers_and_answers_right(outcomes: Callable[[str], list[Outcome]], suite: str,
                                                          expected: int) -> None:
    found = outcomes(suite)
    assert len(found) == expected
    bad = [f"{o.query_id} {o.verdict.value}: {o.detail}" for o in found if o.verdict is not Verdict.PASS]
    assert not bad, "\n".join(bad)
    idle = {o.query_id for o in found if o.extra.get("trivial")} - set(EMPTY_BY_DESIGN)
    assert not idle, f"the generated rows give these queries nothing to answer: {sorted(idle)}"
