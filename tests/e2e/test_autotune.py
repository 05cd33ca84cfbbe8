"""An auto-tuned table on a live cluster: with a desired segment size and no row threshold, committed segments
converge on the desired size, and after the rows' cardinality shifts mid-stream they come back within 15% in a
few segments, never reaching twice the target; each segment's metadata records its threshold and the learned
bytes per row."""

from __future__ import annotations

import random
from pathlib import Path

from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

TABLE = "tuned"
DESIRED = 32 * 1024
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "user", "dataType": "STRING"},
                                                       {"name": "id", "dataType": "LONG"}],
          "metricFieldSpecs": [{"name": "v", "dataType": "LONG"}]}
PHASE_ROWS = 24_000


def test_segment_sizes_converge_on_the_desired_size_and_follow_a_cardinality_shift(tmp_path: Path) -> None:
    with InProcessCluster(tmp_path, servers=1) as cluster:
        configs = cluster.realtime_table(SCHEMA, partitions=1, replicas=1, flush_rows=0, **{
            "realtime.segment.flush.threshold.segment.size": str(DESIRED),
            "realtime.segment.flush.autotune.initialRows": "500"})
        rnd = random.Random(7)
        for phase, cardinality in enumerate((50, 5_000)):
            start = phase * PHASE_ROWS
            rows = ({"user": f"user-{rnd.randrange(cardinality)}", "id": start + i, "v": rnd.randrange(1000)}
                    for i in range(PHASE_ROWS))
            cluster.produce(configs, rows, key_field="id")
            wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == start + PHASE_ROWS, 120)

        records = cluster.http.get(f"{cluster.controller_url}/segments/{TABLE}/metadata").json().values()
        done = sorted((r for r in records if r["status"] == "DONE"), key=lambda r: r["sequence"])
        ratios = [r["sizeBytes"] / DESIRED for r in done]
        shift = next(i for i, r in enumerate(done) if r["endOffset"] > PHASE_ROWS)
        assert shift >= 8, ratios
        assert all(0.85 <= x <= 1.15 for x in ratios[3:shift]), ratios  # steady input: on target
        assert max(ratios) < 2, ratios  # never twice the target, the shift included
        settled = ratios[shift + 5:]
        assert len(settled) >= 3 and all(0.85 <= x <= 1.15 for x in settled), (shift, ratios)
        assert all(r["bytesPerRow"] > 0 for r in done[1:])  # each threshold's R is recorded (not the first's)
