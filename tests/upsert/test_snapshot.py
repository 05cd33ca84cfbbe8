"""Valid-docs snapshot files: exact round trips, damage detected, and rounds that a crash can only leave whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvee.upsert.snapshot import Snapshot, SnapshotError, SnapshotStore, decode, encode


def snap(crc: int, valid: list[int], tombs: list[int] = []) -> Snapshot:  # noqa: B006 - read only
    return Snapshot(crc, np.array(valid, np.int64), np.array(tombs, np.int64))


def same(a: Snapshot, b: Snapshot) -> bool:
    return a.crc == b.crc and a.valid.tolist() == b.valid.tolist() and a.tombstones.tolist() == b.tombstones.tolist()


def test_round_trip_and_damage() -> None:
    original = snap(2**40 + 7, [0, 5, 70_000, 1_000_000], [3])
    data = encode(original)
    assert same(decode(data), original)
    assert same(decode(encode(snap(1, []))), snap(1, []))
    for broken in (data[:-1], data[:10], b"X" + data[1:], data[:20] + bytes([data[20] ^ 1]) + data[21:]):
        with pytest.raises(SnapshotError):
            decode(broken)


def test_rounds_keep_only_what_the_manifest_names(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path / ".upsert")
    assert store.load(0) == {}
    store.write_round(0, 1, {"a": snap(11, [0, 1]), "b": snap(12, [2])}, {})
    store.write_round(0, 2, {"b": snap(12, [])}, {"a": snap(11, [0, 1])})  # a unchanged: its round-1 file stays
    loaded = store.load(0)
    assert same(loaded["a"], snap(11, [0, 1])) and same(loaded["b"], snap(12, []))
    assert sorted(p.name for p in store.directory.glob("*.vd")) == ["a.1.vd", "b.2.vd"]
    assert store.write_round(0, 3, {}, {"b": snap(12, [])}) == {"b"}  # a left the partition
    assert set(store.load(0)) == {"b"} and sorted(p.name for p in store.directory.glob("*.vd")) == ["b.2.vd"]
    assert store.load(1) == {}  # partitions are separate


def test_a_crash_before_the_manifest_leaves_the_previous_round(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write_round(0, 1, {"a": snap(11, [0]), "b": snap(12, [1])}, {})
    (tmp_path / "a.2.vd").write_bytes(encode(snap(11, [])))  # round 2 died after writing one file
    loaded = store.load(0)
    assert same(loaded["a"], snap(11, [0])) and same(loaded["b"], snap(12, [1]))


def test_an_unreadable_snapshot_disables_the_whole_partition(tmp_path: Path) -> None:
    """Half a round would show a key twice or not at all: the partition is then decided from its rows."""
    store = SnapshotStore(tmp_path)
    store.write_round(0, 1, {"a": snap(11, [0]), "b": snap(12, [1])}, {})
    (tmp_path / "b.1.vd").write_bytes(b"garbage")
    assert store.load(0) == {}
    (tmp_path / "partition-0.json").write_text('{"segments": {"a": {"crc": 11, "file": "../../etc/passwd"}}}')
    assert store.load(0) == {}


def test_a_kept_segment_the_last_manifest_lacks_is_written_again(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.write_round(0, 1, {"a": snap(11, [0])}, {})
    (tmp_path / "partition-0.json").write_text('{"segments": []}')  # damaged (valid JSON, wrong shape)
    assert store.write_round(0, 2, {}, {"a": snap(11, [0])}) == {"a"}
    assert same(store.load(0)["a"], snap(11, [0]))
