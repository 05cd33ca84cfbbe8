"""A join rewritten into LOOKUPs runs on the fact table's servers only when each of them holds the dimension
table whole (found by a review: a server of another tenant, or one added before a rebalance, would answer 235)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from cuvee.broker.handler import QueryHandler
from cuvee.cluster.records import SegmentState
from cuvee.query.lookup import Lookup

ON = SegmentState.ONLINE


def _view(facts: dict[str, dict[str, SegmentState]], dims: dict[str, dict[str, SegmentState]]) -> Any:
    def target(segments: dict[str, dict[str, SegmentState]]) -> Any:
        return SimpleNamespace(entry=SimpleNamespace(view=SimpleNamespace(segments=segments)))

    tables = {"games_OFFLINE": [target(facts)], "teams_OFFLINE": [target(dims)] if dims else []}
    return SimpleNamespace(targets=lambda name: tables.get(name, []))


def _beside(facts: dict[str, dict[str, SegmentState]], dims: dict[str, dict[str, SegmentState]]) -> bool:
    handler = QueryHandler.__new__(QueryHandler)  # only the view is read
    handler.view = _view(facts, dims)
    plan = SimpleNamespace(table="games_OFFLINE", lookups=(Lookup("cuvee_lookup_1", "teams_OFFLINE"),))
    return handler._dimensions_beside_facts(plan)  # type: ignore[arg-type]


def test_every_fact_server_must_hold_every_dimension_segment_online() -> None:
    facts = {"g0": {"A": ON}, "g1": {"B": ON}}
    assert _beside(facts, {"t0": {"A": ON, "B": ON}, "t1": {"A": ON, "B": ON, "C": ON}})
    assert not _beside(facts, {"t0": {"A": ON, "B": ON}, "t1": {"A": ON}})  # B lacks t1
    assert not _beside(facts, {"t0": {"A": ON, "B": SegmentState.OFFLINE}})  # B's copy is not ONLINE
    assert not _beside(facts, {})  # no dimension segment anywhere: the broker's join answers
