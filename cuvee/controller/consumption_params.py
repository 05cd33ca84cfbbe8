"""The parameters of Pinot's consumption controls, checked before anything changes (pure: no I/O).

- ``resumeConsumption?consumeFrom=smallest|largest`` (``ConsumeFrom``): each partition's new consuming segment
  starts at the stream's earliest or latest offset instead of where its last segment ended.
- ``forceCommit?partitions=0,1`` or ``?segments=a,b`` (``commit_targets``): only those partitions' consuming
  segments, or those consuming segments, are committed. Every name is checked: a partition the table does not
  have, one with no consuming segment, or a segment that is not consuming is a 400 naming it (Pinot first refused
  segments that are not consuming, then let them pass with a warning; a listed name that commits nothing is refused
  here so a typo never passes for done). Giving both is refused too (Pinot silently takes the segments).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from cuvee.cluster.paths import check_name
from cuvee.controller.errors import BadRequest
from cuvee.errors import UserError
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

MAX_LISTED = 10_000  # partitions or segments one call may name


class ConsumeFrom(str, enum.Enum):
    SMALLEST = "smallest"
    LARGEST = "largest"

    @classmethod
    def parse(cls, text: str | None) -> ConsumeFrom | None:
        """Pinot's values, in any case; None when not given."""
        if text is None:
            return None
        try:
            return cls(text.lower())
        except ValueError:
            raise BadRequest(f"consumeFrom param {text[:64]!r} is not valid: smallest or largest") from None


def commit_targets(consuming: Mapping[str, list[str]], partitions: Iterable[int], *, by_partition: str | None,
                   by_segment: str | None) -> list[str]:
    """The consuming segments (of ``consuming``: segment -> instances) a force commit ends: all of them, those of
    the partitions ``by_partition`` lists, or the segments ``by_segment`` lists (comma-separated, Pinot's
    parameters). ``partitions``: every partition the table has segments for."""
    if by_partition is not None and by_segment is not None:
        raise BadRequest("give partitions or segments to commit, not both")
    if by_partition is None and by_segment is None:
        return sorted(consuming)
    if by_segment is not None:
        names = _listed(by_segment, "segments")
        for name in names:
            try:
                check_name("segment", name)
            except UserError as exc:
                raise BadRequest(str(exc)) from None
        not_consuming = [n for n in names if n not in consuming]
        if not_consuming:
            raise BadRequest(f"cannot commit segment(s) that are not consuming: {_shown(not_consuming)} (consuming "
                             f"now: {_shown(sorted(consuming)) or 'none'})")
        return sorted(set(names))
    assert by_partition is not None
    wanted: set[int] = set()
    for text in _listed(by_partition, "partitions"):
        if not (text.isascii() and text.isdigit()) or len(text) > 9:  # str.isdigit alone takes '²' or '٣'
            raise BadRequest(f"partition {text[:32]!r} is not a partition number")
        wanted.add(int(text))
    known = set(partitions)
    unknown = sorted(wanted - known)
    if unknown:
        raise BadRequest(f"the table has no partition(s) {_shown([str(p) for p in unknown])} (its partitions: "
                         f"{_shown([str(p) for p in sorted(known)]) or 'none'})")
    by_number = {_partition(name): name for name in consuming}
    idle = sorted(p for p in wanted if p not in by_number)
    if idle:
        raise BadRequest(f"partition(s) {_shown([str(p) for p in idle])} have no consuming segment to commit "
                         "(committed while paused, or being committed now)")
    return sorted(by_number[p] for p in wanted)


def _listed(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise BadRequest(f"{what} lists nothing: give comma-separated {what}, or leave it out to commit all")
    if len(items) > MAX_LISTED:
        raise BadRequest(f"at most {MAX_LISTED} {what} a call")
    return items


def _partition(segment: str) -> int | None:
    try:
        return LLCSegmentName.parse(segment).partition
    except InvalidSegmentNameError:
        return None


def _shown(names: list[str]) -> str:
    return ", ".join(n[:128] for n in names[:10]) + (f" ... ({len(names) - 10} more)" if len(names) > 10 else "")
