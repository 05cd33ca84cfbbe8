"""A table's upsert state on one server, with stand-in segments: snapshot rounds only at clean moments, a restart
that preloads them ends exactly where deciding from the rows ends, and a restart that cannot use them all decides
the partition from its rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cuvee.config import Schema, TableConfig
from cuvee.upsert.snapshot import SnapshotStore
from cuvee.upsert.table import TableUpsert

SCHEMA = Schema.from_json({
    "schemaName": "t", "primaryKeyColumns": ["id"],
    "dimensionFieldSpecs": [{"name": "id", "dataType": "LONG"}, {"name": "gone", "dataType": "BOOLEAN"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})


def config(**upsert: Any) -> TableConfig:
    return TableConfig.from_json({
        "tableName": "t", "tableType": "REALTIME", "segmentsConfig": {"timeColumnName": "ts"},
        "tableIndexConfig": {"streamConfigs": {"streamType": "log", "stream.log.topic.name": "t",
                                               "stream.log.dir": "/nonexistent"}},
        "upsertConfig": {"mode": "FULL", "deleteRecordColumn": "gone", **upsert}})


def name(sequence: int) -> str:
    return f"t__0__{sequence}__20260101T0000Z"


class Committed:
    def __init__(self, sequence: int, rows: list[tuple[int, int, bool]]) -> None:
        self.name, self.crc = name(sequence), 1000 + sequence
        self.table = pa.table({"id": [r[0] for r in rows], "ts": [r[1] for r in rows], "gone": [r[2] for r in rows]})
        self.num_docs = self.table.num_rows

    def to_arrow(self, columns: list[str] | None = None) -> pa.Table:
        return self.table.select(columns) if columns else self.table


class Consuming:
    def __init__(self, sequence: int) -> None:
        self.name = name(sequence)
        self.table = pa.table({"id": pa.array([], pa.int64()), "ts": pa.array([], pa.int64()),
                               "gone": pa.array([], pa.bool_())})

    @property
    def published_docs(self) -> int:
        return self.table.num_rows

    def snapshot(self, *, past_cap: bool = False) -> pa.Table:
        return self.table

    def take(self, state: TableUpsert, rows: list[tuple[int, int, bool]]) -> None:
        batch = pa.table({"id": [r[0] for r in rows], "ts": [r[1] for r in rows], "gone": [r[2] for r in rows]})
        first = self.table.num_rows

        def publish() -> None:
            self.table = pa.concat_tables([self.table, batch])

        state.ingest(self.name, self, batch, first, publish)


def visible(state: TableUpsert) -> dict[int, int]:
    """key -> ts of every valid doc; a key valid twice fails."""
    out: dict[int, int] = {}
    for token, bits in state.views([name(0)]).values():
        table = token.to_arrow() if hasattr(token, "to_arrow") else token.snapshot()
        for doc in bits:
            key = table.column("id")[doc].as_py()
            assert key not in out, f"key {key} valid twice"
            out[key] = table.column("ts")[doc].as_py()
    return out


SEGMENTS = [[(1, 1, False), (2, 1, False), (3, 1, False)],
            [(1, 2, False), (2, 2, True)],  # 2 deleted
            [(3, 4, False), (4, 4, False), (1, 0, False)]]  # a late row for 1


def serve_all(state: TableUpsert, segments: list[Committed]) -> None:
    for segment in segments:
        state.serve(segment.name, segment, segment.to_arrow(state.columns), lambda: None)


def test_a_round_waits_for_a_clean_moment_and_a_preloaded_restart_ends_where_the_rows_do(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(), SCHEMA, store)
    committed = [Committed(i, rows) for i, rows in enumerate(SEGMENTS[:2])]
    serve_all(live, committed)
    previous = Consuming(2)
    live.start(previous.name, previous)
    live.ready(previous.name)
    previous.take(live, SEGMENTS[2])  # rows past the round: 1's late row, 3 newer
    nxt = Consuming(3)
    live.start(nxt.name, nxt)
    live.ready(nxt.name)  # skipped: segment 2 is still consuming here with rows
    assert set(store.load(0)) == {name(0), name(1)}
    assert store.load(0)[name(0)].valid.tolist() == [2]  # only key 3's doc: segment 2's rows are not in it

    restarted = TableUpsert(config(), SCHEMA, store)
    serve_all(restarted, [*committed, Committed(2, SEGMENTS[2])])
    assert restarted.preloaded == 2
    assert visible(restarted) == visible(live) == {1: 2, 3: 4, 4: 4}


@pytest.mark.parametrize("order", [(2, 1, 0), (0, 1, 2), (1, 0, 2)])
def test_an_older_segment_decided_from_rows_with_later_ones_preloaded_rebuilds_the_partition(
        tmp_path: Path, order: tuple[int, ...]) -> None:
    """Segment 0 was re-pushed (another CRC) while 1 still matches its snapshot, whose tombstone for key 2 had
    expired (deletedKeysTTL): deciding 0 from its rows against that snapshot would bring key 2 back, whichever
    order the segments load in."""
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(deletedKeysTTL=1), SCHEMA, store)
    committed = [Committed(i, rows) for i, rows in enumerate(SEGMENTS)]
    serve_all(live, committed)
    consuming = Consuming(3)
    live.start(consuming.name, consuming)
    live.ready(consuming.name)  # expires the tombstone of 2 (ts 2 < 4 - 1), then the round
    assert visible(live) == {1: 2, 3: 4, 4: 4}

    restarted = TableUpsert(config(deletedKeysTTL=1), SCHEMA, store)
    changed = Committed(0, SEGMENTS[0])
    changed.crc = 7  # not the snapshot's copy
    by_rank = [changed, committed[1], committed[2]]
    serve_all(restarted, [by_rank[i] for i in order])
    if order == (2, 1, 0):
        assert restarted.preloaded == 2  # (in ascending order, a preload after rows meets their keys: refused)
    assert visible(restarted) == {1: 2, 3: 4, 4: 4}


def test_rows_decided_without_snapshots_match(tmp_path: Path) -> None:
    plain = TableUpsert(config(snapshot="DISABLE"), SCHEMA, SnapshotStore(tmp_path))
    serve_all(plain, [Committed(i, rows) for i, rows in enumerate(SEGMENTS)])
    assert visible(plain) == {1: 2, 3: 4, 4: 4}
    assert not list(tmp_path.iterdir())
    assert np.isclose(plain.stats()["partitions"]["0"]["bytesPerKey"], 24.0)


def test_a_later_segment_without_a_snapshot_decided_first_keeps_an_older_snapshot_from_doubling_a_key(
        tmp_path: Path) -> None:
    """Segment 1 committed after the last round (no snapshot) and updated key 1; on restart it loads before
    segment 0, whose snapshot still holds key 1 valid. Preloading 0 would show key 1 twice: it is decided from its
    rows instead."""
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(), SCHEMA, store)
    first = Committed(0, [(1, 1, False), (2, 1, False)])
    serve_all(live, [first])
    consuming = Consuming(1)
    live.start(consuming.name, consuming)
    live.ready(consuming.name)  # the round: segment 0 with keys 1 and 2 valid
    restarted = TableUpsert(config(), SCHEMA, store)
    serve_all(restarted, [Committed(1, [(1, 5, False)]), Committed(0, [(1, 1, False), (2, 1, False)])])
    assert visible(restarted) == {1: 5, 2: 1}


@pytest.mark.parametrize("order", [(2, 1, 0), (2, 0, 1), (0, 1, 2)])
def test_newer_segments_without_snapshots_loading_first_still_let_older_snapshots_preload(
        tmp_path: Path, order: tuple[int, ...]) -> None:
    """Segments 1 and 2 committed after the last round (no snapshots) and moved keys of segment 0. Whatever the
    load order, segment 0 is preloaded (only its snapshot's rows read) and every key ends valid once, at its
    newest version."""
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(), SCHEMA, store)
    serve_all(live, [Committed(0, [(1, 1, False), (2, 1, False), (3, 1, False)])])
    consuming = Consuming(1)
    live.start(consuming.name, consuming)
    live.ready(consuming.name)  # the round: segment 0's keys 1, 2, 3 valid
    segments = [Committed(0, [(1, 1, False), (2, 1, False), (3, 1, False)]), Committed(1, [(1, 5, False)]),
                Committed(2, [(2, 6, False), (4, 6, False)])]
    restarted = TableUpsert(config(), SCHEMA, store)
    serve_all(restarted, [segments[i] for i in order])
    assert restarted.preloaded == 1
    assert visible(restarted) == {1: 5, 2: 6, 3: 1, 4: 6}
