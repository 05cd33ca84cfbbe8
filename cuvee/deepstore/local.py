"""The local-directory deep store (``file:///abs/dir``): the embedded default, and a shared mount in small clusters.

Writes are atomic: data goes to a temp file in the target directory, is fsynced, then ``os.replace``d over the
final name, so a reader sees the whole object or none of it, even if the writer dies halfway.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlparse

from cuvee.deepstore.keys import TEMP_PREFIX, check_key, check_prefix
from cuvee.spi.deepstore import DeepStore, DeepStoreError, ObjectNotFoundError

# Called with a fault point's name ("put.copied", "get.copied", "move.before") before the step it names; tests
# pass one that raises OSError to prove a failure at that point leaves no partial object behind.
FaultHook = Callable[[str], None]


def _no_faults(point: str) -> None:
    return None


class LocalDeepStore(DeepStore):
    """Objects are files under ``root``; a key ``a/b/c.tar.zst`` is the file ``root/a/b/c.tar.zst``."""

    def __init__(self, root: str | Path, *, fault_hook: FaultHook = _no_faults):
        root = Path(root)
        if not root.is_absolute():
            raise DeepStoreError(f"local deep store root {str(root)!r} must be an absolute path")
        self._root = Path(os.path.normpath(root))
        self._fault = fault_hook

    @classmethod
    def from_uri(cls, uri: str, *, fault_hook: FaultHook = _no_faults) -> LocalDeepStore:
        """``file:///abs/dir`` (or ``file://localhost/abs/dir``)."""
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/"):
            raise DeepStoreError(f"{uri!r} is not a local deep store URI like file:///var/cuvee/deepstore")
        return cls(unquote(parsed.path), fault_hook=fault_hook)

    @property
    def root(self) -> Path:
        return self._root

    @property
    def root_uri(self) -> str:
        return self._root.as_uri()

    def uri(self, key: str) -> str:
        return self._path(key).as_uri()

    def key_of(self, uri: str) -> str:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise DeepStoreError(f"{uri!r} is not under deep store {self.root_uri}")
        path = os.path.normpath(unquote(parsed.path))
        root = str(self._root)
        if not path.startswith(root.rstrip("/") + "/"):
            raise DeepStoreError(f"{uri!r} is not under deep store {self.root_uri}")
        return check_key(path[len(root.rstrip("/")) + 1 :])

    def put(self, local_path: Path | str, key: str) -> str:
        target = self._path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_atomically(Path(local_path), target, lambda: self._fault("put.copied"))
        except OSError as e:
            where = f"deep store key {key!r} ({self.uri(key)})"
            raise DeepStoreError(f"cannot put {str(local_path)!r} to {where}: {e}") from e
        return self.uri(key)

    def get(self, key: str, local_path: Path | str) -> Path:
        source = self._path(key)
        local_path = Path(local_path)
        try:
            if not source.is_file():
                raise ObjectNotFoundError(f"deep store key {key!r} does not exist ({self.uri(key)})")
            local_path.parent.mkdir(parents=True, exist_ok=True)
            _copy_atomically(source, local_path, lambda: self._fault("get.copied"))
        except OSError as e:
            raise DeepStoreError(f"cannot get deep store key {key!r} into {str(local_path)!r}: {e}") from e
        return local_path

    @contextmanager
    def reader(self, key: str) -> Iterator[BinaryIO]:
        source = self._path(key)
        try:
            stream = open(source, "rb")
        except FileNotFoundError:
            raise ObjectNotFoundError(f"deep store key {key!r} does not exist ({self.uri(key)})") from None
        except OSError as e:
            raise DeepStoreError(f"cannot read deep store key {key!r}: {e}") from e
        with stream:
            yield stream

    def move(self, src_key: str, dst_key: str) -> str:
        source, target = self._path(src_key), self._path(dst_key)
        try:
            if not source.is_file():
                raise ObjectNotFoundError(f"deep store key {src_key!r} does not exist ({self.uri(src_key)})")
            target.parent.mkdir(parents=True, exist_ok=True)
            self._fault("move.before")
            os.replace(source, target)
            _fsync_dir(target.parent)
            if source.parent != target.parent:
                _fsync_dir(source.parent)
        except OSError as e:
            raise DeepStoreError(f"cannot move deep store key {src_key!r} to {dst_key!r}: {e}") from e
        return self.uri(dst_key)

    def exists(self, key: str) -> bool:
        path = self._path(key)
        try:
            return path.is_file()
        except OSError as e:
            raise DeepStoreError(f"cannot check deep store key {key!r}: {e}") from e

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            raise DeepStoreError(f"cannot delete deep store key {key!r} ({self.uri(key)}): {e}") from e

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        # Walk only the deepest directory the prefix names; the rest of the prefix filters names.
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self._root / directory if directory else self._root
        try:
            keys = [key for key in self._walk(start) if key.startswith(prefix)]
        except OSError as e:
            raise DeepStoreError(f"cannot list deep store {self.root_uri} under {prefix!r}: {e}") from e
        return sorted(keys)

    def _walk(self, start: Path) -> Iterator[str]:
        if not start.is_dir():
            return

        def fail(error: OSError) -> None:
            raise error

        for dirpath, _dirnames, filenames in os.walk(start, onerror=fail):
            relative = Path(dirpath).relative_to(self._root).as_posix()
            for name in filenames:
                if not name.startswith(TEMP_PREFIX):
                    yield name if relative == "." else f"{relative}/{name}"

    def _path(self, key: str) -> Path:
        return self._root / check_key(key)


def _copy_atomically(source: Path, target: Path, before_rename: Callable[[], None]) -> None:
    """Copy to a temp file beside ``target``, fsync, rename over ``target``; the temp file never outlives a failure."""
    temp = target.parent / f"{TEMP_PREFIX}{target.name}-{uuid.uuid4().hex}"
    try:
        shutil.copyfile(source, temp)  # uses sendfile where the OS has it
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        before_rename()
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable: fsync the directory that holds the new name."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
