"""The upsert key map against a plain Python model: random versions, deletes, out-of-order rows, segment copies
(commit and download), dropped segments and TTL, fed in random batches; with keys that are their own index, and
with keys whose index is a tiny hash (many different keys sharing one index, told apart by their exact values)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cuvee.upsert.keymap import KeyMap, SnapshotConflict, Versions
from cuvee.upsert.keys import Keys

# How a test's integer keys become the key map's: their own index, or an index of a bit or two (or one index for
# all) with the key told apart by its bytes, fixed-width bytes or a 64-bit word (a 128-bit hash's second word).
KINDS: dict[str, Callable[[list[int]], Keys]] = {
    "own index": lambda keys: Keys(np.array(keys, np.uint64)),
    "bytes, 2-bit index": lambda keys: Keys(np.array([k % 4 for k in keys], np.uint64),
                                            pa.array([f"key-{k}".encode() for k in keys], pa.large_binary())),
    "word, 1-bit index": lambda keys: Keys(np.array([k % 2 for k in keys], np.uint64),
                                           pa.array([k * 7919 + 3 for k in keys], pa.uint64())),
    "fixed bytes, one index": lambda keys: Keys(np.full(len(keys), 5, np.uint64),
                                                pa.array([k.to_bytes(8, "big") for k in keys], pa.binary(8))),
}


@dataclass
class Model:
    """Row by row, the rules as the issue states them."""

    keys: dict[int, tuple[int, int, float, bool]] = field(default_factory=dict)  # key -> (segment, doc, cmp, deleted)
    ranks: dict[int, int] = field(default_factory=dict)
    largest: float = -np.inf
    orphans: set[tuple[int, int]] = field(default_factory=set)  # valid docs of keys no longer tracked (TTL)

    def add(self, segment: int, rows: list[tuple[int, float, int, bool]], replacing: int | None = None,
            rank: int | None = None) -> list[bool]:
        """Returns each row's out-of-order flag."""
        self.ranks[segment] = segment if rank is None else rank
        owned = {k for k, v in self.keys.items() if v[0] == replacing}
        flags = []
        for key, cmp, doc, delete in rows:
            current = self.keys.get(key)
            if current is None or key in owned:
                loses = False
            else:
                tie_kept = self.ranks[current[0]] > self.ranks[segment]
                loses = cmp < current[2] or (cmp == current[2] and tie_kept)
            flags.append(loses)
            if loses:
                continue
            owned.discard(key)
            self.keys[key] = (segment, doc, cmp, delete)
            self.largest = max(self.largest, cmp)
        for key in [k for k, v in self.keys.items() if v[0] == replacing]:
            del self.keys[key]
        self.orphans = {o for o in self.orphans if o[0] != replacing}
        return flags

    def drop(self, segment: int) -> None:
        for key in [k for k, v in self.keys.items() if v[0] == segment]:
            del self.keys[key]
        self.orphans = {o for o in self.orphans if o[0] != segment}

    def expire(self, ttl: float) -> int:
        """Forget keys older than the newest tracked comparison value minus ``ttl``; their docs stay valid."""
        if not self.keys:
            return 0
        newest = max(v[2] for v in self.keys.values())
        old = [k for k, v in self.keys.items() if v[2] < newest - ttl]
        for key in old:
            segment, doc, _, deleted = self.keys.pop(key)
            if not deleted:
                self.orphans.add((segment, doc))
        return len(old)

    def tracked(self) -> set[tuple[int, int]]:
        return {(s, d) for s, d, _, deleted in self.keys.values() if not deleted}

    def valid(self) -> set[tuple[int, int]]:
        return self.tracked() | self.orphans


def versions(rows: list[tuple[int, float, int, bool]], kind: Callable[[list[int]], Keys] = KINDS["own index"]
             ) -> Versions:
    return Versions(kind([r[0] for r in rows]), np.array([r[1] for r in rows], np.float64),
                    np.array([r[2] for r in rows], np.int32), np.array([r[3] for r in rows], bool))


def bitmap_state(valid: set[tuple[int, int]], segment: int, changes) -> None:  # type: ignore[no-untyped-def]
    """What a server does with a batch's changes."""
    for seg, docs in changes.invalid.items():
        for doc in docs:
            valid.discard((seg, int(doc)))
    valid.update((segment, int(doc)) for doc in changes.valid)


