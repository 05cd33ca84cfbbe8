"""Deep-store keys: relative, slash-separated names that can never escape the store's root.

Pure checks shared by every implementation, so a key that is refused locally is refused on S3 too.
"""

from __future__ import annotations

from cuvee.spi.deepstore import InvalidKeyError

__all__ = ["TEMP_PREFIX", "InvalidKeyError", "check_key", "check_prefix"]

# Temp objects of an unfinished put/get start with this; they are never listed and cannot be named by a key.
TEMP_PREFIX = ".cuvee-tmp-"


def check_key(key: str) -> str:
    """``key`` itself when it is a valid object key, else InvalidKeyError saying why."""
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"deep store key {key!r} must be a non-empty string")
    _check_parts(key, allow_trailing_slash=False)
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key-like string that may end in ``/`` or in part of a name."""
    if not isinstance(prefix, str):
        raise InvalidKeyError(f"deep store prefix {prefix!r} must be a string")
    if prefix:
        _check_parts(prefix, allow_trailing_slash=True)
    return prefix


def _check_parts(key: str, *, allow_trailing_slash: bool) -> None:
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKeyError(f"deep store key {key!r} must be a relative path with '/' separators")
    parts = key.split("/")
    if allow_trailing_slash and parts[-1] == "":
        parts = parts[:-1]
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidKeyError(f"deep store key {key!r} must not contain empty, '.' or '..' parts")
        if part.startswith(TEMP_PREFIX):
            raise InvalidKeyError(f"deep store key {key!r} uses the reserved prefix {TEMP_PREFIX!r}")
