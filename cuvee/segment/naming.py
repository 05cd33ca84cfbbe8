"""Segment names for offline (batch-built) segments, after Pinot's SimpleSegmentNameGenerator.

``<table>_<minTime>_<maxTime>_<sequence>``, or ``<table>_<sequence>`` when the table has no time column (or the
column holds no value). The table name is the raw one: a ``_OFFLINE``/``_REALTIME`` suffix is dropped.
"""

from __future__ import annotations

import re

from cuvee.config.table import raw_table_name
from cuvee.errors import UserError

_UNSAFE = re.compile(r"[/\\\x00]")


def offline_segment_name(table_name: str, sequence: int, min_time: int | None = None, max_time: int | None = None) -> str:
    table = raw_table_name(table_name)
    if min_time is None or max_time is None:
        return f"{table}_{sequence}"
    return f"{table}_{min_time}_{max_time}_{sequence}"


def check_segment_name(name: str) -> None:
    """A segment name becomes a directory name: refuse anything that could escape the output directory."""
    if not name or name in (".", "..") or name.startswith(".") or _UNSAFE.search(name):
        raise UserError(f"invalid segment name {name!r}: it must be a plain file name (no '/', not starting with '.')")
