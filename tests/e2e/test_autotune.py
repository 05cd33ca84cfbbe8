"""An auto-tuned table on a live cluster: with a desired segment size and no row threshold, committed segments
converge on the desired size, and after the rows' cardinality shifts mid-stream they come back within 15% in a
few segments, never reaching twice the target; each segment's metadata records its threshold and the learned
bytes per row. Run in one process and as separate processes (``cuvee cluster up``), where the controller learns from
what servers it only talks to over HTTP report."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.stream import open_admin, open_producer

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, fast_sqlite, log_stream

TABLE = "tuned"
DESIRED = 32 * 1024
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "user", "dataType": "STRING"},
                                                       {"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
PHASE_ROWS = 24_000


AUTOTUNE = {"realtime.segment.flush.threshold.segment.size": str(DESIRED),
            "realtime.segment.flush.autotune.initialRows": "500"}


def test_segment_sizes_converge_on_the_desired_size_and_follow_a_cardinality_shift(tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=1) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=0, **AUTOTUNE)
        drive_and_check(lambda rows: cluster.produce(configs, rows, key_field="id"),
                        lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}"),
                        lambda: cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/metadata").json())


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_separate_processes_converge_and_follow_a_cardinality_shift(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=1, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=30)
    configs = {**log_stream(tmp_path, TABLE, flush_rows=0), **AUTOTUNE}
    try:
        with open_admin(configs) as admin:
            admin.create_topic(TABLE, 1)
        assert http.post(f"{info['controller']}/schemas", json=SCHEMA).status_code < 300
        assert http.post(f"{info['controller']}/tables", json={
            "tableName": TABLE, "tableType": "REALTIME", "segmentsConfig": {"replicasPerPartition": "1"},
            "tableIndexConfig": {"streamConfigs": configs}}).status_code < 300

        def produce(rows: Iterable[dict[str, Any]]) -> None:
            with open_producer(configs) as producer:
                producer.produce_many((str(r["id"]).encode(), orjson.dumps(r)) for r in rows)
                producer.flush()

        def count() -> Any:
            answer = http.post(f"{info['broker']}/query/sql", json={"sql": f"SELECT COUNT(*) FROM {TABLE}"}).json()
            return answer.get("resultTable", {}).get("rows", [[None]])[0][0]

        drive_and_check(produce, count, lambda: http.get(f"{info['controller']}/segments/{TABLE}/metadata").json())
    finally:
        http.close()
        down(tmp_path)


def drive_and_check(produce: Callable[[Iterable[dict[str, Any]]], Any], count: Callable[[], Any],
                    metadata: Callable[[], dict[str, dict[str, Any]]]) -> None:
    """Two phases of rows (user cardinality 50, then 5,000), then the segment sizes judged against the target."""
    rnd = random.Random(7)
    for phase, cardinality in enumerate((50, 5_000)):
        start = phase * PHASE_ROWS
        produce({"user": f"user-{rnd.randrange(cardinality)}", "id": start + i, "v": rnd.randrange(1000)}
                for i in range(PHASE_ROWS))
        wait_until(lambda: count() == start + PHASE_ROWS, 120)

    done = sorted((r for r in metadata().values() if r["status"] == "DONE"), key=lambda r: r["sequence"])
    ratios = [r["sizeBytes"] / DESIRED for r in done]
    shift = next(i for i, r in enumerate(done) if r["endOffset"] > PHASE_ROWS)
    assert shift >= 8, ratios
    assert all(0.85 <= x <= 1.15 for x in ratios[3:shift]), ratios  # steady input: on target
    assert max(ratios) < 2, ratios  # never twice the target, the shift included
    settled = ratios[shift + 5:]
    assert len(settled) >= 3 and all(0.85 <= x <= 1.15 for x in settled), (shift, ratios)
    assert all(r["bytesPerRow"] > 0 for r in done[1:])  # each threshold's R is recorded (not the first's)