ROW = st.tuples(st.integers(0, 12), st.integers(0, 6).map(float), st.booleans())
STEP = st.one_of(
    st.tuples(st.just("rows"), st.lists(ROW, min_size=1, max_size=25)),
    st.tuples(st.just("late"), st.lists(ROW, min_size=1, max_size=10)),  # an old segment loaded late (a download)
    st.tuples(st.just("commit"), st.just(None)),  # the consuming segment's committed copy replaces it
    st.tuples(st.just("drop"), st.integers(0, 3)),
    st.tuples(st.just("expire"), st.integers(1, 4).map(float)),
)
PROBE = list(range(13))  # every key the steps use


@pytest.mark.parametrize("kind_name", list(KINDS))
@settings(max_examples=150, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_key_map_matches_the_model(kind_name: str, steps: list) -> None:  # type: ignore[type-arg]
    kind = KINDS[kind_name]
    km, model = KeyMap(), Model()
    valid: set[tuple[int, int]] = set()
    segment, segment_rows = 0, []  # the consuming segment and its rows so far
    for step, arg in steps:
        if step == "rows":
            rows = [(k, c, len(segment_rows) + i, d) for i, (k, c, d) in enumerate(arg)]
            segment_rows += rows
            before = len(km)
            predicted = km.out_of_order(versions(rows, kind), rank=segment)  # what is dropped or marked first
            assert len(km) == before
            changes = km.apply(segment, versions(rows, kind))
            assert predicted.tolist() == changes.out_of_order.tolist()
            assert changes.out_of_order.tolist() == model.add(segment, rows)
            bitmap_state(valid, segment, changes)
        elif step == "late":
            late_id = 1000 + len(model.ranks)
            rows = [(k, c, i, d) for i, (k, c, d) in enumerate(arg)]
            changes = km.apply(late_id, versions(rows, kind), rank=-late_id)  # earlier in the stream than anything
            assert changes.out_of_order.tolist() == model.add(late_id, rows, rank=-late_id)
            bitmap_state(valid, late_id, changes)
        elif step == "commit" and segment_rows:
            committed = segment + 100
            order = sorted(range(len(segment_rows)), key=lambda i: segment_rows[i][0])  # a sorted column: docs move
            rows = [(segment_rows[i][0], segment_rows[i][1], new_doc, segment_rows[i][3])
                    for new_doc, i in enumerate(order)]
            rows_in_stream_order = sorted(rows, key=lambda r: order[r[2]])
            changes = km.apply(committed, versions(rows_in_stream_order, kind), replacing=segment, rank=segment)
            assert changes.out_of_order.tolist() == model.add(committed, rows_in_stream_order, replacing=segment,
                                                              rank=segment)
            valid = {v for v in valid if v[0] != segment}  # the consuming copy is dropped whole
            bitmap_state(valid, committed, changes)
            segment, segment_rows = segment + 1, []
        elif step == "drop":
            km.remove_segment(arg)
            model.drop(arg)
            valid = {v for v in valid if v[0] != arg}
        elif step == "expire":
            assert km.expire(metadata_ttl=arg) == model.expire(arg)
        assert valid == model.valid()
        assert len(km) == len(model.keys)
        for seg in {s for s, _ in model.tracked()}:
            assert km.valid_docs(seg).tolist() == sorted(d for s, d in model.tracked() if s == seg)
        assert_lookups(km, model, kind)
    restarted = KeyMap()  # a restart preloading what the map tracks: the same answers
    for seg in {v[0] for v in model.keys.values()}:
        mine = sorted((k, v) for k, v in model.keys.items() if v[0] == seg)
        restarted.preload(seg, kind([k for k, _ in mine]), np.array([v[2] for _, v in mine]),
                          np.array([-1 - v[1] if v[3] else v[1] for _, v in mine], np.int32), rank=model.ranks[seg])
    assert_lookups(restarted, model, kind)


def assert_lookups(km: KeyMap, model: Model, kind: Callable[[list[int]], Keys]) -> None:
    """Every key the steps use found where the model has it (a tombstone as a negative doc), the others absent."""
    found, segs, docs, cmps = km.lookup(kind(PROBE))
    for key in PROBE:
        held = model.keys.get(key)
        assert bool(found[key]) == (held is not None), key
        if held is not None:
            assert (segs[key], docs[key], cmps[key]) == (held[0], -1 - held[1] if held[3] else held[1], held[2])


def test_ties_go_to_the_later_row_and_out_of_order_rows_stay_invalid() -> None:
    km = KeyMap()
    first = km.apply(0, versions([(1, 5.0, 0, False), (1, 5.0, 1, False), (2, 3.0, 2, False)]))
    assert first.valid.tolist() == [1, 2] and first.out_of_order.tolist() == [False, False, False]
    late = km.apply(0, versions([(1, 4.0, 3, False)]))
    assert late.valid.tolist() == [] and late.out_of_order.tolist() == [True] and late.invalid == {}
    newer = km.apply(1, versions([(1, 9.0, 0, False)]))
    assert newer.valid.tolist() == [0] and newer.invalid[0].tolist() == [1]


def test_ties_with_a_later_segment_are_kept_by_it() -> None:
    km = KeyMap()
    km.apply(5, versions([(1, 7.0, 0, False)]))
    old = km.apply(2, versions([(1, 7.0, 0, False), (2, 1.0, 1, False)]))  # segment 2 came before 5 in the stream
    assert old.valid.tolist() == [1] and old.out_of_order.tolist() == [True, False]
    newer = km.apply(6, versions([(1, 7.0, 0, False)]))
    assert newer.valid.tolist() == [0] and newer.invalid == {5: np.array([0])}


def test_integer_comparisons_are_exact_and_misuse_is_refused() -> None:
    km = KeyMap(np.int64)
    rows = Versions(np.array([1], np.uint64), np.array([2**53 + 1], np.int64), np.array([0], np.int32))
    km.apply(5, rows)
    older = km.apply(2, Versions(np.array([1], np.uint64), np.array([2**53], np.int64), np.array([0], np.int32)))
    assert older.out_of_order.tolist() == [True]  # 2**53 < 2**53 + 1: not a tie, as float64 would make it
    with pytest.raises(ValueError, match="id of its own"):
        km.apply(5, rows, replacing=5)
    with pytest.raises(ValueError, match="int64"):
        km.apply(6, versions([(1, 1.0, 0, False)]))
    km.apply(9, Versions(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int32)), replacing=5)
    assert len(km) == 0  # an empty copy takes the replaced segment's keys with it


