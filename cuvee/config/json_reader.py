"""Reading one JSON object of a config document while collecting every problem instead of stopping at the first.

A ``JsonObject`` wraps a dict and its JSONPath; its typed getters record a ConfigIssue (path + message) and return
a fallback when a value is wrong, and remember which keys were read, so the keys nobody asked for can be kept as
extras and written back unchanged (Pinot configs carry many keys we ignore).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any

from cuvee.config.errors import ConfigIssue

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def child_path(path: str, key: str | int) -> str:
    """``$.a.b`` for identifier keys, ``$.a['stream.kafka.topic.name']`` for dotted ones, ``$.a[3]`` for indexes."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}"
    return "{}['{}']".format(path, key.replace("\\", "\\\\").replace("'", "\\'"))


class JsonObject:
    """A JSON object being parsed; getters never raise, they add to the shared ``issues`` list."""

    def __init__(self, doc: dict[str, Any], path: str, issues: list[ConfigIssue]):
        self.doc = doc
        self.path = path
        self.issues = issues
        self._read: set[str] = set()

    @classmethod
    def of(cls, value: Any, path: str, issues: list[ConfigIssue]) -> JsonObject:
        """Wrap ``value``; a non-object is reported and treated as empty so parsing can go on."""
        if value is None:
            return cls({}, path, issues)
        if not isinstance(value, dict):
            issues.append(ConfigIssue(path, "must be a JSON object"))
            return cls({}, path, issues)
        return cls(value, path, issues)

    def at(self, key: str) -> str:
        return child_path(self.path, key)

    def report(self, key: str | None, message: str) -> None:
        self.issues.append(ConfigIssue(self.at(key) if key is not None else self.path, message))

    def has(self, key: str) -> bool:
        return key in self.doc and self.doc[key] is not None

    def raw(self, key: str) -> Any:
        self._read.add(key)
        return self.doc.get(key)

    def child(self, key: str) -> JsonObject:
        """The object at ``key`` (empty when missing)."""
        return JsonObject.of(self.raw(key), self.at(key), self.issues)

    def string(self, key: str, *, required: bool = False, choices: Iterable[str] | None = None) -> str | None:
        value = self.raw(key)
        if value is None:
            if required:
                self.report(key, "required, a non-empty string")
            return None
        if not isinstance(value, str) or not value.strip():
            self.report(key, "must be a non-empty string")
            return None
        if choices is not None:
            allowed = list(choices)
            if value.upper() not in allowed:
                self.report(key, f"{value!r} is not one of {', '.join(allowed)}")
                return None
            return value.upper()
        return value

    def integer(self, key: str, *, minimum: int | None = None, what: str | None = None) -> int | None:
        """An integer given as a JSON number or a numeric string (Pinot writes "replication": "3")."""
        value = self.raw(key)
        if value is None:
            return None
        parsed = _as_int(value)
        if parsed is None or (minimum is not None and parsed < minimum):
            self.report(key, f"must be {what or _describe_minimum(minimum)}")
            return None
        return parsed

    def number(self, key: str, *, minimum: float | None = None) -> float | None:
        value = self.raw(key)
        if value is None:
            return None
        parsed = _as_float(value)
        if parsed is None or (minimum is not None and parsed < minimum):
            bound = "" if minimum is None else f" >= {minimum:g}"
            self.report(key, f"must be a number{bound}")
            return None
        return parsed

    def boolean(self, key: str) -> bool | None:
        value = self.raw(key)
        if value is None:
            return None
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        self.report(key, "must be true or false")
        return None

    def string_list(self, key: str) -> tuple[str, ...]:
        value = self.raw(key)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.report(key, "must be a list of column names")
            return ()
        out: list[str] = []
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.issues.append(ConfigIssue(child_path(self.at(key), i), "must be a non-empty string"))
            else:
                out.append(item)
        return tuple(out)

    def object_list(self, key: str) -> list[JsonObject]:
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.report(key, "must be a list of JSON objects")
            return []
        objects = []
        for i, item in enumerate(value):
            if isinstance(item, dict):
                objects.append(JsonObject(item, child_path(self.at(key), i), self.issues))
            else:
                self.issues.append(ConfigIssue(child_path(self.at(key), i), "must be a JSON object"))
        return objects

    def extras(self) -> dict[str, Any]:
        """Deep copies of the keys no getter asked for: kept so ``to_json`` writes them back."""
        return {k: copy.deepcopy(v) for k, v in self.doc.items() if k not in self._read}


def _describe_minimum(minimum: int | None) -> str:
    if minimum == 1:
        return "a positive integer"
    if minimum == 0:
        return "a non-negative integer"
    if minimum is None:
        return "an integer"
    return f"an integer >= {minimum}"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None
