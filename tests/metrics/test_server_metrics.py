"""The server's consuming-segment gauges: one series per (table, partition), even with two consuming segments of
one partition held at once (mid-commit, pauseless)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cuvee.metrics.server import ServerMetrics


def test_two_consuming_segments_of_a_partition_make_one_series() -> None:
    metrics = ServerMetrics()
    segments = [("t_REALTIME", {"partition": 0, "currentOffset": 100, "lastConsumedTimestampMs": 9_000,
                                "rowsConsumed": 100, "memoryBytes": 1_000}),
                ("t_REALTIME", {"partition": 0, "currentOffset": 130, "lastConsumedTimestampMs": 9_900,
                                "rowsConsumed": 30, "memoryBytes": 300, "recordsLag": 12}),
                ("t_REALTIME", {"partition": 1, "currentOffset": 7, "lastConsumedTimestampMs": None,
                                "rowsConsumed": 0, "memoryBytes": 0})]
    metrics.watch_consuming(lambda: segments, clock=lambda: 10.0)
    samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            key = (s.name, s.labels.get("partition"))
            assert key not in samples, f"two series for {key}"
            samples[key] = s.value
    assert samples[("cuvee_server_consuming_offset", "0")] == 130  # the newest segment's
    assert samples[("cuvee_server_ingestion_delay_ms", "0")] == 100  # 10,000 ms now - 9,900
    assert samples[("cuvee_server_consuming_rows", "0")] == 130 and samples[("cuvee_server_consuming_memory_bytes", "0")] == 1_300
    assert samples[("cuvee_server_partitions_consuming", None)] == 3
    assert samples[("cuvee_server_offset_lag", "0")] == 12 and ("cuvee_server_offset_lag", "1") not in samples


def test_series_of_tables_that_are_gone_are_dropped() -> None:
    metrics = ServerMetrics()
    metrics.rows_consumed.labels("a_REALTIME", "0").inc(5)
    metrics.rows_consumed.labels("b_REALTIME", "0").inc(7)
    metrics.downloads.labels("b_REALTIME", "peer").inc()
    metrics.keep_tables({"a_REALTIME"})
    text = generate_latest(metrics.registry).decode()
    assert 'table="a_REALTIME"' in text and "b_REALTIME" not in text
