"""What one batch write replaces (pure): the driver's side of "re-running a job never duplicates rows".

Segment names carry a fingerprint of the job's input, so the same input gives the same names and CRCs. A built
segment that the table already serves under its name with the same CRC is *unchanged*: not pushed again. The
rest are ``segments_to``. ``segments_from`` is what they replace: for REFRESH every other segment of the table,
for APPEND the segments the last completed run over the same input (``input key``) pushed. A name that exists
but is hidden by lineage (pushed by a run that died before its end) is pushed again, never counted unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from cuvee.lineage.model import SegmentLineage
from cuvee.errors import UserError
from cuvee.lineage.rules import hidden_segments, merged_runs, previous_run


class ReplaceError(UserError):
    """The replace cannot be planned safely; the message says what to do instead."""


@dataclass(frozen=True)
class ReplacePlan:
    segments_from: tuple[str, ...]
    segments_to: tuple[str, ...]
    unchanged: tuple[str, ...]

    @property
    def nothing_to_do(self) -> bool:
        return not self.segments_from and not self.segments_to


def plan_replace(built: Sequence[Mapping[str, Any]], existing_crcs: Mapping[str, int | None], lineage: SegmentLineage,
                 *, refresh: bool, input_key: str) -> ReplacePlan:
    """``built``: metadata of the segments this run built; ``existing_crcs``: the table's segments (ideal state)
    and their CRCs."""
    existing: Set[str] = set(existing_crcs)
    hidden = hidden_segments(lineage)
    names = {b["segmentName"] for b in built}
    unchanged = sorted(b["segmentName"] for b in built if b["segmentName"] in existing
                       and b["segmentName"] not in hidden and existing_crcs.get(b["segmentName"]) == b["crc"])
    targets = sorted(names - set(unchanged))
    if refresh:
        sources = sorted((existing - hidden) - names)
    else:
        merged = merged_runs(lineage, input_key)
        if merged:
            raise ReplaceError(f"the last run over this input pushed segments a maintenance job has since merged "
                               f"with other rows ({', '.join(merged[:3])}{', ...' if len(merged) > 3 else ''}): "
                               "an APPEND re-run would add its rows a second time; re-run with --mode refresh, "
                               "or load new data under another input path")
        sources = sorted(set(previous_run(lineage, input_key, existing)) - names)
    return ReplacePlan(tuple(sources), tuple(targets), tuple(unchanged))
