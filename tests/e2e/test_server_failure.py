"""A server killed with SIGKILL mid-ingest, as separate processes: the surviving replicas keep ingesting and
committing, no row is lost or doubled, and the killed server, restarted on its config, serves its segments again
with the committed CRCs."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, counts, create_id_table, fast_sqlite, log_stream, produce_ids, restart_server

TABLE = "failover"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_killed_server_loses_nothing_and_serves_again_after_restart(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=3, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=30)
    restarted: subprocess.Popen[bytes] | None = None
    configs = log_stream(tmp_path, TABLE, flush_rows=8000)

    def produce(start: int, end: int) -> None:
        produce_ids(configs, start, end)

    def count() -> tuple[int, int]:
        return counts(http, info["broker"], TABLE)

    try:
        create_id_table(http, info["controller"], TABLE, configs)
        produce(0, 10_000)
        wait_until(lambda: count() == (10_000, 10_000), 60, interval=0.1)

        victim = "server-0"
        os.kill(info["pids"][victim], signal.SIGKILL)
        produce(10_000, 30_000)
        wait_until(lambda: count() == (30_000, 30_000), 120, interval=0.2,
                   message=lambda: f"count after the kill: {count()}")

        # Restart the killed server on its own config: same port, same instance id.
        restarted = restart_server(tmp_path, victim)
        url = info["servers"][0]

        def serves_committed() -> bool:
            try:
                held = http.get(f"{url}/tables/{TABLE}_REALTIME/segments").json()["segments"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            committed = [s for s in held if "crc" in s]
            if not committed:
                return False
            for s in committed:
                meta = http.get(f"{info['controller']}/segments/{TABLE}/{s['segmentName']}/metadata").json()
                assert s["crc"] == meta["crc"], (s, meta)
            return True

        wait_until(serves_committed, 120, interval=0.2, message="the restarted server serves no committed segment")
        produce(30_000, 32_000)
        wait_until(lambda: count() == (32_000, 32_000), 120, interval=0.2,
                   message=lambda: f"count after the restart: {count()}")
    finally:
        http.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(30)
        down(tmp_path)
