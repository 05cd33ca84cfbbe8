"""A partition's health word from the facts the status gathers."""

from __future__ import annotations

from cuvee.status.health import ReplicaFacts, partition_health, table_health

OK = ReplicaFacts("CONSUMING", "CONSUMING", records_lag=0, delay_ms=10)


def test_words_in_order_of_precedence() -> None:
    assert partition_health([OK, OK], paused=False, consuming=True) == "HEALTHY"
    assert partition_health([OK], paused=True, consuming=True) == "PAUSED"
    stopped = ReplicaFacts("OFFLINE", "OFFLINE")
    assert partition_health([stopped, stopped], paused=False, consuming=True) == "STOPPED"
    assert partition_health([], paused=False, consuming=True) == "STOPPED"
    assert partition_health([OK, ReplicaFacts("CONSUMING", "ERROR")], paused=False, consuming=True) == "ERROR"
    assert partition_health([OK, ReplicaFacts("CONSUMING", "CONSUMING", error="disk full")], paused=False,
                            consuming=True) == "ERROR"
    gone = ReplicaFacts("CONSUMING", None, reachable=False)
    assert partition_health([gone, gone], paused=False, consuming=True) == "UNREACHABLE"
    behind = ReplicaFacts("CONSUMING", "CONSUMING", records_lag=50_000, delay_ms=10)
    assert partition_health([behind], paused=False, consuming=True) == "LAGGING"
    assert partition_health([behind, OK], paused=False, consuming=True) == "HEALTHY"  # the best replica counts
    old = ReplicaFacts("CONSUMING", "CONSUMING", records_lag=5, delay_ms=120_000)
    assert partition_health([old], paused=False, consuming=True) == "LAGGING"
    idle = ReplicaFacts("CONSUMING", "CONSUMING", records_lag=0, delay_ms=120_000)  # caught up, stream quiet
    assert partition_health([idle], paused=False, consuming=True) == "HEALTHY"
    committed = ReplicaFacts("ONLINE", "ONLINE")
    assert partition_health([committed], paused=False, consuming=False) == "HEALTHY"
    assert partition_health([committed], paused=False, consuming=False, committed_without_successor=True) == "STOPPED"
    starting = ReplicaFacts("CONSUMING", None)  # just placed: not reported yet, not unreachable
    assert partition_health([starting], paused=False, consuming=True) == "HEALTHY"
    assert table_health(["HEALTHY", "LAGGING", "PAUSED"]) == "LAGGING" and table_health([]) == "HEALTHY"


def test_an_earlier_segment_no_replica_serves_or_a_stuck_pauseless_commit_makes_the_partition_an_error() -> None:
    from cuvee.status.health import STUCK_COMMIT_MS, segment_problems

    ideal = {"A": "ONLINE", "B": "ONLINE"}
    assert segment_problems("s1", ideal, {"A": "ONLINE", "B": "ERROR"}, "DONE", 0, 10) == []  # one serves it
    [problem] = segment_problems("s1", ideal, {"A": "ERROR"}, "DONE", 0, 10)
    assert "no replica serves s1" in problem and "A: ERROR" in problem and "B: not loaded" in problem
    assert segment_problems("s1", {"A": "OFFLINE"}, {}, "DONE", 0, 10) == []  # not wanted served: repair's part
    committing = {"A": "CONSUMING", "B": "CONSUMING"}
    assert segment_problems("s2", committing, committing, "COMMITTING", 0, STUCK_COMMIT_MS) == []
    [stuck] = segment_problems("s2", committing, committing, "COMMITTING", 0, STUCK_COMMIT_MS + 1000)
    assert "s2 has been committing for" in stuck
    assert partition_health([OK], paused=False, consuming=True, problems=[stuck]) == "ERROR"
    assert partition_health([OK], paused=True, consuming=True, problems=[stuck]) == "PAUSED"
