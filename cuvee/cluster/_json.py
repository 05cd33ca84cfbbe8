"""Strict reading of stored JSON records: every problem names the record kind and the field."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, TypeVar

import orjson

from cuvee.errors import CuveeError

E = TypeVar("E", bound=enum.Enum)


class RecordFormatError(CuveeError):
    """Stored bytes are not a valid record of the expected kind (corrupt node, or written by something else)."""


def encode(doc: Mapping[str, Any]) -> bytes:
    """Sorted keys, so the same record always gives the same bytes (and an unchanged update writes nothing new)."""
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def decode(kind: str, data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordFormatError(f"{kind}: stored data is not JSON ({exc})") from None


class Fields:
    """Typed getters over one JSON object; ``kind`` (e.g. ``segment metadata``) prefixes every error."""

    def __init__(self, kind: str, doc: Any):
        if not isinstance(doc, dict):
            raise RecordFormatError(f"{kind}: expected a JSON object, got {type(doc).__name__}")
        self.kind = kind
        self.doc: dict[str, Any] = doc

    def _fail(self, key: str, what: str) -> RecordFormatError:
        return RecordFormatError(f"{self.kind}: field {key!r} {what}")

    def _get(self, key: str, required: bool) -> Any:
        if key not in self.doc or self.doc[key] is None:
            if required:
                raise self._fail(key, "is missing")
            return None
        return self.doc[key]

    def string(self, key: str, default: str | None = None) -> str:
        value = self._get(key, default is None)
        if value is None:
            assert default is not None
            return default
        if not isinstance(value, str):
            raise self._fail(key, f"must be a string, got {value!r}")
        return value

    def integer(self, key: str) -> int:
        value = self.optional_integer(key)
        if value is None:
            raise self._fail(key, "is missing")
        return value

    def optional_integer(self, key: str) -> int | None:
        value = self._get(key, False)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, f"must be an integer, got {value!r}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, f"must be true or false, got {value!r}")
        return value

    def enum(self, key: str, cls: type[E]) -> E:
        return self.to_enum(key, self.string(key), cls)

    def to_enum(self, where: str, value: Any, cls: type[E]) -> E:
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in cls)
            raise self._fail(where, f"has {value!r}, expected one of {allowed}") from None

    def object(self, key: str) -> dict[str, Any]:
        value = self._get(key, False)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._fail(key, f"must be a JSON object, got {type(value).__name__}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(key, False)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, f"must be a list of strings, got {value!r}")
        return tuple(value)
