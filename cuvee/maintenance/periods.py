"""Pinot's time periods (``TimeUtils.convertPeriodToMillis``): ``"1d"``, ``"12h"``, ``"30m"``, ``"10s"`` and
their concatenations (``"1d12h"``), case-insensitive. Pure."""

from __future__ import annotations

import re

_UNITS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000}
_PART = re.compile(r"(\d{1,9})([dhms])")
MAX_PERIOD_MS = 3650 * 86_400_000  # ten years: anything longer is a typo, not a bucket


def period_ms(text: str) -> int:
    """Milliseconds in ``text``; ValueError (with the accepted form) for anything else, zero included."""
    value = text.strip().lower() if isinstance(text, str) else ""
    parts = _PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{text!r} is not a time period like 1d, 6h, 30m, 10s or 1d12h")
    total = sum(int(n) * _UNITS[u] for n, u in parts)
    if not 0 < total <= MAX_PERIOD_MS:
        raise ValueError(f"{text!r} must be longer than 0 and at most 3650d")
    return total


def format_period(ms: int) -> str:
    """The shortest Pinot spelling of ``ms`` (for messages and ``GET /tasks``)."""
    out = []
    for unit, size in _UNITS.items():
        if ms >= size:
            out.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(out) or "0s"
