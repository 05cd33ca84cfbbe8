"""Durations ("6h", "1d2h", "100ms") and data sizes ("200M", "150MB", "1.5G") as Pinot writes them in configs.

Pure functions: they raise ValueError with a readable message; callers turn that into a ConfigIssue with a path.
"""

from __future__ import annotations

import re
from decimal import Decimal

_DURATION_UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
# Largest unit first so that formatting picks the shortest spelling.
_DURATION_ORDER = ("d", "h", "m", "s", "ms")
_DURATION_PART = re.compile(r"(\d+)\s*(ms|d|h|m|s)", re.IGNORECASE)
_DURATION_WHOLE = re.compile(r"\s*(?:\d+\s*(?:ms|d|h|m|s)\s*)+", re.IGNORECASE)

_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(B?)\s*", re.IGNORECASE)


def parse_duration_ms(text: str | int) -> int:
    """Milliseconds in a Pinot period ("6h", "30m", "1d", "100ms", "10s", "1h30m"); a bare integer is milliseconds.

    Pinot accepts both forms for ``realtime.segment.flush.threshold.time``, so we do too.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text!r} is negative")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration")
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    if not _DURATION_WHOLE.fullmatch(text):
        raise ValueError(f"{text!r} is not a duration like '6h', '30m', '1d', '10s', '100ms' or '1h30m'")
    return sum(int(n) * _DURATION_UNITS_MS[unit.lower()] for n, unit in _DURATION_PART.findall(text))


def format_duration_ms(ms: int) -> str:
    """The shortest Pinot period string for ``ms`` (inverse of parse_duration_ms)."""
    if ms < 0:
        raise ValueError(f"{ms} is negative")
    if ms == 0:
        return "0ms"
    parts = []
    for unit in _DURATION_ORDER:
        count, ms = divmod(ms, _DURATION_UNITS_MS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_size_bytes(text: str | int) -> int:
    """Bytes in a Pinot data size ("200M", "150MB", "1G", "500K", "1.5G"); units are powers of 1024 as in Pinot.

    A bare number is bytes.
    """
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a data size")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"{text!r} is negative")
        return text
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a data size")
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a data size like '200M', '150MB', '1G' or '500K'")
    number, unit, _ = match.groups()
    # Decimal, not float: sizes above 2**53 bytes must stay exact.
    return int(Decimal(number) * _SIZE_UNITS[unit.upper()])


def format_size_bytes(size: int) -> str:
    """The largest exact unit spelling of ``size`` ("200M" for 200 MiB, "1000" for 1000 bytes)."""
    if size < 0:
        raise ValueError(f"{size} is negative")
    for unit in ("P", "T", "G", "M", "K"):
        factor = _SIZE_UNITS[unit]
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
