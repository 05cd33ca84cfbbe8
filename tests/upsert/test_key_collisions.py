"""Two different primary keys with one 64-bit hash (a true collision of two (LONG, LONG) keys,
``tests/upsert/collisions.py``) on one server's upsert table: they stay two keys through batches, late rows,
deletes, a commit, partial merges, compaction answers, a released consuming copy and a restart that preloads
snapshots; and MD5 / MURMUR3 tables, whose keys are Pinot's 128-bit hashes, 32 bytes a key."""

from __future__ import annotations

from pathlib import Path
import numpy as np
import pyarrow as pa
import pytest

from cuvee.config import Schema
from cuvee.upsert.snapshot import SnapshotStore
from cuvee.upsert.table import TableUpsert
from tests.upsert.collisions import colliding_longs
from tests.upsert.test_table import config, name

SCHEMA = Schema.from_json({
    "schemaName": "t", "primaryKeyColumns": ["a", "b"],
    "dimensionFieldSpecs": [{"name": "a", "dataType": "LONG"}, {"name": "b", "dataType": "LONG"},
                            {"name": "gone", "dataType": "BOOLEAN"}],
    "metricFieldSpecs": [{"name": "n", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [{"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH",
                            "granularity": "1:MILLISECONDS"}]})
ARROW = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("gone", pa.bool_()), ("n", pa.int64()),
                   ("ts", pa.int64())])
P, Q = colliding_longs()  # one 64-bit hash, two keys
R = (5, 6)

Row = tuple[tuple[int, int], int, int, bool]  # (key, ts, n, deleted)


def table_of(rows: list[Row]) -> pa.Table:
    return pa.table({"a": [r[0][0] for r in rows], "b": [r[0][1] for r in rows], "gone": [r[3] for r in rows],
                     "n": [r[2] for r in rows], "ts": [r[1] for r in rows]}, schema=ARROW)


class Committed:
    def __init__(self, sequence: int, rows: list[Row]) -> None:
        self.name, self.crc = name(sequence), 1000 + sequence
        self.table = table_of(rows)
        self.num_docs = self.table.num_rows
        self.column_names = ARROW.names

    def to_arrow(self, columns: list[str] | None = None, decode: bool = True) -> pa.Table:
        return self.table.select(columns) if columns is not None else self.table


class Consuming:
    def __init__(self, sequence: int) -> None:
        self.name = name(sequence)
        self.table = table_of([])

    @property
    def published_docs(self) -> int:
        return self.table.num_rows

    def snapshot(self, *, past_cap: bool = False) -> pa.Table:
        return self.table

    def encoded_snapshot(self, *, past_cap: bool = False) -> pa.Table:
        return self.table

    def take(self, state: TableUpsert, rows: list[Row]) -> None:
        batch = table_of(rows)
        if state.prepares:  # partial upsert: merged with the keys' previous versions before it is stored
            merged, _, _ = state.prepare(self.name, batch.to_batches()[0], np.arange(len(rows)))
            batch = pa.Table.from_batches([merged])
        first = self.table.num_rows

        def publish() -> None:
            self.table = pa.concat_tables([self.table, batch])

        state.ingest(self.name, self, batch, first, publish)


