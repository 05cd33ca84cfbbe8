"""The lead controller SIGKILLed while segments commit, as separate processes: a standby takes over the
completion protocol, ingestion and commits go on, and no row is lost or doubled."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import (
    FAST,
    counts,
    create_id_table,
    fast_sqlite,
    log_stream,
    produce_ids,
    start_standby_controller,
)

TABLE = "takeover"


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_standby_controller_takes_over_and_nothing_is_lost(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=30)
    configs = log_stream(tmp_path, TABLE, flush_rows=4000)
    standby, standby_url = start_standby_controller(tmp_path)

    def produce(start: int, end: int) -> None:
        produce_ids(configs, start, end)

    def count() -> tuple[int, int]:
        return counts(http, info["broker"], TABLE)

    try:
        create_id_table(http, info["controller"], TABLE, configs)
        assert http.get(f"{standby_url}/health").json()["leader"] is False

        produce(0, 6_000)
        os.kill(info["pids"]["controller"], signal.SIGKILL)  # while the first segments commit
        produce(6_000, 20_000)
        wait_until(lambda: http.get(f"{standby_url}/health").json()["leader"], 30, interval=0.1,
                   message="the standby never took over")
        wait_until(lambda: count() == (20_000, 20_000), 120, interval=0.2,
                   message=lambda: f"count after the takeover: {count()}")

        def committed_after_takeover() -> bool:
            ideal = http.get(f"{standby_url}/tables/{TABLE}/idealstate").json()
            ideal = ideal.get("REALTIME", ideal)
            online = [s for s, r in ideal.items() if r and set(r.values()) == {"ONLINE"}]
            return len(online) >= 4  # 20,000 rows over 2 partitions at 2,000 rows per segment
        wait_until(committed_after_takeover, 120, interval=0.2, message="commits did not go on under the standby")
    finally:
        http.close()
        standby.terminate()
        standby.wait(30)
        down(tmp_path)