def test_tombstones_are_reported_for_snapshots_and_infinity_does_not_drive_ttl() -> None:
    km = KeyMap()
    km.apply(0, versions([(1, 1.0, 0, False), (1, 2.0, 1, True), (2, np.inf, 2, False), (3, 1.5, 3, False)]))
    assert km.tombstones(0).tolist() == [1] and km.valid_docs(0).tolist() == [2, 3]
    assert km.largest_comparison == 2.0 and km.expire(metadata_ttl=10) == 0


def test_delete_hides_the_key_until_a_newer_row() -> None:
    km = KeyMap()
    km.apply(0, versions([(7, 1.0, 0, False)]))
    gone = km.apply(0, versions([(7, 2.0, 1, True)]))
    assert gone.valid.tolist() == [] and gone.invalid[0].tolist() == [0]
    older = km.apply(0, versions([(7, 1.5, 2, False)]))
    assert older.valid.tolist() == [] and older.out_of_order.tolist() == [True]  # the tombstone keeps it hidden
    back = km.apply(0, versions([(7, 3.0, 3, False)]))
    assert back.valid.tolist() == [3] and back.invalid == {}


def test_ttl_forgets_old_keys_and_tombstones() -> None:
    km = KeyMap()
    km.apply(0, versions([(1, 10.0, 0, False), (2, 50.0, 1, True), (3, 100.0, 2, False)]))
    assert km.expire(deleted_keys_ttl=40) == 1  # the tombstone of key 2 (50 < 100 - 40)
    assert km.expire(metadata_ttl=80) == 1  # key 1 (10 < 100 - 80)
    found, _, docs, _ = km.lookup(np.array([1, 2, 3], np.uint64))
    assert found.tolist() == [False, False, True] and docs[2] == 2


