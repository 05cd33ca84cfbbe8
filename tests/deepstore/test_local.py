"""The local-directory deep store: atomicity under injected failures, URI handling, and opening by scheme."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cuvee.deepstore import open_deepstore, supported_schemes
from cuvee.deepstore.keys import TEMP_PREFIX
from cuvee.deepstore.local import LocalDeepStore
from cuvee.errors import UserError
from cuvee.spi.deepstore import DeepStoreError


class InjectedFault(OSError):
    pass


def failing_at(point: str):  # noqa: ANN201 - returns a fault hook
    def hook(reached: str) -> None:
        if reached == point:
            raise InjectedFault(f"injected failure at {point}")

    return hook


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def test_failed_put_leaves_no_partial_object_and_keeps_the_old_one(tmp_path: Path, local_file) -> None:
    root = tmp_path / "ds"
    LocalDeepStore(root).put(local_file("v1", b"version one"), "t/seg")
    broken = LocalDeepStore(root, fault_hook=failing_at("put.copied"))
    with pytest.raises(DeepStoreError, match=r"cannot put .* key 't/seg'.*injected failure") as info:
        broken.put(local_file("v2", b"version two, longer"), "t/seg")
    assert isinstance(info.value.__cause__, InjectedFault)
    assert (root / "t" / "seg").read_bytes() == b"version one"
    assert temp_files(root) == []


def test_failed_first_put_leaves_nothing(tmp_path: Path, local_file) -> None:
    store = LocalDeepStore(tmp_path / "ds", fault_hook=failing_at("put.copied"))
    with pytest.raises(DeepStoreError):
        store.put(local_file("v", b"data"), "t/seg")
    assert not store.exists("t/seg")
    assert store.list() == []
    assert temp_files(tmp_path / "ds") == []


def test_failed_get_keeps_the_local_file_untouched(tmp_path: Path, local_file) -> None:
    root = tmp_path / "ds"
    LocalDeepStore(root).put(local_file("v", b"remote"), "seg")
    local = tmp_path / "local" / "seg"
    local.parent.mkdir()
    local.write_bytes(b"local copy")
    with pytest.raises(DeepStoreError, match="cannot get deep store key 'seg'"):
        LocalDeepStore(root, fault_hook=failing_at("get.copied")).get("seg", local)
    assert local.read_bytes() == b"local copy"
    assert temp_files(local.parent) == []


def test_failed_move_keeps_the_source(tmp_path: Path, local_file) -> None:
    root = tmp_path / "ds"
    LocalDeepStore(root).put(local_file("v", b"data"), "a")
    with pytest.raises(DeepStoreError, match="cannot move deep store key 'a' to 'b'"):
        LocalDeepStore(root, fault_hook=failing_at("move.before")).move("a", "b")
    assert LocalDeepStore(root).list() == ["a"]


def test_a_file_where_a_directory_should_be_is_a_deep_store_error(tmp_path: Path, local_file) -> None:
    store = LocalDeepStore(tmp_path / "ds")
    source = local_file("v", b"data")
    store.put(source, "events")  # "events" is now a file...
    with pytest.raises(DeepStoreError, match="'events/seg'") as info:
        store.put(source, "events/seg")  # ...so it cannot be a directory
    assert isinstance(info.value.__cause__, OSError)
    with pytest.raises(DeepStoreError):
        store.move("events", "events/inside")
    assert not store.exists("events/seg")
    assert store.list() == ["events"]


def test_get_into_a_path_under_a_file_is_a_deep_store_error(tmp_path: Path, local_file) -> None:
    store = LocalDeepStore(tmp_path / "ds")
    store.put(local_file("v", b"data"), "seg")
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"")
    with pytest.raises(DeepStoreError, match="cannot get deep store key 'seg'"):
        store.get("seg", blocker / "seg")


def test_deleting_a_directory_key_is_a_deep_store_error(tmp_path: Path, local_file) -> None:
    store = LocalDeepStore(tmp_path / "ds")
    store.put(local_file("v", b"data"), "dir/seg")
    assert not store.exists("dir")
    with pytest.raises(DeepStoreError, match="cannot delete deep store key 'dir'"):
        store.delete("dir")
    assert store.exists("dir/seg")


def test_leftover_temp_files_of_a_crashed_writer_are_invisible(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "t").mkdir(parents=True)
    (root / "t" / f"{TEMP_PREFIX}seg-123").write_bytes(b"half")
    store = LocalDeepStore(root)
    assert store.list() == []
    assert not store.exists("t/seg")


def test_readers_never_see_a_partial_object(tmp_path: Path, local_file) -> None:
    store = LocalDeepStore(tmp_path / "ds")
    size = 2 * 1024 * 1024
    versions = [local_file("a", b"a" * size), local_file("b", b"b" * size)]
    store.put(versions[0], "hot")
    done = threading.Event()
    bad: list[str] = []

    def read_until_done() -> None:
        reads = 0
        while not done.is_set() or reads < 5:
            data = (store.root / "hot").read_bytes()
            if len(data) != size or data.strip(data[:1]):
                bad.append(f"read {len(data)} bytes, mixed content")
            reads += 1

    reader = threading.Thread(target=read_until_done)
    reader.start()
    for i in range(30):
        store.put(versions[i % 2], "hot")
    done.set()
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert bad == []


def test_open_deepstore_by_uri(tmp_path: Path) -> None:
    root = tmp_path / "with space"
    store = open_deepstore(root.as_uri())
    assert isinstance(store, LocalDeepStore)
    assert store.root == root
    assert store.root_uri == root.as_uri()
    assert store.uri("a/b") == (root / "a" / "b").as_uri()
    assert open_deepstore(f"file://localhost{tmp_path}/x").root == tmp_path / "x"
    assert supported_schemes() == ["file", "s3"]


@pytest.mark.parametrize(("uri", "message"), [
    ("gs://bucket/prefix", "unsupported scheme 'gs'; supported: file://, s3://"),
    ("/var/cuvee", "unsupported scheme 'none'; supported: file://, s3:// (give an absolute path as file:///abs/dir)"),
    ("s3:///no-bucket", "must name a bucket"),
    ("s3://bucket/x?endpoint=y", "must name a bucket"),
    ("file://relative/dir", "must name an absolute directory"),
    ("file:relative", "must name an absolute directory"),
])
def test_open_deepstore_refuses_bad_uris_as_user_errors(uri: str, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        open_deepstore(uri)


def test_a_relative_root_is_refused() -> None:
    with pytest.raises(DeepStoreError, match="must be an absolute path"):
        LocalDeepStore("relative/dir")
    with pytest.raises(DeepStoreError, match="is not a local deep store URI"):
        LocalDeepStore.from_uri("http://x/y")

