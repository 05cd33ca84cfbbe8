"""The shapes a query set's rows are served in: what a user runs, not only the kindest one.

- **offline**: every row in ``segments`` pushed OFFLINE segments (``run.load``): the shape a batch user has, and
  the kindest to a query (every segment committed, copied into DuckDB once the servers settle).
- **realtime**: every row produced through the stream (the embedded log, round-robin over ``partitions`` or keyed
  by a partition column, as JSON, as a producer sends it) into a REALTIME table whose ``realtime.segment.flush.threshold.rows`` leaves at least
  ``CONSUMING_SHARE`` of each partition's rows in its consuming segment: fresh rows are part of every answer, as
  they are for Pinot's realtime users. The segment size is chosen from the row count and the partitions
  (``realtime_segment_rows``); the figures actually reached are read back from the controller (``Layout``).
- **hybrid**: the older half of the rows by the time column pushed OFFLINE, the rest produced into the REALTIME
  table of the same name; the broker splits queries at the time boundary. The boundary is the offline half's end
  time minus a day (Pinot's rule), so the realtime half is given every row after the boundary the controller
  reports (``GET /tables/{t}/timeBoundary``), the last offline day included, as a realtime table that has run
  all along holds it: each row is counted once. A time column of date strings (ClickBench's ``hits``: ``EventTime``,
  ``yyyy-MM-dd HH:mm:ss``) is split by its instants (``cuvee.config.string_times``), and the boundary is compared
  in that format, as the controller reports it. A set without a time column cannot be served hybrid
  (``ShapeUnavailable``).

Pure sizing rules at the top; the loaders talk to a live controller over HTTP and to the stream.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cuvee.cluster.time_boundary import boundary_units, compute_time_boundary
from cuvee.config import Schema, TableConfig
from cuvee.config.string_times import column_string_times, render, to_millis
from cuvee.segment.partitioning import partition_spec
from cuvee.segment.partitioning import partitions as partition_of
from cuvee.stream import open_admin, open_producer
from cuvee.testing.cluster import log_stream_configs
from cuvee.testing.compat.queries import schema
from cuvee.testing.compat.run import TIME_COLUMNS, load, table_config
from cuvee.testing.waiting import wait_until

CONSUMING_SHARE = 0.10  # at least this share of the realtime rows stays in consuming segments
MAX_COMMITTED_PER_PARTITION = 8  # at 9, a tenth of the rows left consuming would be a segment more
PRODUCE_CHUNK_ROWS = 50_000


class TableShape(enum.Enum):
    OFFLINE = "offline"
    REALTIME = "realtime"
    HYBRID = "hybrid"


class ShapeUnavailable(Exception):
    """The set cannot be served in this shape (said why, to the user)."""


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a load produced, read back from the controller where it can be."""

    shape: TableShape
    rows: int  # rows a query sees
    offline_rows: int = 0
    offline_segments: int = 0
    realtime_rows: int = 0  # rows produced to the stream
    partition_sizes: tuple[int, ...] = ()  # each stream partition's rows
    partition_column: str | None = None  # the stream key and the table's segmentPartitionConfig (Murmur)
    flush_threshold_rows: int = 0  # the table config's value (per server, divided among its partitions)
    segment_rows: int = 0  # the rows each realtime segment commits at
    committed_rows: int = 0  # realtime rows in committed segments, once ingest ended
    boundary: str | None = None  # hybrid: the broker's time boundary, as the controller reports it

    @property
    def consuming_rows(self) -> int:
        return self.realtime_rows - self.committed_rows

    def describe(self) -> str:
        parts = []
        if self.offline_rows:
            parts.append(f"{self.offline_rows:,} rows in {self.offline_segments} offline segments")
        if self.realtime_rows:
            share = self.consuming_rows / self.realtime_rows
            keyed = f"keyed by {self.partition_column}" if self.partition_column else "round-robin"
            parts.append(f"{self.realtime_rows:,} rows through the stream ({len(self.partition_sizes)} partitions "
                         f"{keyed}, "
                         f"{self.segment_rows:,}-row segments: flush.threshold.rows {self.flush_threshold_rows:,}), "
                         f"{self.consuming_rows:,} ({share:.0%}) in consuming segments")
        if self.boundary is not None:
            parts.append(f"time boundary {self.boundary}")
        return "; ".join(parts)


# ---- pure sizing -----------------------------------------------------------------------------------------------


