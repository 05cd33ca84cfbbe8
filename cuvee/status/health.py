"""One word for a partition's health, from facts the status gathers. Pure.

In order of precedence:

- ``PAUSED``: the table's consumption is paused;
- ``STOPPED``: the partition's latest segment has no replica consuming or serving it (every replica stopped:
  repair re-creates its consuming segment; until then its rows are unavailable), or it is committed and no
  segment consumes after it (repair creates one);
- ``ERROR``: a replica of the latest segment is in ERROR, or its consumer reports an error or waits for its
  decoder (``replica_error``); or an earlier segment
  has a problem (no replica serves it, or a pauseless commit has not ended in ``STUCK_COMMIT_MS``);
- ``UNREACHABLE``: no replica of the consuming segment answered;
- ``LAGGING``: the best replica is more than ``lag_records`` behind the stream, or its newest message is more
  than ``lag_ms`` old while the stream holds more;
- ``HEALTHY``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplicaFacts:
    ideal_state: str  # the latest segment's state for this replica in the ideal state
    view_state: str | None  # in the external view (None: not reported)
    reachable: bool = True
    records_lag: int | None = None
    delay_ms: float | None = None  # now minus the newest consumed message's stream timestamp
    error: str | None = None


STUCK_COMMIT_MS = 300_000  # a segment COMMITTING (pauseless) longer than this is a problem of its partition
SERVED = ("ONLINE", "CONSUMING")


def partition_health(replicas: Sequence[ReplicaFacts], *, paused: bool, consuming: bool,
                     committed_without_successor: bool = False, lag_records: int = 10_000,
                     lag_ms: float = 60_000, problems: Sequence[str] = ()) -> str:
    """``consuming``: the latest segment is a consuming one (else committed: lag does not apply).
    ``committed_without_successor``: the latest segment is committed and nothing consumes after it.
    ``problems``: what is wrong with the partition's earlier segments (``segment_problems``)."""
    if paused:
        return "PAUSED"
    states = {r.ideal_state for r in replicas}
    if not replicas or states <= {"OFFLINE", "DROPPED"} or committed_without_successor:
        return "STOPPED"
    if problems or any(r.view_state == "ERROR" or r.error for r in replicas):
        return "ERROR"
    if not consuming:
        return "HEALTHY"
    reached = [r for r in replicas if r.reachable and r.ideal_state == "CONSUMING"]
    if not reached:
        return "UNREACHABLE"
    best = min((r.records_lag for r in reached if r.records_lag is not None), default=None)
    if best is not None and best > lag_records:
        return "LAGGING"
    if best and any(r.delay_ms is not None and r.delay_ms > lag_ms for r in reached):
        return "LAGGING"
    return "HEALTHY"


def segment_problems(segment: str, ideal: dict[str, str], view: dict[str, str], status: str | None,
                     committing_since_ms: int | None, now_ms: int) -> list[str]:
    """What is wrong with one of a partition's earlier segments (not the latest: ``partition_health`` judges
    that): no replica serves it though the ideal state wants it served, or a commit that has not ended."""
    problems = []
    wanted = [i for i, state in ideal.items() if state in SERVED]
    if wanted and not any(view.get(i) in SERVED for i in wanted):
        seen = ", ".join(f"{i}: {view.get(i) or 'not loaded'}" for i in sorted(wanted))
        problems.append(f"no replica serves {segment} ({seen})")
    if status == "COMMITTING" and committing_since_ms is not None and now_ms - committing_since_ms > STUCK_COMMIT_MS:
        problems.append(f"{segment} has been committing for {(now_ms - committing_since_ms) // 1000} s")
    return problems


def replica_error(report: Mapping[str, Any]) -> str | None:
    """What stops a consuming replica, as the status shows it: its error, its upload's, or its decoder waiting
    (a schema registry that does not answer: the consumer fetches the same messages again until it does)."""
    if report.get("error") or report.get("uploadError"):
        return str(report.get("error") or report.get("uploadError"))
    waiting = report.get("decoderUnavailable")
    if waiting:
        return f"decoder waiting ({report.get('decoderRetries') or 0} retries): {waiting}"
    return None


def table_health(partitions: Sequence[str]) -> str:
    """The worst partition's word (a table of no partition is HEALTHY)."""
    order = ["STOPPED", "ERROR", "UNREACHABLE", "LAGGING", "PAUSED", "HEALTHY"]
    return min(partitions, key=order.index, default="HEALTHY")
