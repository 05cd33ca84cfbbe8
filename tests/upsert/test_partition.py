"""A partition's upsert view under a concurrent writer: every view a reader takes holds each existing key valid
exactly once, also across commits that swap a consuming segment for its reordered committed copy."""

from __future__ import annotations

import threading

import numpy as np

from cuvee.upsert.keymap import Versions
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