def round_robin_sizes(rows: int, partitions: int) -> list[int]:
    """Each partition's rows when ``rows`` are produced without a key (round-robin)."""
    return [rows // partitions + (1 if p < rows % partitions else 0) for p in range(partitions)]


def realtime_segment_rows(sizes: Sequence[int], segments: int) -> int:
    """Rows per realtime segment such that partitions of ``sizes`` rows commit about ``segments`` segments in all
    (at least one, at most ``MAX_COMMITTED_PER_PARTITION``, per partition) and each keeps at least
    ``CONSUMING_SHARE`` of its rows in its consuming segment.

    A partition of ``P`` rows commits ``k`` segments of ``S`` rows and keeps ``P - kS`` consuming when
    ``P / (k + 1) < S <= (1 - share) P / k``; ``S`` is taken in the middle of that range over the smallest and the
    largest partition (fewer committed segments when no size fits them all)."""
    smallest, largest = min(sizes, default=0), max(sizes, default=0)
    if smallest < 1:
        raise ValueError(f"partitions of {list(sizes)} rows: every partition needs rows")
    for committed in range(min(max(round(segments / len(sizes)), 1), MAX_COMMITTED_PER_PARTITION), 0, -1):
        low, high = largest / (committed + 1), (1 - CONSUMING_SHARE) * smallest / committed
        size = math.floor((low + high) / 2)
        if size >= 1 and all(p // size == committed and p - committed * size >= CONSUMING_SHARE * p
                             for p in (smallest, largest)):
            return size
    raise ValueError(f"partitions of {smallest:,} to {largest:,} rows cannot all commit a segment of one size and "
                     f"keep {CONSUMING_SHARE:.0%} consuming")


def busiest_partitions(partitions: int, replicas: int, servers: int) -> int:
    """Consuming partitions on the busiest server, replicas spread evenly: the divisor the controller applies to
    ``realtime.segment.flush.threshold.rows`` (rows per server, as in Pinot)."""
    return math.ceil(partitions * replicas / servers)


def expected_consuming_rows(sizes: Sequence[int], segment_rows: int) -> int:
    """Rows left in consuming segments once partitions of ``sizes`` rows are consumed at ``segment_rows`` a
    segment."""
    return sum(size % segment_rows for size in sizes)


# ---- loading ---------------------------------------------------------------------------------------------------


def load_shape(http: httpx.Client, controller: str, suite: str, rows: pa.Table, shape: TableShape, *,
               stream_dir: Path, segments: int, partitions: int, servers: int, replicas: int,
               partition_column: str | None = None, timeout: float = 600) -> Layout:
    """Serve ``rows`` in ``shape``; returns once every row is produced or pushed (not yet queryable: the caller
    waits on the broker's count). ``partition_column`` (realtime only): each row's stream key is that column's
    value, and the table declares it partitioned on it (Murmur, as Kafka's producers place keys). Raises
    ``ShapeUnavailable`` for a set the shape cannot serve."""
    if partition_column is not None and (shape is not TableShape.REALTIME
                                         or partition_column not in rows.column_names):
        raise ShapeUnavailable(f"{schema(suite)['schemaName']!r} cannot be partitioned on {partition_column!r} "
                               f"in the {shape.value} shape (a column of the table, realtime only)")
    if shape is TableShape.OFFLINE:
        load(http, controller, suite, rows, segments, replicas=replicas)
        return Layout(shape, rows.num_rows, offline_rows=rows.num_rows, offline_segments=segments)
    time_column = TIME_COLUMNS[suite]
    if shape is TableShape.HYBRID and time_column is None:
        raise ShapeUnavailable(f"{schema(suite)['schemaName']!r} has no time column: a hybrid table splits at a "
                               "time boundary, so it cannot be served hybrid")
    name = str(schema(suite)["schemaName"])
    configs = log_stream_configs(name, stream_dir, **{"realtime.segment.flush.threshold.time": "24h"})
    with open_admin(configs) as admin:
        admin.create_topic(name, partitions)
    older, newer, offline_segments, boundary = None, rows, 0, None
    if shape is TableShape.HYBRID:
        assert time_column is not None
        times = _instants(suite, rows)
        order = pc.sort_indices(times)
        older = rows.take(order.slice(0, rows.num_rows // 2))
        offline_segments = max(1, segments // 2)
        load(http, controller, suite, older, offline_segments, replicas=replicas)
        value, boundary = expected_boundary(suite, pc.max(times.take(order.slice(0, rows.num_rows // 2))).as_py())
        newer = rows.filter(pc.greater(times, pa.scalar(value, times.type)))
    else:
        _post(http, f"{controller}/schemas", schema(suite))  # (load posts it for the offline half)
    table = table_config(suite, "REALTIME", replicas=replicas, stream=configs)
    if partition_column is None:
        sizes = round_robin_sizes(newer.num_rows, partitions)
    else:
        table["tableIndexConfig"]["segmentPartitionConfig"] = {"columnPartitionMap": {
            partition_column: {"functionName": "Murmur", "numPartitions": partitions}}}
        table["routing"] = {"segmentPrunerTypes": ["partition"]}  # as Pinot's users declare a partitioned table
        spec = partition_spec(TableConfig.from_json(table).indexing.extra, Schema.from_json(schema(suite)))
        assert spec is not None
        placed = partition_of(newer.column(partition_column).combine_chunks(), spec)
        sizes = [int(n) for n in np.bincount(placed, minlength=partitions)]
    segment_rows = realtime_segment_rows(sizes, segments)
    flush_rows = segment_rows * busiest_partitions(partitions, replicas, servers)
    table["tableIndexConfig"]["streamConfigs"]["realtime.segment.flush.threshold.rows"] = str(flush_rows)
    _post(http, f"{controller}/tables", table)
    if boundary is not None:  # once every offline segment is served; else the realtime half would miss rows
        wait_until(lambda: _time_boundary(http, controller, name) == boundary, timeout,
                   message=lambda: f"the controller's time boundary is {_time_boundary(http, controller, name)}, "
                                   f"Pinot's rule over the offline half gives {boundary}")
    produce_json(configs, newer, partition_column)
    return Layout(shape, rows.num_rows, offline_rows=older.num_rows if older is not None else 0,
                  offline_segments=offline_segments, realtime_rows=newer.num_rows, partition_sizes=tuple(sizes),
                  partition_column=partition_column,
                  flush_threshold_rows=flush_rows, segment_rows=segment_rows, boundary=boundary)


def settled_layout(http: httpx.Client, controller: str, suite: str, layout: Layout) -> Layout:
    """``layout`` with the realtime half's committed rows and segment size as the controller records them."""
    if not layout.realtime_rows:
        return layout
    name = str(schema(suite)["schemaName"])
    records = http.get(f"{controller}/segments/{name}/metadata", params={"type": "REALTIME"}).json().values()
    committed = sum(int(r.get("totalDocs") or 0) for r in records if r.get("status") == "DONE")
    thresholds = {int(r["rowThreshold"]) for r in records if r.get("status") != "DONE" and r.get("rowThreshold")}
    return dataclasses.replace(layout, committed_rows=committed,
                               segment_rows=max(thresholds) if thresholds else layout.segment_rows)


def commits_done(http: httpx.Client, controller: str, suite: str, layout: Layout) -> bool:
    """Every segment the streamed rows fill has committed (the rows left are those ``expected_consuming_rows``
    says stay consuming)."""
    if not layout.realtime_rows:
        return True
    committed = settled_layout(http, controller, suite, layout).committed_rows
    return committed >= layout.realtime_rows - expected_consuming_rows(layout.partition_sizes, layout.segment_rows)


def _instants(suite: str, rows: pa.Table) -> pa.Array:
    """The time column's values as the boundary compares them: epoch values as they are, date strings as epoch
    millis."""
    column = TIME_COLUMNS[suite]
    assert column is not None
    times = column_string_times(Schema.from_json(schema(suite)), column)
    values = rows.column(column)
    return to_millis(values, times) if times is not None else values.combine_chunks()


def expected_boundary(suite: str, latest: int) -> tuple[int, str]:
    """The time boundary the broker will split ``suite``'s hybrid table at once an offline half whose latest
    instant is ``latest`` (``_instants``) is served (Pinot's rule, ``cuvee.cluster.time_boundary``; the offline
    half is pushed DAILY): its value, and its text as the controller reports it (in the column's format)."""
    column = TIME_COLUMNS[suite]
    parsed = Schema.from_json(schema(suite))
    units = boundary_units(parsed, column)
    if column is None or units is None:
        raise ShapeUnavailable(f"{suite}: no time column a boundary can be computed on")
    boundary = compute_time_boundary([latest], units[0], None, units[1])
    assert boundary is not None
    times = column_string_times(parsed, column)
    return boundary, render(boundary, times.pattern) if times is not None else str(boundary)


def produce_json(stream_configs: Mapping[str, str], rows: pa.Table, key_column: str | None = None) -> int:
    """Every row as a JSON object (DuckDB's ``to_json``: a producer's message), keyed by ``key_column``'s value
    as text (the stream places it by its murmur2 hash), or without a key (round-robin)."""
    con = duckdb.connect()
    sent = 0
    with open_producer(stream_configs) as producer:
        for start in range(0, rows.num_rows, PRODUCE_CHUNK_ROWS):
            chunk = rows.slice(start, PRODUCE_CHUNK_ROWS)  # noqa: F841 (DuckDB reads it by name)
            values = con.sql("SELECT to_json(c) AS j FROM chunk AS c").to_arrow_table().column("j")
            keys = ([str(k).encode() for k in chunk.column(key_column).to_pylist()] if key_column is not None
                    else itertools.repeat(None))
            sent += producer.produce_many(zip(keys, values.cast(pa.binary()).to_pylist(), strict=False))
        producer.flush()
    con.close()
    return sent


def _time_boundary(http: httpx.Client, controller: str, table: str) -> str | None:
    answer = http.get(f"{controller}/tables/{table}/timeBoundary")
    return answer.json()["timeValue"] if answer.status_code == 200 else None


def _post(http: httpx.Client, url: str, doc: Mapping[str, Any]) -> None:
    response = http.post(url, json=doc)
    if response.status_code >= 300:
        raise RuntimeError(f"POST {url}: {response.status_code} {response.text[:500]}")