def visible(state: TableUpsert) -> dict[tuple[int, int], tuple[int, int]]:
    """key -> (ts, n) of every valid doc; a key valid twice fails."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for token, bits in state.views([name(0)]).values():
        table = token.to_arrow() if hasattr(token, "to_arrow") else token.snapshot()
        for doc in bits:
            row = table.slice(doc, 1).to_pylist()[0]
            key = (row["a"], row["b"])
            assert key not in out, f"key {key} valid twice"
            out[key] = (row["ts"], row["n"])
    return out


def commit(state: TableUpsert, consuming: Consuming) -> Committed:
    copy = Committed(int(consuming.name.split("__")[2]), [])
    copy.table, copy.num_docs = consuming.table, consuming.table.num_rows
    state.serve(copy.name, copy, copy.to_arrow(state.columns), lambda: None)
    return copy


def test_two_keys_sharing_a_64_bit_hash_stay_two_keys_through_batches_a_commit_and_a_restart(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(), SCHEMA, store)
    first = Consuming(0)
    live.start(first.name, first)
    live.ready(first.name)
    first.take(live, [(P, 1, 1, False), (Q, 1, 2, False)])
    assert visible(live) == {P: (1, 1), Q: (1, 2)}
    first.take(live, [(P, 2, 3, False), (Q, 0, 9, False)])  # Q's row is late against Q's version, not P's
    assert visible(live) == {P: (2, 3), Q: (1, 2)}
    committed = commit(live, first)
    assert visible(live) == {P: (2, 3), Q: (1, 2)}
    assert live.stats()["partitions"]["0"]["bytesPerKey"] == 24 + 16  # and the key's 16 bytes

    second = Consuming(1)
    live.start(second.name, second)
    live.ready(second.name)  # a snapshot round of segment 0
    second.take(live, [(Q, 3, 0, True), (R, 3, 5, False)])  # Q deleted: P stays
    assert visible(live) == {P: (2, 3), R: (3, 5)}

    restarted = TableUpsert(config(), SCHEMA, store)
    restarted.serve(committed.name, committed, committed.to_arrow(restarted.columns), lambda: None)
    assert restarted.preloaded == 1 and visible(restarted) == {P: (2, 3), Q: (1, 2)}
    again = Consuming(1)
    restarted.start(again.name, again)
    restarted.ready(again.name)
    again.take(restarted, [(Q, 3, 0, True), (R, 3, 5, False)])
    assert visible(restarted) == visible(live)


def test_partial_upsert_merges_each_colliding_key_with_its_own_previous_version() -> None:
    state = TableUpsert(config(mode="PARTIAL", partialUpsertStrategies={"n": "INCREMENT"}), SCHEMA)
    consuming = Consuming(0)
    state.start(consuming.name, consuming)
    consuming.take(state, [(P, 1, 1, False), (Q, 1, 10, False)])
    consuming.take(state, [(P, 2, 1, False), (Q, 2, 10, False), (P, 3, 1, False)])
    assert visible(state) == {P: (3, 3), Q: (2, 20)}
    commit(state, consuming)
    later = Consuming(1)
    state.start(later.name, later)
    later.take(state, [(Q, 4, 5, False)])  # its previous version is in the committed copy
    assert visible(state) == {P: (3, 3), Q: (4, 25)}


def test_compaction_answers_and_a_released_copy_tell_colliding_keys_apart() -> None:
    state = TableUpsert(config(), SCHEMA)
    segments = [Committed(0, [(P, 1, 1, False), (Q, 1, 2, False)]), Committed(1, [(Q, 2, 3, False)])]
    for segment in segments:
        state.serve(segment.name, segment, segment.to_arrow(state.columns), lambda: None)
    consuming = Consuming(2)
    state.start(consuming.name, consuming)
    consuming.take(state, [(P, 5, 4, False)])
    assert visible(state) == {P: (5, 4), Q: (2, 3)}
    found = state.kept_docs(segments[0].name)
    assert found is not None and found[2].tolist() == [0]  # P's committed version (Q's has a newer committed one)
    assert found[3]["fallbackDocs"] == 1
    state.remove(consuming.name, redecide=True)  # released: P falls back to its committed version, Q is untouched
    assert visible(state) == {P: (1, 1), Q: (2, 3)}


@pytest.mark.parametrize("hash_function", ["MD5", "MURMUR3"])
def test_md5_and_murmur3_tables_keep_two_words_a_key_and_restart_from_snapshots(tmp_path: Path,
                                                                                hash_function: str) -> None:
    store = SnapshotStore(tmp_path)
    live = TableUpsert(config(hashFunction=hash_function), SCHEMA, store)
    first = Consuming(0)
    live.start(first.name, first)
    first.take(live, [(P, 1, 1, False), (Q, 1, 2, False), (R, 1, 3, False), (P, 2, 4, False)])
    committed = commit(live, first)
    assert visible(live) == {P: (2, 4), Q: (1, 2), R: (1, 3)}
    assert live.stats()["partitions"]["0"]["bytesPerKey"] == 32
    second = Consuming(1)
    live.start(second.name, second)
    live.ready(second.name)
    restarted = TableUpsert(config(hashFunction=hash_function), SCHEMA, store)
    restarted.serve(committed.name, committed, committed.to_arrow(restarted.columns), lambda: None)
    assert restarted.preloaded == 1 and visible(restarted) == visible(live)
