"""The lead controller SIGKILLed in the middle of an auto-tuned stream, as separate processes: the standby that
takes over learns on from the bytes per row recorded in segment metadata, so the thresholds it gives stay where the
old leader had brought them (not back to the initial guess) and segments stay near the desired size."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, counts, create_id_table, fast_sqlite, log_stream, produce_ids, \
    start_standby_controller

TABLE = "tunedover"
DESIRED = 24 * 1024
INITIAL = 300


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_new_leader_keeps_the_learned_threshold(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=1, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=30)
    configs = {**log_stream(tmp_path, TABLE, flush_rows=0),
               "realtime.segment.flush.threshold.segment.size": str(DESIRED),
               "realtime.segment.flush.autotune.initialRows": str(INITIAL)}
    standby, standby_url = start_standby_controller(tmp_path)

    def records() -> list[dict]:
        found = http.get(f"{standby_url}/segments/{TABLE}/metadata").json().values()
        return sorted(found, key=lambda r: r["sequence"])

    try:
        create_id_table(http, info["controller"], TABLE, configs, partitions=1, replicas=1)
        produce_ids(configs, 0, 12_000)
        wait_until(lambda: counts(http, info["broker"], TABLE) == (12_000, 12_000), 120, interval=0.2)
        before = [r for r in records() if r["status"] == "DONE"]
        assert len(before) >= 4, before
        learned = records()[-1]  # the consuming segment the old leader created: its threshold and R
        assert learned["bytesPerRow"] and learned["rowThreshold"] > INITIAL

        os.kill(info["pids"]["controller"], signal.SIGKILL)
        wait_until(lambda: http.get(f"{standby_url}/health").json()["leader"], 30, interval=0.1,
                   message="the standby never took over")
        produce_ids(configs, 12_000, 24_000)
        wait_until(lambda: counts(http, info["broker"], TABLE) == (24_000, 24_000), 120, interval=0.2)
        now = records()
        after = [r for r in now if r["sequence"] > learned["sequence"]]
        assert len(after) >= 3, after
        # The new leader's first R continues the old one's average (alpha 0.75; under the default "each" policy the
        # one partition's R moves by a quarter of its error in log space), not a fresh start from one segment.
        [committed] = [r for r in now if r["segmentName"] == learned["segmentName"]]
        own = committed["sizeBytes"] / committed["totalDocs"]
        assert after[0]["bytesPerRow"] == pytest.approx(learned["bytesPerRow"] * (own / learned["bytesPerRow"]) ** 0.25,
                                                        rel=1e-9)
        assert after[0]["bytesPerRow"] != pytest.approx(own, rel=1e-9)
        for record in after:  # created by the new leader from the recorded R: nowhere near the initial guess
            assert abs(record["rowThreshold"] - learned["rowThreshold"]) <= 0.2 * learned["rowThreshold"], record
        sizes = [r["sizeBytes"] / DESIRED for r in after if r["status"] == "DONE"]
        assert sizes and all(0.8 <= s <= 1.2 for s in sizes), sizes
    finally:
        standby.terminate()
        standby.wait(10)
        http.close()
        down(tmp_path)
