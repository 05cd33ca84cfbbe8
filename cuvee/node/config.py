"""Role config files: TOML onto frozen dataclasses, with every mistake reported at once by key path.

Each role declares its config as a frozen dataclass whose fields have defaults; nested dataclasses are TOML tables.
Durations and intervals are plain seconds (floats) so that tests can shrink them to make failure cases fast.
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from cuvee.config.errors import ConfigIssue, ConfigValidationError
from cuvee.errors import UserError

C = TypeVar("C")


def load_config(cls: type[C], path: str | Path | None, overrides: dict[str, Any] | None = None) -> C:
    """Read ``path`` (TOML; None means all defaults), apply ``overrides`` (dotted keys), build ``cls``."""
    doc: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            doc = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"config file {str(path)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    for dotted, value in (overrides or {}).items():
        target = doc
        *parents, leaf = dotted.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[leaf] = value
    return config_from_dict(cls, doc, what=str(path) if path else cls.__name__)


def config_from_dict(cls: type[C], doc: dict[str, Any], what: str = "config") -> C:
    issues: list[ConfigIssue] = []
    result = _build(cls, doc, "$", issues)
    if issues:
        raise ConfigValidationError(what, issues)
    return result  # type: ignore[return-value]


def config_to_dict(config: Any) -> dict[str, Any]:
    """The inverse of config_from_dict, for writing a config file a child process will read."""
    return {k: v for k, v in dataclasses.asdict(config).items() if v is not None}


def _build(cls: type, doc: Any, path: str, issues: list[ConfigIssue]) -> Any:
    if not isinstance(doc, dict):
        issues.append(ConfigIssue(path, "must be a table"))
        return None
    issues_before = len(issues)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in doc:
        if key not in fields:
            issues.append(ConfigIssue(f"{path}.{key}", f"unknown key (known: {', '.join(sorted(fields))})"))
    kwargs: dict[str, Any] = {}
    for name, field in fields.items():
        if name not in doc:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                issues.append(ConfigIssue(f"{path}.{name}", "required"))
            continue
        value = _convert(hints[name], doc[name], f"{path}.{name}", issues)
        if value is not _INVALID:
            kwargs[name] = value
    if len(issues) > issues_before:
        return None
    try:
        return cls(**kwargs)
    except (TypeError, ValueError, UserError) as exc:
        issues.append(ConfigIssue(path, str(exc)))
        return None


_INVALID = object()


def _convert(hint: Any, value: Any, path: str, issues: list[ConfigIssue]) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        hint = options[0]
        origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        built = _build(hint, value, path, issues)
        return _INVALID if built is None else built
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin in (tuple, list):
        (item,) = typing.get_args(hint)[:1] or (Any,)
        if isinstance(value, (list, tuple)):
            items = [_convert(item, v, f"{path}[{i}]", issues) for i, v in enumerate(value)]
            return _INVALID if any(v is _INVALID for v in items) else tuple(items)
    elif origin is dict or hint is Any:
        return value
    name = getattr(hint, "__name__", str(hint))
    issues.append(ConfigIssue(path, f"must be {_ARTICLES.get(name, name)}, got {value!r}"))
    return _INVALID


_ARTICLES = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string", "tuple": "a list"}
