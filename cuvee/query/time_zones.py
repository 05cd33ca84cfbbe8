"""The time-zone ids Pinot's date-time functions accept, read into a zone DuckDB can use. Pure.

Pinot looks zones up as ``TimeZoneKey`` (``dateTrunc``) and Joda's ``DateTimeZone.forID`` (date patterns) do: an
IANA name in any letter case (``america/los_angeles``; ``Etc/GMT+5`` is five hours *behind* UTC, as in the tz
database), the names of UTC (``UTC``, ``GMT``, ``Z``, ``UT``, ``Zulu``…), and fixed offsets: ``+05:30``,
``-08:00``, ``+5``, ``-0800``, optionally after ``UTC``, ``GMT`` or ``UT`` (``GMT+05:30``, ``UTC-3``).

``zone_id`` answers ``"UTC"``, an IANA name DuckDB's ``timezone()`` knows, or a fixed offset written ``±HH:MM``,
which DuckDB does not read as a zone: ``offset_seconds`` tells the caller to shift by it instead (a fixed offset
has no daylight saving time, so the shift is the whole conversion).
"""

from __future__ import annotations

import functools
import re
import zoneinfo

_UTC_NAMES = {"utc", "z", "ut", "uct", "gmt", "gmt0", "greenwich", "universal", "zulu"}
_OFFSET = re.compile(r"^([+-])(\d{1,2})(?::?(\d{2}))?$")
_FIXED = re.compile(r"^([+-])(\d{2}):(\d{2})$")
_MAX_HOURS = 18  # java.time.ZoneOffset's range


@functools.lru_cache(maxsize=1)
def _iana_names() -> dict[str, str]:
    """Every IANA zone name of the system's database, by its lower-case spelling."""
    return {name.lower(): name for name in zoneinfo.available_timezones()}


@functools.lru_cache(maxsize=256)
def _known(name: str) -> str | None:
    """``name`` as the tz database spells it (exactly, else ignoring case), None when it is no IANA name."""
    try:
        zoneinfo.ZoneInfo(name)
        return name
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return _iana_names().get(name.lower())


def _offset(text: str) -> str | None:
    """``±H``, ``±HH``, ``±HHMM`` or ``±HH:MM`` as ``±HH:MM`` (``UTC`` for zero), None when it is none of them."""
    match = _OFFSET.match(text)
    if match is None:
        return None
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    if hours > _MAX_HOURS or minutes > 59 or (hours == _MAX_HOURS and minutes):
        return None
    return "UTC" if hours == minutes == 0 else f"{sign}{hours:02d}:{minutes:02d}"


def zone_id(text: str) -> str | None:
    """The zone ``text`` names, as ``UTC``, an IANA name or ``±HH:MM``; None when Pinot would not know it."""
    name = text.strip()
    lower = name.lower()
    bare = lower[4:] if lower.startswith("etc/") else lower
    if bare in _UTC_NAMES:
        return "UTC"
    known = _known(name)
    if known is not None:
        return known
    for prefix in ("utc", "gmt", "ut"):
        if bare.startswith(prefix) and len(bare) > len(prefix) and bare[len(prefix)] in "+-":
            if lower.startswith("etc/"):
                return None  # Etc/GMT±H is an IANA name (found above); other Etc/ offsets are not
            return _offset(bare[len(prefix):])
    return _offset(bare)


def offset_seconds(zone: str) -> int | None:
    """The shift of a fixed-offset zone (``±HH:MM``) from UTC, in seconds; None for UTC and named zones."""
    match = _FIXED.match(zone)
    if match is None:
        return None
    seconds = int(match.group(2)) * 3600 + int(match.group(3)) * 60
    return seconds if match.group(1) == "+" else -seconds
