"""Behaviour every DeepStore implementation must have (the SPI contract in cuvee/spi/deepstore.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuvee.spi.deepstore import InvalidKeyError
from cuvee.spi.deepstore import DeepStore, DeepStoreError, ObjectNotFoundError

SEGMENT = "events/events__0__3__20261121T1647Z.tar.gz"


def test_put_then_get_returns_the_same_bytes(store: DeepStore, local_file, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    uri = store.put(local_file("seg", data), SEGMENT)
    assert uri == store.uri(SEGMENT)
    assert uri.startswith(store.root_uri + "/")
    target = tmp_path / "download" / "nested" / "seg.tar.gz"
    assert store.get(SEGMENT, target) == target
    assert target.read_bytes() == data


def test_key_of_inverts_uri(store: DeepStore) -> None:
    for key in (SEGMENT, "a b/c%d.bin", "x"):
        assert store.key_of(store.uri(key)) == key


def test_key_of_refuses_uris_outside_the_store(store: DeepStore) -> None:
    for uri in ("file:///elsewhere/x", "s3://bucket/x", store.root_uri, store.root_uri + "-sibling/x"):
        with pytest.raises(DeepStoreError, match="is not under deep store"):
            store.key_of(uri)


def test_exists_and_delete(store: DeepStore, local_file) -> None:
    assert not store.exists(SEGMENT)
    store.put(local_file("seg", b"x"), SEGMENT)
    assert store.exists(SEGMENT)
    store.delete(SEGMENT)
    assert not store.exists(SEGMENT)
    store.delete(SEGMENT)  # deleting a missing key is fine
    assert store.list() == []


def test_put_replaces_an_existing_object(store: DeepStore, local_file, tmp_path: Path) -> None:
    store.put(local_file("one", b"first"), "k")
    store.put(local_file("two", b"second"), "k")
    assert store.get("k", tmp_path / "out").read_bytes() == b"second"


def test_get_missing_key_raises_object_not_found(store: DeepStore, tmp_path: Path) -> None:
    with pytest.raises(ObjectNotFoundError, match="'nope/x' does not exist"):
        store.get("nope/x", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_move(store: DeepStore, local_file, tmp_path: Path) -> None:
    store.put(local_file("seg", b"payload"), "tmp/seg")
    uri = store.move("tmp/seg", "final/dir/seg")
    assert uri == store.uri("final/dir/seg")
    assert not store.exists("tmp/seg")
    assert store.get("final/dir/seg", tmp_path / "o").read_bytes() == b"payload"


def test_move_onto_an_existing_key_replaces_it(store: DeepStore, local_file, tmp_path: Path) -> None:
    store.put(local_file("a", b"new"), "a")
    store.put(local_file("b", b"old"), "b")
    store.move("a", "b")
    assert store.list() == ["b"]
    assert store.get("b", tmp_path / "o").read_bytes() == b"new"


def test_move_missing_key_raises_object_not_found(store: DeepStore) -> None:
    with pytest.raises(ObjectNotFoundError):
        store.move("ghost", "elsewhere")


def test_list_is_sorted_and_filters_by_prefix(store: DeepStore, local_file) -> None:
    source = local_file("seg", b"x")
    keys = ["events/events__1__0__x", "events/events__0__1__x", "events/events__0__0__x", "orders/o__0__0__x",
            "eventsX/y", "top"]
    for key in keys:
        store.put(source, key)
    assert store.list() == sorted(keys)
    assert store.list("events/") == ["events/events__0__0__x", "events/events__0__1__x", "events/events__1__0__x"]
    assert store.list("events/events__0") == ["events/events__0__0__x", "events/events__0__1__x"]
    assert store.list("events") == ["events/events__0__0__x", "events/events__0__1__x", "events/events__1__0__x",
                                    "eventsX/y"]
    assert store.list("t") == ["top"]
    assert store.list("missing/") == []
    assert store.list("events/events__0__0__x/deeper/") == []


def test_an_empty_store_lists_nothing(store: DeepStore) -> None:
    assert store.list() == []


BAD_KEYS = ["", "../escape", "a/../../b", "/etc/passwd", "a//b", "./a", "a/.", "a\\b", "a/", ".cuvee-tmp-x"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused_by_every_operation(store: DeepStore, local_file, tmp_path: Path, key: str) -> None:
    source = local_file("seg", b"x")
    store.put(source, "good")
    calls = [
        lambda: store.put(source, key),
        lambda: store.get(key, tmp_path / "o"),
        lambda: store.move("good", key),
        lambda: store.move(key, "good2"),
        lambda: store.exists(key),
        lambda: store.delete(key),
        lambda: store.uri(key),
    ]
    for call in calls:
        with pytest.raises(InvalidKeyError):
            call()
    assert issubclass(InvalidKeyError, DeepStoreError)
    assert store.list() == ["good"]
    assert not (tmp_path / "escape").exists()


@pytest.mark.parametrize("prefix", ["../", "/abs", "a//", "a/../"])
def test_bad_prefixes_are_refused(store: DeepStore, prefix: str) -> None:
    with pytest.raises(InvalidKeyError):
        store.list(prefix)


def test_a_missing_source_file_is_a_deep_store_error(store: DeepStore, tmp_path: Path) -> None:
    with pytest.raises(DeepStoreError, match="cannot put") as info:
        store.put(tmp_path / "no-such-file", "k")
    assert isinstance(info.value.__cause__, OSError)
    assert not store.exists("k")


def test_keys_with_glob_characters_move_as_themselves(store: DeepStore, local_file, tmp_path: Path) -> None:
    for name in ("star*", "g[1]", "brace{x}"):
        store.put(local_file(name, name.encode()), f"src/{name}")
        store.move(f"src/{name}", f"dst/{name}")
        assert store.get(f"dst/{name}", tmp_path / name).read_bytes() == name.encode()
        assert not store.exists(f"src/{name}")


def test_reader_streams_an_object_from_its_start(store: DeepStore, local_file) -> None:
    data = os.urandom(2 * 1024 * 1024 + 5)
    store.put(local_file("seg", data), SEGMENT)
    with store.reader(SEGMENT) as stream:
        assert stream.read(4) == data[:4]
        assert stream.read() == data[4:]
    with pytest.raises(ObjectNotFoundError, match="'nope/x' does not exist"):
        store.reader("nope/x").__enter__()  # opening it raises: there is nothing to read
