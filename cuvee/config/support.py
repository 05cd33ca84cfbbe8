"""What Cuvee does with each key of a Pinot config: honoured, refused by name, or accepted as a hint. Pure.

A Pinot user's config loads unchanged, and nothing in it is dropped silently. Every key a user may send is one of:

- **honoured**: Cuvee does what Pinot does with it (its parser in ``cuvee.config`` reads and checks it);
- **refused**: it would change the data stored or the answers to queries, and Cuvee does not do that yet: creating
  or updating the table is a 400 naming the key and why. Most such keys are refused only when they ask for the
  feature (``dedupConfig.dedupEnabled: true``, a non-empty ``starTreeIndexConfigs``); off, they say what Cuvee does;
- **hint**: it changes neither data nor answers (an index that only speeds queries, a memory layout, a Pinot
  operations setting): accepted, kept, and listed back under ``unrecognizedProperties`` (as Pinot's API lists keys
  it does not know) and in ``cuvee status``, with why it changes nothing here.

Keys the catalogue does not know at all (a typo, a key of a newer Pinot) are listed back the same way. The
catalogue is a tree of rules (``Obj``, ``Each``, ``Patterns``, leaves ``Key``) walked over the JSON document by
``review``; the catalogues themselves are ``cuvee.config.pinot_keys``. Checking a key's value is the parsers' job,
not this module's: here only "is it there, and does it ask for something".
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

from cuvee.config.errors import ConfigIssue
from cuvee.config.json_reader import child_path

MAX_LISTED = 200  # findings of each kind kept per config (a config of 10,000 unknown keys gets the first ones)
MAX_DEPTH = 32  # JSON nesting a config may have (Pinot's own go 6 deep): deeper values cannot be stored or shown


class Support(str, enum.Enum):
    HONOURED = "honoured"
    REFUSED = "refused"
    HINT = "hint"
    UNKNOWN = "unknown"  # not a key of Pinot's config as Cuvee knows it


def asks(value: Any) -> bool:
    """Does a value turn its feature on? ``false``, empty and null values (and ``"false"``) do not."""
    if value is None or value is False:
        return False
    if isinstance(value, str):
        return value.strip().lower() not in ("", "false")
    if isinstance(value, (list, dict)):
        return len(value) > 0
    return True


@dataclass(frozen=True)
class Key:
    """A leaf: the key (and anything below it) is ``support``. A refused key or a hint counts only when
    ``active(value)`` (default: it asks for its feature); otherwise it is honoured: off is what Cuvee does."""

    support: Support
    why: str = ""
    active: Callable[[Any], bool] = asks


@dataclass(frozen=True)
class Obj:
    """A JSON object whose keys Cuvee knows; a key not in ``keys`` is UNKNOWN unless ``others`` says what it is."""

    keys: Mapping[str, Rule]
    others: Rule | None = None


@dataclass(frozen=True)
class Each:
    """A list whose items, or an object whose values (a map with keys of the user's, such as column names),
    all follow ``item``."""

    item: Rule


@dataclass(frozen=True)
class Pick:
    """A key whose rule depends on its value (``indexTypes: ["TEXT"]`` is refused, ``["INVERTED"]`` a hint);
    ``why`` says how, for the docs."""

    choose: Callable[[Any], Rule]
    why: str = ""


@dataclass(frozen=True)
class Patterns:
    """A flat map of dotted keys (Pinot's ``streamConfigs``): the first ``fnmatch`` pattern matching a key gives
    its rule; no match is UNKNOWN."""

    patterns: tuple[tuple[str, Rule], ...]

    @cached_property
    def _compiled(self) -> tuple[re.Pattern[str], tuple[Rule, ...]]:
        """All patterns as one regex of named alternatives, tried in order (a map of 100,000 keys is reviewed in
        one pass, not 100,000 times every pattern)."""
        alternatives = "|".join(f"(?P<p{i}>{fnmatch.translate(p)[4:-3]})" for i, (p, _) in enumerate(self.patterns))
        return re.compile(f"(?s:{alternatives})\\Z"), tuple(rule for _, rule in self.patterns)

    def rule_for(self, key: str) -> Rule | None:
        regex, rules = self._compiled
        found = regex.match(key)
        return None if found is None or found.lastgroup is None else rules[int(found.lastgroup[1:])]


Rule = Union[Key, Obj, Each, Pick, Patterns]

HONOURED = Key(Support.HONOURED)


def hint(why: str) -> Key:
    """Listed back when its value asks for something (``asks``: not false, empty or null)."""
    return Key(Support.HINT, why)


def refused(why: str, active: Callable[[Any], bool] = asks) -> Key:
    return Key(Support.REFUSED, why, active)


@dataclass(frozen=True)
class Finding:
    """One key that is not simply honoured: where (JSONPath and Pinot's JSON pointer), its value, and why."""

    path: str  # $.tableIndexConfig.loadMode, as the validation errors spell paths
    pointer: str  # /tableIndexConfig/loadMode, as Pinot's unrecognizedProperties does
    value: Any
    support: Support
    why: str
    unsupported: bool = True  # a refusal for something Cuvee does not do yet (not a malformed config)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.pointer, "support": self.support.value, "why": self.why}


@dataclass(frozen=True)
class ConfigReview:
    """What ``review`` found: refused keys (a 400), and keys accepted but not honoured (listed back)."""

    refused: tuple[Finding, ...] = ()
    listed: tuple[Finding, ...] = field(default=())  # hints and unknown keys, in document order

    @property
    def issues(self) -> list[ConfigIssue]:
        return [ConfigIssue(f.path, f"{f.why} (refused until Cuvee supports it; remove the key)" if f.unsupported
                            else f.why) for f in self.refused]

    def unrecognized_properties(self) -> dict[str, Any]:
        """Pinot's ``unrecognizedProperties``: JSON pointer -> value of each listed key."""
        return {f.pointer: f.value for f in self.listed}

    def merged(self, other: ConfigReview) -> ConfigReview:
        return ConfigReview(self.refused + other.refused, self.listed + other.listed)


def review(doc: Any, rule: Rule, path: str = "$", pointer: str = "") -> ConfigReview:
    """Walk ``doc`` along ``rule``; every refused key that asks for its feature, every hint and unknown key."""
    refused_found: list[Finding] = []
    listed: list[Finding] = []
    too_deep = _too_deep(doc, path, pointer)
    if too_deep is not None:
        refused_found.append(too_deep)
    for finding in _walk(doc, rule, path, pointer):
        if finding.support is Support.REFUSED:
            if len(refused_found) < MAX_LISTED:
                refused_found.append(finding)
        elif len(listed) < MAX_LISTED:
            listed.append(finding)
    return ConfigReview(tuple(refused_found), tuple(listed))


def _too_deep(doc: Any, path: str, pointer: str) -> Finding | None:
    """The first value nested more than MAX_DEPTH levels deep, found without recursion."""
    stack: list[tuple[Any, int, str, str]] = [(doc, 0, path, pointer)]
    while stack:
        value, depth, where, at = stack.pop()
        if depth > MAX_DEPTH:
            return Finding(where, at, None, Support.REFUSED, f"nested more than {MAX_DEPTH} levels deep", False)
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, child_path(where, key), _pointer(at, key)))
    return None


def _pointer(pointer: str, key: str | int) -> str:
    text = str(key).replace("~", "~0").replace("/", "~1")
    return f"{pointer}/{text}"


def _walk(value: Any, rule: Rule, path: str, pointer: str) -> Iterator[Finding]:
    if isinstance(rule, Pick):
        yield from _walk(value, rule.choose(value), path, pointer)
        return
    if isinstance(rule, Key):
        if rule.support in (Support.REFUSED, Support.HINT) and not rule.active(value):
            return
        if rule.support is not Support.HONOURED:
            yield Finding(path, pointer, value, rule.support, rule.why)
        return
    if isinstance(rule, Each):
        items = enumerate(value) if isinstance(value, list) else value.items() if isinstance(value, dict) else ()
        for key, item in items:
            yield from _walk(item, rule.item, child_path(path, key), _pointer(pointer, key))
        return
    if not isinstance(value, dict):
        return  # a wrong type is the parser's to report
    for key, item in value.items():
        key = str(key)
        sub: Rule | None
        if isinstance(rule, Patterns):
            sub = rule.rule_for(key)
        else:
            sub = rule.keys.get(key, rule.others)
        where, at = child_path(path, key), _pointer(pointer, key)
        if sub is None:
            yield Finding(where, at, item, Support.UNKNOWN, "not a Pinot config key Cuvee knows: check its spelling")
        else:
            yield from _walk(item, sub, where, at)


def keys_of(rule: Rule, prefix: str = "", *, into_patterns: bool = True) -> Iterator[tuple[str, Key | Pick | Patterns]]:
    """Every leaf of a catalogue with its dotted path (``[]`` for list items and map values), for the docs; a
    ``Patterns`` map is one entry of its own unless ``into_patterns``."""
    if isinstance(rule, (Key, Pick)):
        yield prefix, rule
    elif isinstance(rule, Each):
        yield from keys_of(rule.item, f"{prefix}[]", into_patterns=into_patterns)
    elif isinstance(rule, Patterns):
        if not into_patterns:
            yield prefix, rule
            return
        for pattern, sub in rule.patterns:
            yield from keys_of(sub, f"{prefix}.{pattern}" if prefix else pattern, into_patterns=into_patterns)
    else:
        for key, sub in rule.keys.items():
            yield from keys_of(sub, f"{prefix}.{key}" if prefix else key, into_patterns=into_patterns)
        if rule.others is not None:
            yield from keys_of(rule.others, f"{prefix}.*" if prefix else "*", into_patterns=into_patterns)
