"""Pinot's date-time ``format`` and ``granularity`` strings for dateTimeFieldSpecs.

Both spellings Pinot accepts: the colon form ("1:MILLISECONDS:EPOCH", "1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd") and the
pipe form ("EPOCH|MILLISECONDS|1", "SIMPLE_DATE_FORMAT|yyyy-MM-dd", "TIMESTAMP"). Pure parsing; ValueError on a bad
string, which the schema parser turns into an issue with the field's path.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

TIME_UNIT_MS: dict[str, float] = {
    "NANOSECONDS": 1e-6,
    "MICROSECONDS": 1e-3,
    "MILLISECONDS": 1,
    "SECONDS": 1_000,
    "MINUTES": 60_000,
    "HOURS": 3_600_000,
    "DAYS": 86_400_000,
}


class TimeFormatKind(str, enum.Enum):
    EPOCH = "EPOCH"
    SIMPLE_DATE_FORMAT = "SIMPLE_DATE_FORMAT"
    TIMESTAMP = "TIMESTAMP"


@dataclass(frozen=True)
class DateTimeFormat:
    """A parsed format: epoch values count ``size`` × ``unit`` since 1970; SDF values follow a Java ``pattern``."""

    kind: TimeFormatKind
    size: int = 1
    unit: str = "MILLISECONDS"
    pattern: str | None = None

    @property
    def millis_per_value(self) -> float:
        """How many milliseconds one step of an EPOCH value is (1 for millis, 86,400,000 for "1:DAYS:EPOCH")."""
        return self.size * TIME_UNIT_MS[self.unit]


def parse_datetime_format(text: str) -> DateTimeFormat:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("must be a non-empty format string like '1:MILLISECONDS:EPOCH'")
    text = text.strip()
    if text.upper() == "TIMESTAMP":
        return DateTimeFormat(TimeFormatKind.TIMESTAMP)
    if "|" in text:
        return _parse_pipe_form(text)
    return _parse_colon_form(text)


def parse_granularity(text: str) -> tuple[int, str]:
    """``(size, unit)`` from "1:MILLISECONDS", "MILLISECONDS|1" or a bare unit, "DAYS" (size 1: Pinot's schemas
    use that shorter form too)."""
    if not isinstance(text, str):
        raise ValueError("must be a string like '1:MILLISECONDS'")
    if "|" in text:
        unit, _, size = text.partition("|")
        return _size(size or "1", text), _unit(unit, text)
    size, sep, unit = text.partition(":")
    if not sep:
        try:
            return 1, _unit(text, text)
        except ValueError:
            raise ValueError(f"{text!r} is not a granularity like '1:MILLISECONDS', 'MILLISECONDS|1' or 'DAYS'") \
                from None
    return _size(size, text), _unit(unit, text)


def _parse_colon_form(text: str) -> DateTimeFormat:
    parts = text.split(":", 3)
    if len(parts) < 3:
        examples = "'1:MILLISECONDS:EPOCH' or '1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd'"
        raise ValueError(f"{text!r} is not a format like {examples}")
    size, unit, kind = _size(parts[0], text), _unit(parts[1], text), _kind(parts[2], text)
    pattern = parts[3] if len(parts) == 4 else None
    if kind is TimeFormatKind.SIMPLE_DATE_FORMAT and not pattern:
        raise ValueError(f"{text!r}: SIMPLE_DATE_FORMAT needs a pattern, e.g. '1:DAYS:SIMPLE_DATE_FORMAT:yyyyMMdd'")
    if kind is TimeFormatKind.EPOCH and pattern:
        raise ValueError(f"{text!r}: an EPOCH format takes no pattern")
    return DateTimeFormat(kind, size, unit, pattern)


def _parse_pipe_form(text: str) -> DateTimeFormat:
    parts = text.split("|")
    kind = _kind(parts[0], text)
    if kind is TimeFormatKind.EPOCH:
        if len(parts) not in (2, 3):
            raise ValueError(f"{text!r} is not a format like 'EPOCH|MILLISECONDS' or 'EPOCH|SECONDS|1'")
        size = _size(parts[2], text) if len(parts) == 3 else 1
        return DateTimeFormat(kind, size, _unit(parts[1], text))
    if kind is TimeFormatKind.SIMPLE_DATE_FORMAT:
        if len(parts) not in (2, 3) or not parts[1]:
            raise ValueError(f"{text!r} is not a format like 'SIMPLE_DATE_FORMAT|yyyy-MM-dd'")
        return DateTimeFormat(kind, 1, "MILLISECONDS", parts[1])
    return DateTimeFormat(kind)


def _size(text: str, whole: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{whole!r}: size {text!r} must be a positive integer")
    return int(text)


def _unit(text: str, whole: str) -> str:
    unit = text.strip().upper()
    if unit not in TIME_UNIT_MS:
        raise ValueError(f"{whole!r}: {text!r} is not one of {', '.join(TIME_UNIT_MS)}")
    return unit


def _kind(text: str, whole: str) -> TimeFormatKind:
    try:
        return TimeFormatKind(text.strip().upper())
    except ValueError:
        allowed = ", ".join(k.value for k in TimeFormatKind)
        raise ValueError(f"{whole!r}: {text!r} is not one of {allowed}") from None


# Java SimpleDateFormat letters -> strftime, longest first (toDateTime's pattern).
_JAVA_PATTERN = (("yyyy", "%Y"), ("yy", "%y"), ("MMMM", "%B"), ("MMM", "%b"), ("MM", "%m"), ("dd", "%d"),
                 ("HH", "%H"), ("hh", "%I"), ("mm", "%M"), ("ss", "%S"), ("SSS", "%g"), ("EEEE", "%A"),
                 ("EEE", "%a"), ("a", "%p"), ("M", "%-m"), ("d", "%-d"), ("H", "%-H"), ("h", "%-I"), ("m", "%-M"),
                 ("s", "%-S"))


def strftime_pattern(java: str) -> str | None:
    """``java`` as a strftime pattern, or None when it has a field this translation does not know (a zone —
    ``Z``, ``X``, ``z`` — week fields, …): reading such values with a partial pattern would be wrong."""
    unquoted = re.sub(r"'[^']*'", "", java)
    for letters, _ in _JAVA_PATTERN:
        unquoted = unquoted.replace(letters, "")
    return None if re.search(r"[A-Za-z]", unquoted) else java_to_strftime(java)


def java_to_strftime(java: str) -> str:
    """A Java date pattern as a strftime one; text in single quotes is literal (``''`` is a quote)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        if java[i] == "'":
            end = java.find("'", i + 1)
            end = len(java) if end < 0 else end
            out.append("'" if end == i + 1 else java[i + 1:end].replace("%", "%%"))
            i = end + 1
            continue
        for letters, directive in _JAVA_PATTERN:
            if java.startswith(letters, i):
                out.append(directive)
                i += len(letters)
                break
        else:
            out.append("%%" if java[i] == "%" else java[i])
            i += 1
    return "".join(out)
