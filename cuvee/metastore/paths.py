"""Path rules shared by every metadata store, so both implementations reject the same mistakes the same way."""

from __future__ import annotations

from cuvee.spi.metastore import MetadataStoreError

ROOT = "/"


class InvalidPathError(MetadataStoreError, ValueError):
    """A path that breaks the SPI's rules (absolute, ``/``-separated, no trailing slash, no empty segments)."""


def check_path(path: str) -> str:
    """Return ``path`` unchanged if valid; raise InvalidPathError naming the rule it breaks."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"metadata path {path!r} must be an absolute string starting with '/'")
    if path == ROOT:
        return path
    if path.endswith("/"):
        raise InvalidPathError(f"metadata path {path!r} must not end with '/'")
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidPathError(f"metadata path {path!r} has an empty, '.' or '..' segment")
        if "\x00" in segment:
            raise InvalidPathError(f"metadata path {path!r} contains a NUL character")
    return path


def check_deletable(path: str) -> str:
    check_path(path)
    if path == ROOT:
        raise InvalidPathError("the root node '/' cannot be deleted")
    return path


def parent_of(path: str) -> str:
    """``/a/b`` -> ``/a``; ``/a`` -> ``/``."""
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def name_of(path: str) -> str:
    return path.rsplit("/", 1)[1]


def join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def ancestors(path: str) -> list[str]:
    """Proper ancestors below the root, outermost first: ``/a/b/c`` -> ``['/a', '/a/b']``."""
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
