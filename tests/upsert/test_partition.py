"""A partition's upsert view under a concurrent writer: every view a reader takes holds each existing key valid
exactly once, also across commits that swap a consuming segment for its reordered committed copy."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from cuvee.upsert.keymap import Versions
from cuvee.upsert.keys import Keys
from cuvee.upsert.partition import PartitionUpsert


class Segment:
    """A reader handle: rows (key per doc) readable up to ``num_docs``."""

    def __init__(self, keys: list[int], cmps: list[float]) -> None:
        self.keys, self.cmps = keys, cmps
        self.num_docs = len(keys)


def test_views_never_show_two_versions_or_none() -> None:
    state = PartitionUpsert()
    rng = np.random.default_rng(3)
    expected: dict[int, int] = {0: 0}  # view version -> distinct keys existing then
    failures: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            view = state.view
            seen: list[int] = []
            for handle, bits in view.segments.values():
                docs = np.fromiter(bits, np.int64, len(bits))
                if len(docs) and docs.max() >= handle.num_docs:
                    failures.append(f"view {view.version}: a valid doc is not readable yet")
                seen += [handle.keys[d] for d in docs]
            if len(seen) != len(set(seen)):
                failures.append(f"view {view.version}: a key is valid twice")
            if view.version in expected and len(seen) != expected[view.version]:
                failures.append(f"view {view.version}: {len(seen)} keys valid, {expected[view.version]} exist")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    existing: set[int] = set()
    consuming_id, consuming = 0, Segment([], [])
    try:
        for batch in range(200):
            keys = rng.integers(0, 50, 20).tolist()
            start = len(consuming.keys)
            consuming.keys.extend(keys)  # appended, not yet readable
            consuming.cmps.extend([float(batch)] * len(keys))
            rows = Versions(np.array(keys, np.uint64), np.full(len(keys), float(batch)),
                            np.arange(start, start + len(keys), dtype=np.int32))
            existing.update(keys)
            expected[state.view.version + 1] = len(existing)

            def publish(segment: Segment = consuming, before: int = state.view.version) -> None:
                if state.view.version != before:  # deterministic: the rows are readable before any view uses them
                    failures.append("a view naming the new rows was installed before they were readable")
                segment.num_docs = len(segment.keys)

            state.add(consuming_id, rows, consuming, rank=consuming_id // 2, publish=publish)
            if batch % 25 == 24:  # commit: the committed copy is sorted by key, so its docs move
                order = sorted(range(len(consuming.keys)), key=lambda i: consuming.keys[i])
                committed = Segment([consuming.keys[i] for i in order], [consuming.cmps[i] for i in order])
                new_doc = {old: new for new, old in enumerate(order)}
                copy = Versions(np.array(consuming.keys, np.uint64), np.array(consuming.cmps),
                                np.array([new_doc[i] for i in range(len(consuming.keys))], np.int32))
                expected[state.view.version + 1] = len(existing)
                state.add(consuming_id + 1, copy, committed, rank=consuming_id // 2, replacing=consuming_id)
                consuming_id += 2
                consuming = Segment([], [])
    finally:
        done.set()
        for thread in readers:
            thread.join(10)
    assert not failures, failures[:5]
    assert state.view.valid_count() == len(existing)



def test_snapshot_and_preload_keep_deleted_keys_hidden() -> None:
    before = PartitionUpsert()
    rows = Versions(np.array([1, 2, 1], np.uint64), np.array([1.0, 1.0, 2.0]), np.arange(3, dtype=np.int32),
                    np.array([False, False, True]))
    before.add(0, rows, Segment([1, 2, 1], [1.0, 1.0, 2.0]))
    valid, tombstones = before.snapshot(0)
    assert valid.tolist() == [1] and tombstones.tolist() == [2]  # key 1 deleted by doc 2

    after = PartitionUpsert()  # a restart: preload the snapshot
    docs = np.concatenate([valid, tombstones])
    after.preload(0, np.array([2, 1], np.uint64), np.array([1.0, 2.0]), docs, Segment([1, 2, 1], [1.0, 1.0, 2.0]),
                  deleted=np.array([False, True]))
    assert sorted(after.view.segments[0][1]) == [1]  # the tombstone is tracked, never valid
    late = after.add(1, Versions(np.array([1], np.uint64), np.array([1.5]), np.array([0], np.int32)),
                     Segment([1], [1.5]))
    assert late.out_of_order.tolist() == [True] and after.view.valid_count() == 1  # the deleted key stays hidden
    assert after.stats()[0] == 2


# ---- keys re-decided when a copy holding their newest version leaves ----------------------------------------


class Rows:
    """A handle whose rows the state can read again (``versions``): key, comparison value and delete flag per doc."""

    def __init__(self, rows: list[tuple[int, float, bool]]) -> None:
        self.rows = rows
        self.num_docs = len(rows)

    def versions(self) -> Versions:
        keys = np.array([k for k, _, _ in self.rows], np.uint64)
        cmps = np.array([c for _, c, _ in self.rows], np.float64)
        return Versions(keys, cmps, np.arange(len(self.rows), dtype=np.int32),
                        np.array([d for _, _, d in self.rows], bool))


def add(state: PartitionUpsert, sid: int, handle: Rows, rank: int, replacing: int | None = None) -> None:
    state.add(sid, handle.versions(), handle, rank=rank, replacing=replacing)


def valid_rows(state: PartitionUpsert) -> dict[int, tuple[float, int]]:
    """key -> (comparison value, rank of the handle holding it) of every valid doc; a key valid twice fails."""
    out: dict[int, tuple[float, int]] = {}
    for handle, bits in state.view.segments.values():
        for doc in bits:
            key, cmp, _ = handle.rows[doc]
            assert key not in out, f"key {key} valid twice"
            out[key] = (cmp, handle.rank)
    return out


def ranked(rows: list[tuple[int, float, bool]], rank: int) -> Rows:
    handle = Rows(rows)
    handle.rank = rank  # type: ignore[attr-defined]
    return handle


def test_a_shorter_committed_copy_gives_the_tail_keys_their_previous_version_back() -> None:
    """A replica read past the committed end (DISCARD): its copy's tail leaves with it, and the keys whose newest
    version was there get their previous version back instead of vanishing until the stream brings them again."""
    state = PartitionUpsert(versions=Rows.versions)
    old = ranked([(1, 10, False), (2, 10, False), (3, 10, False)], 0)
    add(state, 0, old, 0)
    consuming = ranked([(1, 20, False), (2, 20, False), (4, 20, False)], 1)  # 2 and 4 are past the end
    add(state, 1, consuming, 1)
    committed = ranked([(1, 20, False)], 1)
    add(state, 2, committed, 1, replacing=1)
    assert valid_rows(state) == {1: (20, 1), 2: (10, 0), 3: (10, 0)}  # 4 exists only past the end: gone


def test_a_released_consuming_copy_hands_its_keys_back_to_the_other_segments() -> None:
    """Out-of-order rows stay invalid and a delete in another segment stays applied when keys are re-decided."""
    state = PartitionUpsert(versions=Rows.versions)
    first = ranked([(1, 10, False), (2, 10, False), (3, 10, False)], 0)
    second = ranked([(3, 30, True)], 1)  # deletes key 3
    consuming = ranked([(1, 20, False), (2, 20, False)], 2)
    later = ranked([(1, 5, False)], 3)  # out of order for key 1, whichever version it meets
    for sid, handle in enumerate([first, second, consuming, later]):
        add(state, sid, handle, handle.rank)
    assert valid_rows(state) == {1: (20, 2), 2: (20, 2)}
    state.remove(2, redecide=True)
    assert valid_rows(state) == {1: (10, 0), 2: (10, 0)}
    state.remove(0)  # a committed segment leaves without re-deciding: its keys leave with it
    assert valid_rows(state) == {}


def test_without_a_way_to_read_rows_again_keys_leave_with_their_segment() -> None:
    state = PartitionUpsert()
    first, consuming = ranked([(1, 10, False)], 0), ranked([(1, 20, False)], 1)
    add(state, 0, first, 0)
    add(state, 1, consuming, 1)
    state.remove(1, redecide=True)
    assert valid_rows(state) == {}


def test_a_shorter_copy_decides_its_keys_again_with_every_segment() -> None:
    """The consuming copy held an out-of-order row (3) and, past the committed end, the key's newest (10); the
    committed copy has only the 3. The key's version is the 8 of the segment before, not the copy's late row."""
    state = PartitionUpsert(versions=Rows.versions)
    before = ranked([(1, 8, False), (2, 8, True)], 0)  # key 2 deleted there
    add(state, 0, before, 0)
    consuming = ranked([(1, 3, False), (2, 4, False), (1, 10, False), (2, 10, False)], 1)
    add(state, 1, consuming, 1)
    assert valid_rows(state) == {1: (10, 1), 2: (10, 1)}
    committed = ranked([(1, 3, False), (2, 4, False)], 1)
    state.add(2, committed.versions(), committed, rank=1, replacing=1, shorter=True)
    assert valid_rows(state) == {1: (8, 0)}  # and key 2 stays deleted, not brought back by its late row


def test_snapshots_that_disagree_are_found_when_merged_and_the_partition_is_decided_from_rows() -> None:
    """Two snapshots each holding key 1 valid (a corrupt round): the merge that follows the preloads refuses them and
    the partition is rebuilt from its rows, so the key ends valid once, at its newer version."""
    older, newer = ranked([(1, 1.0, False), (2, 1.0, False)], 0), ranked([(1, 2.0, False)], 1)
    state = PartitionUpsert(versions=Rows.versions)
    state.preload(0, np.array([1, 2], np.uint64), np.array([1.0, 1.0]), np.array([0, 1]), older, rank=0)
    state.preload(1, np.array([1], np.uint64), np.array([2.0]), np.array([0]), newer, rank=1)
    add(state, 2, ranked([(3, 3.0, False)], 2), rank=2)  # the consumer's first batch merges the preloads
    assert valid_rows(state) == {1: (2.0, 1), 2: (1.0, 0), 3: (3.0, 2)}


def test_a_preload_whose_publish_fails_is_taken_back_and_leaves_the_others_whole() -> None:
    older = ranked([(1, 1.0, False), (2, 1.0, False)], 0)
    state = PartitionUpsert(versions=Rows.versions)
    state.preload(0, np.array([1, 2], np.uint64), np.array([1.0, 1.0]), np.array([0, 1]), older, rank=0)

    def failing() -> None:
        raise OSError("registry swap failed")

    newer = ranked([(1, 2.0, False)], 1)  # disagrees with segment 0's snapshot about key 1
    with pytest.raises(OSError):
        state.preload(1, np.array([1], np.uint64), np.array([2.0]), np.array([0]), newer, rank=1, publish=failing)
    assert state.stats()[0] == 2 and valid_rows(state) == {1: (1.0, 0), 2: (1.0, 0)}
    add(state, 1, newer, rank=1)  # the caller decides segment 1 from its rows
    assert valid_rows(state) == {1: (2.0, 1), 2: (1.0, 0)}


class Colliding(Rows):
    """Rows whose keys all share one 64-bit index: only their bytes tell them apart."""

    def versions(self) -> Versions:
        plain = super().versions()
        keys = Keys(np.zeros(len(self.rows), np.uint64),
                    pa.array([f"key-{k}".encode() for k, _, _ in self.rows], pa.large_binary()))
        return Versions(keys, plain.comparisons, plain.docs, plain.deletes)


def colliding(rows: list[tuple[int, float, bool]], rank: int) -> Colliding:
    handle = Colliding(rows)
    handle.rank = rank  # type: ignore[attr-defined]
    return handle


def test_keys_sharing_an_index_are_decided_again_each_on_its_own() -> None:
    """The shorter-copy and released-copy cases above, every key with one index."""
    state = PartitionUpsert(versions=Colliding.versions)
    before = colliding([(1, 8, False), (2, 8, True), (5, 8, False)], 0)
    add(state, 0, before, 0)
    consuming = colliding([(1, 3, False), (2, 4, False), (1, 10, False), (2, 10, False)], 1)
    add(state, 1, consuming, 1)
    assert valid_rows(state) == {1: (10, 1), 2: (10, 1), 5: (8, 0)}
    committed = colliding([(1, 3, False), (2, 4, False)], 1)
    state.add(2, committed.versions(), committed, rank=1, replacing=1, shorter=True)
    assert valid_rows(state) == {1: (8, 0), 5: (8, 0)}
    newer = colliding([(5, 20, False), (3, 20, False)], 2)
    add(state, 3, newer, 2)
    state.remove(3, redecide=True)
    assert valid_rows(state) == {1: (8, 0), 5: (8, 0)}  # 5 back at its version; 3 only ever lived there
