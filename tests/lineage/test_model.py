"""The stored lineage record round-trips in Pinot's JSON shape and refuses malformed nodes."""

from __future__ import annotations

import pytest

from cuvee.cluster.records import RecordFormatError
from cuvee.lineage import LineageEntry, LineageState, SegmentLineage


def test_round_trip() -> None:
    lineage = SegmentLineage("t_OFFLINE", {"e": LineageEntry(("a",), ("b", "c"), LineageState.IN_PROGRESS, 7,
                                                             {"inputKey": "k"})})
    assert SegmentLineage.decode(lineage.encode()) == lineage
    assert lineage.to_json()["lineageEntries"]["e"]["segmentsTo"] == ["b", "c"]


@pytest.mark.parametrize("doc", [
    b'{"tableName": "t", "lineageEntries": {"e": {"segmentsFrom": [], "segmentsTo": [], "state": "NOPE", "timestamp": 1}}}',
    b'{"tableName": "t", "lineageEntries": {"e": {"segmentsFrom": [1], "segmentsTo": [], "state": "COMPLETED", "timestamp": 1}}}',
    b'{"lineageEntries": {}}',
])
def test_malformed_nodes_are_refused(doc: bytes) -> None:
    with pytest.raises(RecordFormatError):
        SegmentLineage.decode(doc)
