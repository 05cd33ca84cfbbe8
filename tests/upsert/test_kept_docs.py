"""What an upsert compaction may keep of a committed segment (``TableUpsert.kept_docs``), and that serving the
compacted copy under the same name (or dropping a segment with nothing kept) leaves every key's valid version as
it was, also when a consuming copy is released afterwards and its keys fall back to committed versions."""

from __future__ import annotations

import pyarrow as pa

from cuvee.upsert.table import TableUpsert
from tests.upsert.test_table import SCHEMA, SEGMENTS, Committed, Consuming, config, name, serve_all, visible


class Reloaded:
    """A compacted copy as a server serves it: an ImmutableSegment counts ``total_docs`` (no ``num_docs``)."""

    def __init__(self, segment: Committed | Reloaded, kept: list[int]) -> None:
        self.name, self.crc = segment.name, segment.crc + 500
        self.table = segment.table.take(pa.array(kept, pa.int64()))
        self.total_docs = self.table.num_rows

    def to_arrow(self, columns: list[str] | None = None) -> pa.Table:
        return self.table.select(columns) if columns else self.table


def compacted(segment: Committed, kept: list[int]) -> Reloaded:
    return Reloaded(segment, kept)


def kept(state: TableUpsert, segment: Committed | Reloaded) -> list[int]:
    found = state.kept_docs(segment.name)
    assert found is not None and found[0] == segment.crc and found[1] == segment.table.num_rows
    return [int(d) for d in found[2]]


def test_kept_docs_are_valid_docs_and_tombstones() -> None:
    state = TableUpsert(config(), SCHEMA)
    segments = [Committed(i, rows) for i, rows in enumerate(SEGMENTS)]
    serve_all(state, segments)
    assert kept(state, segments[0]) == []  # 1, 2 and 3 all have newer versions
    assert kept(state, segments[1]) == [0, 1]  # 1@2 valid (1@0 later is late), 2's delete row hides it
    assert kept(state, segments[2]) == [0, 1]  # the late row of 1 goes
    counts = state.kept_docs(segments[1].name)[3]  # type: ignore[index]
    assert (counts["validDocs"], counts["tombstones"], counts["fallbackDocs"]) == (1, 1, 0)
    assert state.kept_docs("t__0__9__20260101T0000Z") is None


def test_docs_superseded_only_by_consuming_rows_are_kept() -> None:
    state = TableUpsert(config(), SCHEMA)
    segments = [Committed(i, rows) for i, rows in enumerate(SEGMENTS)]
    serve_all(state, segments)
    consuming = Consuming(3)
    state.start(consuming.name, consuming)
    consuming.take(state, [(4, 5, False), (3, 6, False)])
    assert kept(state, segments[2]) == [0, 1]  # 3@4 and 4@4: their newer rows are not committed yet
    assert state.kept_docs(segments[2].name)[3]["fallbackDocs"] == 2  # type: ignore[index]
    assert kept(state, segments[0]) == []  # 3@1 is not 3's committed version: 3@4 is


def test_serving_compacted_copies_and_dropping_changes_no_answer() -> None:
    state = TableUpsert(config(), SCHEMA)
    segments = [Committed(i, rows) for i, rows in enumerate(SEGMENTS)]
    serve_all(state, segments)
    consuming = Consuming(3)
    state.start(consuming.name, consuming)
    consuming.take(state, [(4, 5, False)])
    before = visible(state)
    for segment in segments[1:]:
        copy = compacted(segment, kept(state, segment))
        state.serve(copy.name, copy, copy.to_arrow(state.columns), lambda: None)
        assert visible(state) == before
        assert kept(state, copy) == list(range(copy.total_docs))  # nothing more to compact
        again = Reloaded(copy, kept(state, copy))  # a copy reloaded over a served copy (an ImmutableSegment)
        state.serve(again.name, again, again.to_arrow(state.columns), lambda: None)
        assert visible(state) == before
    assert kept(state, segments[0]) == []
    state.remove(segments[0].name)
    assert visible(state) == before == {1: 2, 3: 4, 4: 5}
    state.remove(consuming.name, redecide=True)  # the consuming copy goes: 4 falls back to its committed version
    assert visible(state) == {1: 2, 3: 4, 4: 4}
    assert name(0) == segments[0].name


class Counted(Committed):
    """A committed copy that counts the reads of its rows."""

    def __init__(self, sequence: int, rows: list[tuple[int, int, bool]]) -> None:
        super().__init__(sequence, rows)
        self.reads = 0

    def to_arrow(self, columns: list[str] | None = None) -> pa.Table:
        self.reads += 1
        return super().to_arrow(columns)


def test_answers_for_one_partition_read_its_committed_rows_once_while_keys_are_consuming() -> None:
    state = TableUpsert(config(), SCHEMA)
    segments = [Counted(i, rows) for i, rows in enumerate(SEGMENTS)]
    serve_all(state, segments)
    consuming = Consuming(3)
    state.start(consuming.name, consuming)
    consuming.take(state, [(4, 5, False), (3, 6, False)])
    for segment in segments:
        segment.reads = 0
    answers = [kept(state, segment) for segment in segments]
    assert answers == [[], [0, 1], [0, 1]]
    # each answer reads its own segment once; the committed winners are decided once for the three answers
    assert [s.reads for s in segments] == [2, 2, 2]
    consuming.take(state, [(1, 7, False)])  # more keys consuming: the committed copies did not change
    assert kept(state, segments[1]) == [0, 1] and kept(state, segments[2]) == [0, 1]
    assert [s.reads for s in segments] == [2, 3, 3]
    assert state.kept_docs(segments[1].name)[3]["fallbackDocs"] == 1  # type: ignore[index]  (1@2 now)
    copy = compacted(segments[2], kept(state, segments[2]))  # another committed copy: decided anew
    state.serve(copy.name, copy, copy.to_arrow(state.columns), lambda: None)
    assert segments[0].reads == 2
    assert kept(state, copy) == [0, 1] and kept(state, segments[1]) == [0, 1]
    assert segments[0].reads == 3  # read again once, for the new set of committed copies
