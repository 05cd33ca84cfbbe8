"""Offline segments survive losing a server's disk: a server SIGKILLed, its data directory wiped, and restarted on
its own config re-downloads every offline segment the ideal state gives it (deep store, CRC checked), while the
other replica answers queries exactly the whole time."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import httpx

from cuvee.deploy.local import LocalClusterSpec, down, up
from cuvee.testing.waiting import wait_until
from tests.e2e.support import FAST, fast_sqlite, restart_server
from tests.offline.support import SCHEMA, metadata_push, offline_table, rows

DAY = 86_400_000


def test_a_wiped_server_downloads_its_offline_segments_again(tmp_path: Path) -> None:
    info = up(LocalClusterSpec(dir=tmp_path, servers=2, metadata=fast_sqlite(tmp_path), overrides=FAST))
    http = httpx.Client(timeout=30)
    ctl, broker = info["controller"], info["broker"]
    restarted: subprocess.Popen[bytes] | None = None

    def count() -> int:
        answer = http.post(f"{broker}/query/sql", json={"sql": "SELECT COUNT(*) FROM sales"}).json()
        return -1 if answer.get("exceptions") else int(answer["resultTable"]["rows"][0][0])

    try:
        assert http.post(f"{ctl}/schemas", json=SCHEMA).status_code == 200
        assert http.post(f"{ctl}/tables", json=offline_table(replication=2)).status_code == 200
        for day in range(3):
            pushed = metadata_push(http, ctl, info["deepStore"], tmp_path / "build", f"sales_{day}",
                                   rows(range(day * 1000, day * 1000 + 1000), day * DAY))
            assert pushed.status_code == 200, pushed.text
        wait_until(lambda: count() == 3000, 60, interval=0.1, message=lambda: f"count {count()}")

        victim = "server-0"
        os.kill(info["pids"][victim], signal.SIGKILL)
        data_dir = tmp_path / "data" / victim
        assert any(data_dir.rglob("metadata.json")), "the victim held no segment files"
        shutil.rmtree(data_dir)
        wait_until(lambda: count() == 3000, 60, interval=0.1, message=lambda: f"count after the kill {count()}")

        restarted = restart_server(tmp_path, victim)
        url = info["servers"][0]

        def serves_all() -> bool:
            try:
                held = http.get(f"{url}/tables/sales_OFFLINE/segments").json()["segments"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            crcs = {s["segmentName"]: s.get("crc") for s in held}
            if set(crcs) != {"sales_0", "sales_1", "sales_2"}:
                return False
            for name, crc in crcs.items():
                assert crc == http.get(f"{ctl}/segments/sales/{name}/metadata").json()["crc"]
            return True

        wait_until(serves_all, 60, interval=0.2, message="the wiped server never served its segments again")
        for _ in range(4):  # queries rotate over both replicas
            assert count() == 3000
    finally:
        http.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(30)
        down(tmp_path)
