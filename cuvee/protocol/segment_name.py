"""LLC segment names: ``<table>__<partition>__<sequence>__<yyyyMMdd'T'HHmm'Z'>``, after Pinot's ``LLCSegmentName``.

A realtime segment's name carries its partition and sequence so that the controller, the servers and the repair
task can reason about a partition's segments from names alone (which one is the latest, what comes next).
The creation time has minute precision; a name therefore stores it floored to the minute, so that
``parse(str(name)) == name`` always holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from cuvee.errors import CuveeError

SEPARATOR = "__"
_MINUTE_MS = 60_000
_TIME_FORMAT = "%Y%m%dT%H%MZ"
_TIME_RE = re.compile(r"^\d{8}T\d{4}Z$")
_INT_RE = re.compile(r"^(0|[1-9]\d*)$")


class InvalidSegmentNameError(CuveeError, ValueError):
    """A string is not a well-formed LLC segment name (the message says which part is wrong)."""


def _format_minute(created_ms: int) -> str:
    return datetime.fromtimestamp(created_ms / 1000, tz=UTC).strftime(_TIME_FORMAT)


def _parse_minute(text: str, name: str) -> int:
    if not _TIME_RE.match(text):
        raise InvalidSegmentNameError(f"segment name {name!r}: creation time {text!r} is not yyyyMMdd'T'HHmm'Z'")
    try:
        moment = datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError as exc:
        raise InvalidSegmentNameError(f"segment name {name!r}: creation time {text!r} is not a valid date") from exc
    return int(moment.timestamp()) * 1000


def _parse_int(text: str, what: str, name: str) -> int:
    if not _INT_RE.match(text):
        raise InvalidSegmentNameError(f"segment name {name!r}: {what} {text!r} is not a non-negative integer")
    return int(text)


@dataclass(frozen=True, order=True, slots=True)
class LLCSegmentName:
    """One consuming (or committed realtime) segment: table, stream partition, sequence in that partition, and
    creation minute (epoch ms, a multiple of 60,000). Orders by table, partition, then sequence."""

    table: str
    partition: int
    sequence: int
    created_ms: int

    def __post_init__(self) -> None:
        table = self.table
        if not table or SEPARATOR in table or "/" in table or table.strip() != table or table.endswith("_"):
            raise InvalidSegmentNameError(
                f"table name {table!r} cannot make a segment name: it must be non-empty, without '__', '/', "
                "surrounding spaces or a trailing '_'"
            )
        for what, value in (("partition", self.partition), ("sequence", self.sequence)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidSegmentNameError(f"segment {what} must be a non-negative integer, got {value!r}")
        if isinstance(self.created_ms, bool) or not isinstance(self.created_ms, int) or self.created_ms < 0:
            raise InvalidSegmentNameError(
                f"segment creation time must be non-negative epoch ms, got {self.created_ms!r}"
            )
        if self.created_ms % _MINUTE_MS:
            raise InvalidSegmentNameError(
                f"segment creation time {self.created_ms} is not on a minute: use LLCSegmentName.create()"
            )

    @classmethod
    def create(cls, table: str, partition: int, sequence: int, now_ms: int) -> LLCSegmentName:
        """A name created at ``now_ms`` (epoch ms; floored to the minute, as the name only keeps minutes)."""
        return cls(table, partition, sequence, now_ms - now_ms % _MINUTE_MS)

    @classmethod
    def parse(cls, name: str) -> LLCSegmentName:
        """Parse ``events__6__0__20261121T1647Z``; raises InvalidSegmentNameError saying what is wrong."""
        if not isinstance(name, str):
            raise InvalidSegmentNameError(f"segment name must be a string, got {type(name).__name__}")
        parts = name.split(SEPARATOR)
        if len(parts) != 4:
            raise InvalidSegmentNameError(
                f"segment name {name!r} must have 4 parts <table>__<partition>__<sequence>__<yyyyMMdd'T'HHmm'Z'>, "
                f"found {len(parts)}"
            )
        table, partition, sequence, created = parts
        if not table:
            raise InvalidSegmentNameError(f"segment name {name!r} has an empty table name")
        return cls(
            table,
            _parse_int(partition, "partition", name),
            _parse_int(sequence, "sequence", name),
            _parse_minute(created, name),
        )

    @staticmethod
    def is_llc(name: str) -> bool:
        """True if ``name`` parses as an LLC segment name (offline segment names do not)."""
        try:
            LLCSegmentName.parse(name)
        except InvalidSegmentNameError:
            return False
        return True

    def next(self, now_ms: int) -> LLCSegmentName:
        """The next segment of the same partition, created at ``now_ms`` (epoch ms)."""
        return LLCSegmentName.create(self.table, self.partition, self.sequence + 1, now_ms)

    @property
    def created_text(self) -> str:
        return _format_minute(self.created_ms)

    @property
    def name(self) -> str:
        return SEPARATOR.join((self.table, str(self.partition), str(self.sequence), self.created_text))

    def __str__(self) -> str:
        return self.name
