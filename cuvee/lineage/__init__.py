"""Segment lineage: atomic replacement of a set of segments by another (Pinot's startReplaceSegments /
endReplaceSegments / revertReplaceSegments). ``model`` holds the stored record, ``rules`` the pure transitions and
the one routing rule every reader applies (``hidden_segments``)."""

from cuvee.lineage.model import LineageEntry, LineageState, SegmentLineage
from cuvee.lineage.rules import LineageError, hidden_segments

__all__ = ["LineageEntry", "LineageError", "LineageState", "SegmentLineage", "hidden_segments"]