def test_preload_trusts_snapshots_and_refuses_duplicates() -> None:
    km = KeyMap()
    km.preload(3, np.array([1, 2], np.uint64), np.array([5.0, 6.0]), np.array([0, 4], np.int32))
    assert km.valid_docs(3).tolist() == [0, 4]
    km.preload(4, np.array([9, 7], np.uint64), np.array([7.0, 8.0]), np.array([0, 1], np.int32))
    assert len(km) == 4 and km.valid_docs(4).tolist() == [0, 1]  # merged on first use
    found, segs, docs, cmps = km.lookup(np.array([7, 2, 9, 5], np.uint64))
    assert found.tolist() == [True, True, True, False] and segs[:3].tolist() == [4, 3, 4]
    assert docs[:3].tolist() == [1, 4, 0] and cmps[:3].tolist() == [8.0, 6.0, 7.0]
    with pytest.raises(ValueError, match="valid twice"):  # 2 is segment 3's, merged: refused at once
        km.preload(5, np.array([2], np.uint64), np.array([7.0]), np.array([0], np.int32))
    km.preload(5, np.array([20], np.uint64), np.array([7.0]), np.array([0], np.int32))
    km.preload(6, np.array([20], np.uint64), np.array([8.0]), np.array([0], np.int32))  # both set aside ...
    with pytest.raises(SnapshotConflict):  # ... and refused together when merged
        km.lookup(np.array([2], np.uint64))
    twice = KeyMap()
    twice.preload(4, np.array([2, 2], np.uint64), np.array([7.0, 8.0]), np.array([0, 1], np.int32))
    with pytest.raises(SnapshotConflict):  # twice in one snapshot: found by the same merge
        len(twice.valid_docs(4))


def test_many_keys_stay_compact() -> None:
    km = KeyMap()
    rng = np.random.default_rng(1)
    n = 200_000
    for start in range(0, n, 20_000):
        keys = rng.integers(0, 2**63, 20_000, dtype=np.uint64)
        km.apply(start // 20_000, Versions(keys, np.full(20_000, float(start)), np.arange(20_000, dtype=np.int32)))
    assert len(km) == n
    assert km.bytes_per_key == 24  # key, segment, doc, comparison; no index, no slack


def test_keys_sharing_an_index_are_two_keys_in_preloads_forget_and_keys_of() -> None:
    """Two keys with one index (a 64-bit collision): preloaded side by side without a conflict, one forgotten
    without the other; the same key twice is still a conflict."""
    def keys(*names: str) -> Keys:
        return Keys(np.full(len(names), 9, np.uint64), pa.array([n.encode() for n in names], pa.large_binary()))

    km = KeyMap()
    km.preload(3, keys("a", "b"), np.array([5.0, 6.0]), np.array([0, 4], np.int32))
    km.preload(4, keys("c"), np.array([7.0]), np.array([2], np.int32))
    found, segs, docs, _ = km.lookup(keys("b", "c", "a", "d"))
    assert found.tolist() == [True, True, True, False] and segs[:3].tolist() == [3, 4, 3]
    assert docs[:3].tolist() == [4, 2, 0]
    assert sorted(km.keys_of(3).exact.to_pylist()) == [b"a", b"b"]  # type: ignore[union-attr]
    km.forget(keys("a"))
    assert km.lookup(keys("a", "b"))[0].tolist() == [False, True] and len(km) == 2
    changes = km.apply(5, Versions(keys("b", "e"), np.array([8.0, 1.0]), np.array([0, 1], np.int32)))
    assert changes.valid.tolist() == [0, 1] and changes.invalid == {3: np.array([4])}
    with pytest.raises(ValueError, match="valid twice"):
        km.preload(6, keys("e"), np.array([1.0]), np.array([0], np.int32))
    twice = KeyMap()
    twice.preload(1, keys("x", "y", "x"), np.array([1.0, 1.0, 1.0]), np.array([0, 1, 2], np.int32))
    with pytest.raises(SnapshotConflict):
        len(twice.valid_docs(1))
    with pytest.raises(ValueError, match="mixed"):  # one table, one kind of key
        km.apply(7, versions([(1, 1.0, 0, False)]))
