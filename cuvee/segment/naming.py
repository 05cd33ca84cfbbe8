"""Segment names for offline (batch-built) segments, after Pinot's SimpleSegmentNameGenerator.

``<table>_<minTime>_<maxTime>_<sequence>``, or ``<table>_<sequence>`` when the table has no time column (or the
column holds no value). The table name is the raw one: a ``_OFFLINE``/``_REALTIME`` suffix is dropped.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from cuvee.config.table import raw_table_name
from cuvee.errors import UserError

_UNSAFE = re.compile(r"[/\\\x00]")


def offline_segment_name(table_name: str, sequence: int, min_time: int | None = None, max_time: int | None = None,
                         postfix: str | None = None) -> str:
    """``postfix`` (Pinot's ``segment.name.postfix``) is appended as ``_<postfix>``; batch jobs put a fingerprint
    of their input there, so a re-run of the same input makes the same names and a changed input new ones."""
    table = raw_table_name(table_name)
    name = f"{table}_{sequence}" if min_time is None or max_time is None else f"{table}_{min_time}_{max_time}_{sequence}"
    return f"{name}_{postfix}" if postfix else name


def check_segment_name(name: str) -> None:
    """A segment name becomes a directory name: refuse anything that could escape the output directory."""
    if not name or name in (".", "..") or name.startswith(".") or _UNSAFE.search(name):
        raise UserError(f"invalid segment name {name!r}: it must be a plain file name (no '/', not starting with '.')")


def time_range(data: pa.Table, time_column: str | None) -> tuple[int | None, int | None]:
    """Min and max of the time column as integers (TIMESTAMP as epoch millis); None when there is no value."""
    if not time_column or time_column not in data.column_names or data.num_rows == 0:
        return None, None
    column = data.column(time_column)
    if not (pa.types.is_integer(column.type) or pa.types.is_timestamp(column.type)):
        return None, None  # e.g. a SIMPLE_DATE_FORMAT string column: name the segment without times
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.int64())
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None or high is None:
        return None, None
    return int(low), int(high)
