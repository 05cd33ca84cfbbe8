"""A server's metrics: ingestion per (table, partition), segment builds and downloads, consuming segments."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cuvee.metrics import keep_label_values, new_registry

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = new_registry()
        r = self.registry
        per_partition = ("table", "partition")
        self.rows_consumed = Counter("cuvee_server_rows_consumed", "Rows stored by consuming segments",
                                     per_partition, registry=r)
        self.rows_filtered = Counter("cuvee_server_rows_filtered", "Rows the ingestion filter dropped",
                                     per_partition, registry=r)
        self.bad_rows = Counter("cuvee_server_bad_rows", "Messages that could not be decoded or transformed",
                                per_partition, registry=r)
        self.bytes_consumed = Counter("cuvee_server_bytes_consumed", "Message bytes read from the stream",
                                      per_partition, registry=r)
        self.messages_lost = Counter("cuvee_server_messages_lost", "Messages removed by stream retention before this "
                                     "replica read them (data lost unless another replica has them)",
                                     per_partition, registry=r)
        self.build_seconds = Histogram("cuvee_server_segment_build_seconds", "Building a consuming segment's "
                                       "immutable copy", ("table",), buckets=_SECONDS, registry=r)
        self.build_failures = Counter("cuvee_server_segment_build_failures", "Segment builds that failed",
                                      ("table",), registry=r)
        self.upload_seconds = Histogram("cuvee_server_segment_upload_seconds", "Uploading a committed segment to the "
                                        "deep store", ("table",), buckets=_SECONDS, registry=r)
        self.upload_failures = Counter("cuvee_server_segment_upload_failures", "Deep-store uploads that failed "
                                       "(the segment commits without a download URI)", ("table",), registry=r)
        self.downloads = Counter("cuvee_server_segment_downloads", "Committed segments fetched, by source",
                                 ("table", "source"), registry=r)
        self.download_failures = Counter("cuvee_server_segment_download_failures", "Segment fetch attempts that "
                                         "found no good copy", ("table",), registry=r)
        self.download_seconds = Histogram("cuvee_server_segment_download_seconds", "Fetching a committed segment",
                                          ("table",), buckets=_SECONDS, registry=r)

    def keep_tables(self, tables: Collection[str]) -> None:
        """Drop every series of a table not in ``tables`` (the tables that exist: names with type)."""
        keep_label_values(self, "table", lambda value: value in tables)

    def watch_consuming(self, segments: Callable[[], Iterable[tuple[str, dict[str, Any]]]],
                        clock: Callable[[], float] = time.time) -> None:
        """Gauges read at scrape time from ``segments()``: (table, consuming segment info) of each consuming
        segment held (``ConsumingSegment.info``)."""
        self.registry.register(_ConsumingCollector(segments, clock))

    def watch_native_copies(self, summary: Callable[[], tuple[dict[str, tuple[int, int]], int, int]]) -> None:
        """Gauges of the DuckDB copies read at scrape time from ``summary()`` (``NativeCopies.summary``)."""
        self.registry.register(_NativeCopiesCollector(summary))


class _NativeCopiesCollector(Collector):
    """The DuckDB copies of committed segments (``cuvee.server.native_copies``), read at scrape time."""

    def __init__(self, summary: Callable[[], tuple[dict[str, tuple[int, int]], int, int]]):
        self._summary = summary

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        tables, counted, building = self._summary()
        copies = GaugeMetricFamily("cuvee_server_native_copies", "Committed segments with a DuckDB copy ready",
                                   labels=["table"])
        size = GaugeMetricFamily("cuvee_server_native_copy_bytes", "Bytes of the ready DuckDB copies (as counted "
                                 "against native_copy_bytes)", labels=["table"])
        for table, (count, nbytes) in sorted(tables.items()):
            copies.add_metric([table], count)
            size.add_metric([table], nbytes)
        yield copies
        yield size
        yield GaugeMetricFamily("cuvee_server_native_copy_budget_used_bytes", "Bytes counted against "
                                "native_copy_bytes: ready copies, copies being made, deleted rows not compacted yet",
                                value=counted)
        yield GaugeMetricFamily("cuvee_server_native_copies_building", "DuckDB copies asked for and not made yet",
                                value=building)


class _ConsumingCollector(Collector):
    def __init__(self, segments: Callable[[], Iterable[tuple[str, dict[str, Any]]]], clock: Callable[[], float]):
        self._segments = segments
        self._clock = clock

    def describe(self) -> list[Any]:
        return []  # collected on each scrape (the consuming segments change)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        delay = GaugeMetricFamily("cuvee_server_ingestion_delay_ms", "Now minus the stream timestamp of the newest "
                                  "message consumed (0 before the first)", labels=["table", "partition"])
        rows = GaugeMetricFamily("cuvee_server_consuming_rows", "Rows in consuming segments",
                                 labels=["table", "partition"])
        memory = GaugeMetricFamily("cuvee_server_consuming_memory_bytes", "Bytes held by consuming segments",
                                   labels=["table", "partition"])
        offset = GaugeMetricFamily("cuvee_server_consuming_offset", "The next stream offset a consuming segment "
                                   "reads", labels=["table", "partition"])
        lag = GaugeMetricFamily("cuvee_server_offset_lag", "Offsets the stream holds beyond the newest consuming "
                                "segment's position, as its replica last saw the stream's latest offset",
                                labels=["table", "partition"])
        consuming = GaugeMetricFamily("cuvee_server_partitions_consuming", "Consuming segments held",
                                      labels=["table"])
        per_table: dict[str, int] = {}
        # A partition can have two consuming segments here at once (mid-commit; pauseless): one series each label
        # set, the newest segment's delay and offset, the rows and memory of both.
        merged: dict[tuple[str, str], dict[str, float]] = {}
        now_ms = self._clock() * 1000
        for table, info in self._segments():
            key = (table, str(info.get("partition", "")))
            last = info.get("lastConsumedTimestampMs")
            current = merged.setdefault(key, {"rows": 0, "memory": 0, "offset": -1, "delay": 0, "lag": -1})
            current["rows"] += info.get("rowsConsumed") or 0
            current["memory"] += info.get("memoryBytes") or 0
            at = info.get("currentOffset") or 0
            if at >= current["offset"]:
                current["offset"] = at
                current["delay"] = max(now_ms - last, 0) if last is not None else 0
                current["lag"] = info["recordsLag"] if info.get("recordsLag") is not None else -1
            per_table[table] = per_table.get(table, 0) + 1
        for (table, partition), values in sorted(merged.items()):
            labels = [table, partition]
            delay.add_metric(labels, values["delay"])
            rows.add_metric(labels, values["rows"])
            memory.add_metric(labels, values["memory"])
            offset.add_metric(labels, max(values["offset"], 0))
            if values["lag"] >= 0:  # not known before the replica's first look at the stream
                lag.add_metric(labels, values["lag"])
        for table, count in sorted(per_table.items()):
            consuming.add_metric([table], count)
        yield from (delay, rows, memory, offset, lag, consuming)


class IngestionMeter:
    """One consuming segment's counters (its table and partition's children), fed by its consume loop."""

    def __init__(self, metrics: ServerMetrics, table: str, partition: int):
        labels = (table, str(partition))
        self._rows = metrics.rows_consumed.labels(*labels)
        self._filtered = metrics.rows_filtered.labels(*labels)
        self._bad = metrics.bad_rows.labels(*labels)
        self._bytes = metrics.bytes_consumed.labels(*labels)
        self._lost = metrics.messages_lost.labels(*labels)

    def batch(self, rows: int, filtered: int, bad: int, nbytes: int) -> None:
        self._rows.inc(rows)
        self._filtered.inc(filtered)
        self._bad.inc(bad)
        self._bytes.inc(nbytes)

    def lost(self, messages: int) -> None:
        self._lost.inc(messages)
